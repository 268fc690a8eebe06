"""judged_tasks against a fake judge: its metadata says whether and why everything was judged again, with plots;
judging in shards labels as one step."""

import dataclasses
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest

from core.shards import shard_of
from core.tables import frame_from_records, read_table, write_table
from pipeline.instance import open_instance
from pipeline.runs import materialize
from tests.fake_server import FakeOpenAIServer
from validators.registry import VerifyContext
from validators.seeds import load_seeds
from validators.tasks import TASK_FIELDS

ANSWER = json.dumps({"rationale": "Fine.", "clarity": 5, "solvability": 4, "reference_correctness": 5, "on_topic": 5})


@pytest.fixture
def judge_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(responder=lambda body: ANSWER) as server:
        yield server


@pytest.fixture
def planted(settings) -> list[dict]:
    """Deduplicated tasks as the previous step would have written them: some arithmetic seeds, none duplicates."""
    seeds_dir = settings.seeds_dir
    seeds = load_seeds([seeds_dir / "arithmetic"], root=seeds_dir.parent, context=VerifyContext(seeds_dir=seeds_dir))
    tasks = [{**{k: t[k] for k in TASK_FIELDS}, "is_duplicate": False} for t in seeds.tasks[:6]]
    write_table(frame_from_records(tasks), settings.home / "deduplicated_tasks.parquet")
    # The calibration a previous step made: its verdict on the judge travels with the labels.
    write_table(pd.DataFrame({"calibration_passed": [True]}), settings.home / "judge_calibration.parquet")
    return tasks


def judged_metadata(settings) -> dict[str, Any]:
    summary = materialize(settings, "judged_tasks")
    assert summary.success, summary.failures
    [judged] = [a for a in summary.assets if a.key == "judged_tasks"]
    return judged.metadata


def test_the_labels_carry_the_calibrations_verdict_on_the_judge(settings, judge_server, planted):
    settings = dataclasses.replace(settings, llm_base_url=judge_server.base_url, llm_model="judge-a")
    assert judged_metadata(settings)["judge_calibrated"] is True
    assert set(read_table(settings.home / "judged_tasks.parquet")["judge_calibrated"]) == {True}
    write_table(pd.DataFrame({"calibration_passed": [True, False]}), settings.home / "judge_calibration.parquet")
    assert judged_metadata(settings)["judge_calibrated"] is False  # one failed item fails the judge


def test_metadata_says_first_run_unchanged_or_what_changed(settings, judge_server, planted):
    # The quickstart judges at most one task per family (the planted table has one family).
    judged = 1
    settings = dataclasses.replace(settings, llm_base_url=judge_server.base_url, llm_model="judge-a")
    first = judged_metadata(settings)
    assert (first["rejudged"], first["llm_calls_made"]) == ("first run", judged)
    assert first["judge_setup"]["model"] == "judge-a" and first["rubric"] == "task_quality-r1"
    # Plots beside the tables: PNGs embedded in Markdown.
    for plot in ("score_plot", "lowest_score_plot"):
        assert first[plot].startswith("![") and "data:image/png;base64," in first[plot]
    assert "| reference_correctness |" in first["score_histograms"]

    again = judged_metadata(settings)
    assert (again["rejudged"], again["llm_calls_made"], again["llm_calls_cached"]) == ("unchanged", 0, judged)

    # Another judge model: the cache cannot answer, and the metadata says why every task cost a call again.
    other = judged_metadata(dataclasses.replace(settings, llm_model="judge-b"))
    assert (other["rejudged"], other["llm_calls_made"]) == ("judge model judge-a -> judge-b", judged)


def test_an_unreadable_history_is_reported_not_fatal(settings, judge_server, planted):
    settings = dataclasses.replace(settings, llm_base_url=judge_server.base_url, llm_model="judge-a")
    history = settings.home / "judge_history" / "judged_tasks.json"
    history.parent.mkdir(parents=True)
    history.write_text("{not json")
    metadata = judged_metadata(settings)
    assert metadata["rejudged"].startswith("unknown: the previous judge setup could not be read")
    assert json.loads(history.read_text())["setup"]["model"] == "judge-a"  # replaced by a good record


def judge_in_shards(settings, shards: int) -> tuple[dict[str, Any], bytes]:
    resources = {"judge": {"max_per_family": None, "judge_shards": shards}}
    summary = materialize(settings, "judged_tasks", resources=resources)
    assert summary.success, summary.failures
    [judged] = [a for a in summary.assets if a.key == "judged_tasks"]
    return judged.metadata, (settings.home / "judged_tasks.parquet").read_bytes()


def test_three_shards_label_as_one_step(settings, judge_server, planted):
    settings = dataclasses.replace(settings, llm_base_url=judge_server.base_url, llm_model="judge-a")
    one_meta, one = judge_in_shards(settings, 1)
    # Another judge model, so the shards call the endpoint again (same answers: the labels cannot differ).
    three_meta, three = judge_in_shards(dataclasses.replace(settings, llm_model="judge-b"), 3)
    assert three == one
    balance = Counter(shard_of(task["task_id"], 3) for task in planted)
    table = [line.split("|") for line in three_meta["shard_balance"].splitlines()[2:]]  # | shard | tasks | calls |
    assert {int(cells[1]): (int(cells[2]), int(cells[3])) for cells in table} == {
        k: (n, n) for k, n in balance.items()
    }
    assert (three_meta["shards"], three_meta["shard_steps"]) == (3, len(balance)) and len(balance) >= 2
    # The shards' numbers add up to one run's: every task judged once, each a call of its own.
    for meta in (one_meta, three_meta):
        assert (meta["judged"], meta["llm_calls_made"], meta["llm"]["judgments"]) == (6, 6, 6)
    assert three_meta["rejudged"] == "judge model judge-a -> judge-b"  # the history is written once, by the merge
    assert not list((settings.home / "steps").iterdir()), "the merged shards' scratch was left behind"


def test_calibration_says_when_it_starts_and_counts_its_judgments_as_they_come(settings, judge_server):
    settings = dataclasses.replace(settings, llm_base_url=judge_server.base_url, llm_model="judge-a")
    summary = materialize(settings, "judge_calibration")
    assert summary.success, summary.failures
    with open_instance(settings) as instance:
        lines = [entry.user_message for entry in instance.all_logs(summary.run_id) if entry.step_key]
    [start] = [i for i, line in enumerate(lines) if line.startswith("judging ") and "labelled audit items" in line]
    counts = [line for line in lines[start:] if line.startswith("calibration judgments: ")]
    judgments = len(read_table(settings.home / "judge_calibration.parquet"))  # one per audit item and sample
    assert len(counts) >= 2 and counts[-1] == f"calibration judgments: {judgments}/{judgments}", counts
