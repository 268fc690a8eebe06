"""Two regenerations at once: queued one behind the other by Dagster, or forced side by side, outputs stay whole.

- Scheduled: two ticks of `nightly_regeneration` (as the scheduler makes them) are submitted to `dagster dev`'s
  run queue at the same moment; the daemon must start the second only after the first has ended (the
  `seedwheel/exclusive` tag limit of the instance), and the second, over unchanged inputs, makes no LLM call.
- Forced: two `seedwheel run` processes (in process, not queued) start at once on a fresh root and instance;
  the files are atomic and the state they share is locked, so both succeed and leave whole tables, an instance
  a third run can open (two first opens used to stamp its SQLite schemas twice), a dedup index with each
  accepted task once that a rerun agrees with, and an intact LLM cache.

The two runs here usually make the same variants, so they rarely race on the dedup commit itself: that race is
forced deterministically in `tests/curation/test_dedup.py` (interleaved commits, and four processes released
by a barrier). Both tests use the tool-call seeds and audit items alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import dagster as dg
import pytest

from core.signals import dispositions_kept
from pipeline.definitions import build_definitions
from pipeline.instance import EXCLUSIVE_TAG, open_instance
from pipeline.runs import materialize
from pipeline.settings import Settings
from tests.outputs import assert_consistent_state, assert_whole_files
from tests.paths import REPO, tiny_settings
from tests.services import graphql, seedwheel_ui

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 900
# The queued runs execute in one process each: what is tested is the queue, and a process per step would add a
# minute of start-ups; tests/ui/test_browser.py runs `dagster dev`'s default multiprocess executor.
IN_PROCESS = {"execution": {"config": {"in_process": {}}}}
ACTIVE = {"STARTING", "STARTED"}
TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}

REPOSITORIES = """
query Repositories {
  repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } }
}
"""
LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""
RUN = """
query Run($runId: ID!) {
  runOrError(runId: $runId) {
    ... on Run { status startTime endTime tags { key value } }
  }
}
"""
METADATA = """
query Metadata($runId: ID!) {
  logsForRun(runId: $runId) {
    ... on EventConnection {
      events {
        ... on MaterializationEvent {
          assetKey { path }
          metadataEntries { label ... on IntMetadataEntry { intValue } }
        }
      }
    }
  }
}
"""


@pytest.fixture
def settings(tmp_path: Path, tiny_models_env: dict[str, str]) -> Settings:
    """Quickstart settings over a seeds folder with the tool-call seeds and their audit items only (tiny model)."""
    return tiny_settings(tmp_path, tiny_models_env, ["tool_call"])


def test_two_scheduled_regenerations_run_one_after_the_other(settings: Settings) -> None:
    schedule = build_definitions(settings).resolve_schedule_def("nightly_regeneration")
    with open_instance(settings) as instance:
        requests = []
        for day in (1, 2):  # two nights' ticks, submitted together as a late daemon would catch up
            tick = datetime(2026, 12, day, 2, 0)
            with (
                dispositions_kept(),  # a tick rewrites the stop signals' handlers
                dg.build_schedule_context(instance=instance, scheduled_execution_time=tick) as context,
            ):
                requests.extend(schedule.evaluate_tick(context).run_requests)
    assert len(requests) == 2

    with seedwheel_ui(settings, settings.home.parent) as url:
        [repository] = graphql(url, REPOSITORIES)["repositoriesOrError"]["nodes"]
        selector = {
            "repositoryLocationName": repository["location"]["name"],
            "repositoryName": repository["name"],
            "jobName": schedule.job_name,
        }
        run_ids = []
        for request in requests:
            tags = {**request.tags, "dagster/schedule_name": schedule.name}
            params = {
                "selector": selector,
                "runConfigData": {**request.run_config, **IN_PROCESS},
                "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]},
            }
            launched = graphql(url, LAUNCH, {"params": params})["launchRun"]
            assert launched["__typename"] == "LaunchRunSuccess", launched
            run_ids.append(launched["run"]["runId"])

        seen_queued_behind = False
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            runs = [graphql(url, RUN, {"runId": run_id})["runOrError"] for run_id in run_ids]
            statuses = [run["status"] for run in runs]
            assert sum(status in ACTIVE for status in statuses) <= 1, f"both regenerations ran at once: {statuses}"
            seen_queued_behind |= sorted(statuses) == ["QUEUED", "STARTED"]
            if all(status in TERMINAL for status in statuses):
                break
            assert time.monotonic() < deadline, f"the runs did not end in {RUN_TIMEOUT_S} s: {statuses}"
            time.sleep(1)
        log = settings.home.parent / "dagster.log"
        assert statuses == ["SUCCESS", "SUCCESS"], f"{statuses}; dagster dev's log ends:\n{log.read_text()[-3000:]}"
        assert seen_queued_behind, "the second regeneration was never seen waiting in the queue"
        for run in runs:
            assert {"key": EXCLUSIVE_TAG, "value": "regeneration"} in run["tags"]
        first, second = sorted(runs, key=lambda run: run["startTime"])
        assert second["startTime"] >= first["endTime"]
        # The later run regenerated unchanged inputs: every LLM answer came from the cache, no task was new to
        # the dedup index.
        later = _metadata(url, run_ids[[run["startTime"] for run in runs].index(second["startTime"])])
        for asset in ("task_variants", "judged_tasks"):
            assert later[asset]["llm_calls_made"] == 0 < later[asset]["llm_calls_cached"], later[asset]
        split = later["train_tasks"]
        assert split["dedup_index_rows_added"] == 0 < split["dedup_index_rows"], split
        assert split["new_roots"] == 0 and split["split_plan"] == 1, split  # the sides were assigned once

    assert_whole_files(settings.home)
    assert_consistent_state(settings.home)


def test_regenerations_forced_side_by_side_leave_whole_outputs(settings: Settings) -> None:
    seedwheel = Path(sys.executable).with_name("seedwheel")
    environment = {**os.environ, **settings.environ()}
    logs = [settings.home.parent / f"run-{n}.log" for n in range(2)]
    runs = []
    for log in logs:
        with open(log, "wb") as handle:
            runs.append(
                subprocess.Popen(
                    [str(seedwheel), "run", "--job", "regeneration_job"],
                    cwd=REPO,
                    env=environment,
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                )
            )
    for run, log in zip(runs, logs, strict=True):
        assert run.wait(timeout=RUN_TIMEOUT_S) == 0, log.read_text()[-3000:]

    assert_whole_files(settings.home)
    assert_consistent_state(settings.home)
    with open_instance(settings) as instance:
        finished = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.SUCCESS]))
        assert len(finished) == 2
        # The runs really overlapped: each started before the other ended.
        records = instance.get_run_records(filters=dg.RunsFilter(run_ids=[run.run_id for run in finished]))
        first, second = sorted(records, key=lambda record: record.start_time)
        assert second.start_time < first.end_time
        dedups = instance.fetch_materializations(dg.AssetKey("deduplicated_tasks"), limit=10).records
        assert [record.asset_materialization.metadata["index_rebuilt"].value for record in dedups] == [False] * 2

    # The index holds what the runs' splits kept: splitting the stored table again finds nothing new to add (a
    # run whose commit was lost would see its tasks as new now), and the ledger assigned each root once.
    again = materialize(settings, "train_tasks")
    assert again.success, again.failures
    split = next(a for a in again.assets if a.key == "train_tasks")
    assert split.metadata["dedup_index_rows_added"] == 0 < split.metadata["dedup_index_rows"]
    assert split.metadata["new_roots"] == 0 and split.metadata["split_plan"] == 1


def _metadata(url: str, run_id: str) -> dict[str, dict[str, int]]:
    """The integer metadata of each asset the run materialized."""
    events = graphql(url, METADATA, {"runId": run_id})["logsForRun"]["events"]
    found: dict[str, dict[str, int]] = {}
    for event in events:
        if "assetKey" in event:
            entries = {e["label"]: e["intValue"] for e in event["metadataEntries"] if "intValue" in e}
            found.setdefault(event["assetKey"]["path"][-1], {}).update(entries)
    return found
