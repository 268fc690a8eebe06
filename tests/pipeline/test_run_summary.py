"""A run reads back from the Dagster instance as it ran (`run_summary`): what `seedwheel report` prints and CI's
graph test reads after `make quickstart`."""

import shutil
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

from core.signals import dispositions_kept
from pipeline.cli import main
from pipeline.runs import RunRequestError, materialize, run_summary
from tests.core.test_signals import ignores_sigterm, started_child, stop
from tests.paths import REPO

# Each materializes into a fresh Dagster instance (its first open creates the SQLite storages).
pytestmark = pytest.mark.slow


def test_a_recorded_run_reads_back_as_it_ran(settings):
    ran = materialize(settings, "seed_tasks")
    assert ran.success and {a.key for a in ran.assets} == {"seed_tasks", "seed_rejects"} and ran.checks
    assert run_summary(settings) == ran
    assert run_summary(settings, ran.run_id) == ran
    # Each step's wall time, from the instance's step stats: the seed loading step and its checks.
    assert ran.step_seconds and all(seconds >= 0 for seconds in ran.step_seconds.values())


def test_the_latest_run_of_the_graph_skips_partition_runs(settings):
    graph = materialize(settings, "seed_tasks")
    inbox = Path(settings.failure_inbox)
    inbox.mkdir(parents=True)
    shutil.copy(REPO / "examples" / "failure_log.jsonl", inbox / "failure_log.jsonl")
    partition = materialize(settings, "failure_logs", partition="failure_log.jsonl")
    assert partition.success, partition.failures
    assert run_summary(settings).run_id == graph.run_id
    read_back = {a.key: a.path.parent.name for a in run_summary(settings, partition.run_id).assets}
    assert read_back["failure_logs"] == "failure_logs" and read_back["production_traffic"] == "production_traffic"


def test_no_run_is_a_clear_error(settings):
    with pytest.raises(RunRequestError, match="no run of the asset graph in the Dagster instance") as error:
        run_summary(settings)
    assert "run `seedwheel run` first" in str(error.value)
    printed = CliRunner().invoke(main, ["report"], env=settings.environ())
    assert printed.exit_code == 1 and "no run of the asset graph" in printed.output
    assert "Traceback" not in printed.output


def test_report_prints_the_last_run_as_seedwheel_run_did(settings):
    ran = materialize(settings, "seed_tasks")
    printed = CliRunner().invoke(main, ["report", "--home", str(settings.home)], env=settings.environ())
    assert printed.exit_code == 0, printed.output
    lines = printed.output.splitlines()
    assert f"run {ran.run_id}: succeeded" in lines
    seed_rows = next(a.rows for a in ran.assets if a.key == "seed_tasks")
    assert any(line.split()[:2] == ["seed_tasks", str(seed_rows)] for line in lines)
    assert any(line.startswith("check ") and line.endswith(": passed") for line in lines)
    [slowest] = [line for line in lines if line.startswith("slowest steps: ")]
    assert all(step in slowest for step in ran.step_seconds) and slowest.endswith(" s")
    missing = CliRunner().invoke(main, ["report", "no-such-run"], env=settings.environ())
    assert missing.exit_code == 1 and "no run no-such-run" in missing.output


def test_a_run_started_in_the_background_leaves_sigterm_working_for_what_starts_after_it(settings):
    # A shell starts `cmd &` with SIGINT ignored, and Dagster's run copies SIGINT's handler onto SIGTERM when it
    # ends: every process started afterwards ignored SIGTERM (spawn pools hung in terminate(), servers outlived
    # their stop). The run must leave both handlers as it found them.
    with dispositions_kept():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        before = signal.getsignal(signal.SIGTERM)
        assert materialize(settings, "seed_tasks").success
        assert signal.getsignal(signal.SIGTERM) == before
        child = started_child()
        assert not ignores_sigterm(child.pid)
        assert stop(child) == -signal.SIGTERM
