"""Steps on Celery: the executor follows the broker setting and never holds its URL; clear errors without one.
The real workers run in tests/test_production_profile.py."""

from dataclasses import replace

import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.definitions import build_definitions
from pipeline.runs import materialize
from pipeline.workers import step_executor


def test_jobs_send_their_steps_to_celery_exactly_when_a_broker_is_set(settings):
    assert step_executor(settings) is None
    on_celery = replace(settings, celery_broker="redis://redis.internal:6379/0")
    assert build_definitions(on_celery).resolve_job_def("regeneration_job").executor_def.name == "celery"


def test_a_celery_run_without_a_broker_and_a_multiprocess_run_with_one_say_what_to_do(settings):
    with pytest.raises(
        ValueError, match=r"set SEEDWHEEL_CELERY_BROKER=redis://host:6379/0 and start `seedwheel worker`"
    ):
        materialize(settings, "seed_tasks", executor="celery")
    with pytest.raises(ValueError, match="SEEDWHEEL_CELERY_BROKER is set, so steps run on Celery workers"):
        materialize(replace(settings, celery_broker="redis://127.0.0.1:6379/0"), "seed_tasks", executor="multiprocess")


def test_a_worker_without_a_broker_says_what_to_set():
    result = CliRunner().invoke(main, ["worker"])
    assert result.exit_code == 1 and "set SEEDWHEEL_CELERY_BROKER=redis://host:6379/0" in result.output
