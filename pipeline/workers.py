"""Steps on Celery workers: the executor a run sends its steps through, and the worker process that runs them.

With `SEEDWHEEL_CELERY_BROKER` set (a Redis URL), every job's executor is dagster-celery's: the run process plans
the steps and queues each on the broker, and `seedwheel worker` processes on any machine that shares the settings
(the same storage root and production database) take them one by one, each executing its step in its own process
and writing its events to the instance. Dagster's run config names the broker's variable, never its URL, so a
password in it is not stored with the run; the worker builds its Celery app from the settings instead of
`dagster-celery worker start`, which writes the URL into a file under the Dagster home.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from core.errors import SeedwheelError
from pipeline.settings import CELERY_BROKER_ENV, Settings

# The queue dagster-celery's executor routes steps to (dagster_celery.make_app's task routes).
QUEUE = "dagster"


class WorkerUnavailable(SeedwheelError, ImportError):
    """dagster-celery is not installed where steps are to run on Celery."""


def step_executor(settings: Settings) -> dg.ExecutorDefinition | None:
    """The executor of every job: dagster-celery's when a broker is configured, else None (Dagster's default:
    a process per step on this machine)."""
    if not settings.celery_broker:
        return None
    from_env = {"env": CELERY_BROKER_ENV}
    return _celery().celery_executor.configured({"broker": from_env, "backend": from_env})


def run_worker(settings: Settings, *, concurrency: int = 1, name: str = "") -> None:
    """Run a Celery worker for this project's steps until it is stopped (SIGTERM finishes the step in hand).

    Args:
        settings: the same settings the runs use (storage root, database, broker).
        concurrency: steps at a time. 1 runs each step in the worker's own process, one after another; more
            forks that many pool processes.
        name: the worker's node name (`name@host`); Celery's default when empty.
    """
    if not settings.celery_broker:
        raise WorkerUnavailable(
            "a worker needs the broker runs send their steps to", hint=f"set {CELERY_BROKER_ENV}=redis://host:6379/0"
        )
    _celery()  # a clear error when it is not installed
    from dagster_celery.executor import CeleryExecutor
    from dagster_celery.make_app import make_app
    from dagster_celery.tasks import create_task

    app_args = CeleryExecutor.for_cli(broker=settings.celery_broker, backend=settings.celery_broker).app_args()
    app = make_app(app_args)
    create_task(app)  # the task the executor queues: execute one step of a run
    pool = ["--pool", "solo"] if concurrency == 1 else ["--pool", "prefork", "--concurrency", str(concurrency)]
    hostname = ["--hostname", name] if name else []
    options = ["--queues", QUEUE, "--prefetch-multiplier", "1", "--loglevel", "INFO", *pool, *hostname]
    app.worker_main(["worker", *options])


def _celery() -> Any:
    try:
        import dagster_celery
    except ImportError as exc:
        raise WorkerUnavailable(
            f"steps on Celery ({CELERY_BROKER_ENV} is set) need dagster-celery, which is not installed",
            hint="pip install 'seedwheel[celery]', or unset the variable to run steps on this machine",
        ) from exc
    return dagster_celery
