"""A run reads back from the Dagster instance as it ran (`run_summary`): what CI's graph test reads after
`make quickstart`."""

import shutil
from pathlib import Path

import pytest

from pipeline.runs import RunRequestError, materialize, run_summary
from tests.paths import REPO

# Each materializes into a fresh Dagster instance (its first open creates the SQLite storages).
pytestmark = pytest.mark.slow


def test_a_recorded_run_reads_back_as_it_ran(settings):
    ran = materialize(settings, "seed_tasks")
    assert ran.success and {a.key for a in ran.assets} == {"seed_tasks", "seed_rejects"} and ran.checks
    assert run_summary(settings) == ran
    assert run_summary(settings, ran.run_id) == ran


def test_the_latest_run_of_the_graph_skips_partition_runs(settings):
    graph = materialize(settings, "seed_tasks")
    inbox = Path(settings.failure_inbox)
    inbox.mkdir(parents=True)
    shutil.copy(REPO / "examples" / "failure_log.jsonl", inbox / "failure_log.jsonl")
    partition = materialize(settings, "failure_logs", partition="failure_log.jsonl")
    assert partition.success, partition.failures
    assert run_summary(settings).run_id == graph.run_id
    assert run_summary(settings, partition.run_id).assets[0].path.parent.name == "failure_logs"


def test_no_run_is_a_clear_error(settings):
    with pytest.raises(RunRequestError, match="no run of the asset graph in the Dagster instance") as error:
        run_summary(settings)
    assert "run `seedwheel run` first" in str(error.value)
