"""The persistent Dagster instance the CLI and the UI share, and its run-queue and pool limits."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import dagster as dg
from upath import UPath

from core.database import DATABASE_URL_ENV, connect
from core.state import file_lock
from core.tables import atomic_write
from pipeline.settings import Settings

EXCLUSIVE_TAG = "seedwheel/exclusive"
# Which process runs a CLI run (host:pid): a run whose process is gone was killed and is reaped.
PROCESS_TAG = "seedwheel/process"
# The first line of a dagster.yaml seedwheel writes: such a file is regenerated when the settings call for another
# one (the database switched on), a file without it is the user's and is used as it is.
GENERATED = "# Written by seedwheel (pipeline/instance.py) from its settings; remove this line to keep your edits.\n"
# Offline machines must not try to send telemetry. The run queue (the daemon, which `dagster dev` starts) holds a
# second run of an exclusive kind (two nightly regenerations) until the first ends, and the `gpu` pool runs one
# training step at a time. The packages' own progress lines (prompts sampled, episode turns, LLM batches, model
# servers started) go to the run's log as they come, so a long step is seen to move in the UI and the terminal.
MANAGED_LOGGERS = (
    *("training", "langmodels", "judge", "generators", "curation", "validators", "sandbox", "failures"),
    *("simulation", "review", "interop"),
)
INSTANCE_YAML = f"""\
telemetry:
  enabled: false
nux:
  enabled: false
python_logs:
  python_log_level: INFO
  managed_python_loggers: [{", ".join(MANAGED_LOGGERS)}]
concurrency:
  pools:
    default_limit: 1
  runs:
    tag_concurrency_limits:
      - key: {EXCLUSIVE_TAG}
        value:
          applyLimitPerUniqueValue: true
        limit: 1
"""
# With the production database, runs, events and schedules live in PostgreSQL (dagster-postgres), where every
# machine of a cluster sees them; the URL is read from the variable when the instance opens, never written here.
POSTGRES_STORAGE_YAML = f"""\
storage:
  postgres:
    postgres_url:
      env: {DATABASE_URL_ENV}
"""


# With the storage root on S3, steps' stdout and stderr go beside it (dagster-aws, the s3 extra), where the UI of
# any machine reads them, instead of files under the Dagster home of the machine that ran the step.
S3_COMPUTE_LOGS_YAML = """\
compute_logs:
  module: dagster_aws.s3.compute_log_manager
  class: S3ComputeLogManager
  config:
    bucket: {bucket}
    prefix: {prefix}
"""


def instance_yaml(settings: Settings) -> str:
    """The dagster.yaml `settings` call for: the run queue and pools, the storage (local SQLite files under the
    Dagster home, or the production database) and, with the storage root on S3, the compute logs beside it.

    Example:
        >>> from pipeline.settings import Settings
        >>> print(instance_yaml(Settings.from_env({"SEEDWHEEL_HOME": "s3://bucket/seedwheel"})).split("compute_logs:")[1])
        <BLANKLINE>
          module: dagster_aws.s3.compute_log_manager
          class: S3ComputeLogManager
          config:
            bucket: bucket
            prefix: seedwheel/compute_logs
        <BLANKLINE>
    """
    storage = POSTGRES_STORAGE_YAML if settings.database_url else ""
    if isinstance(settings.home, UPath) and settings.home.protocol in ("s3", "s3a"):
        bucket, _, prefix = settings.home.path.partition("/")
        storage += S3_COMPUTE_LOGS_YAML.format(bucket=bucket, prefix="/".join(filter(None, [prefix, "compute_logs"])))
    return GENERATED + INSTANCE_YAML + storage


def open_instance(settings: Settings) -> dg.DagsterInstance:
    """The persistent instance at `settings.dagster_home`, its dagster.yaml written (or brought up to date) first.

    Raises:
        core.database.DatabaseUnavailable: the production database is configured but cannot be reached.
    """
    if settings.database_url:  # fail with the variable and the fix, not deep inside SQLAlchemy
        connect(settings.database_url, what="the Dagster instance").close()
    # Under a lock: the first open creates the SQLite storages, and two runs creating them at once would both
    # stamp their schema versions, leaving an instance no later run can open ("more than one head").
    with file_lock(settings.dagster_home / ".instance.lock"):
        config = settings.dagster_home / "dagster.yaml"
        wanted = instance_yaml(settings)
        current = config.read_text() if config.exists() else None
        if current is None or (current.startswith(GENERATED) and current != wanted):
            with atomic_write(config, "w") as handle:
                handle.write(wanted)
        # The storage reads the database URL from the variable when it opens (Settings may come from elsewhere).
        with exported({DATABASE_URL_ENV: settings.database_url} if settings.database_url else {}):
            return dg.DagsterInstance.from_config(str(settings.dagster_home))


@contextmanager
def exported(variables: Mapping[str, str]) -> Iterator[None]:
    """`variables` set in os.environ for the block (step processes inherit them), restored after."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def process_tag() -> str:
    """This process, as `PROCESS_TAG` records it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def reap_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark CLI runs whose process is gone (kill -9, OOM, a closed laptop) as failed and free their pool slots.

    A run executed in process by `seedwheel run` has no daemon watching it: killed, it would stay "started"
    forever and keep its `gpu` pool slot, and the next training would wait for that slot without end. Only runs
    of this host are judged (another machine's processes cannot be seen from here).

    Returns:
        The ids of the runs reaped.
    """
    host = socket.gethostname()
    running = dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED])
    reaped = []
    for run in instance.get_runs(filters=running):
        owner = run.tags.get(PROCESS_TAG, "")
        run_host, _, pid = owner.rpartition(":")
        if run_host != host or not pid.isdigit() or _alive(int(pid)):
            continue
        instance.report_run_failed(run, f"its process ({owner}) is gone: the run was killed before it finished")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        reaped.append(run.run_id)
    return reaped


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
