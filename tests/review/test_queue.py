"""A failure in the review queue, completed by a person, becomes a seed that validates, keeps the failure id in its
lineage and leaves the queue; what is still missing is named, and nothing is written then."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from core.tables import frame_from_records, write_table
from failures import parse_failure_log, redact
from failures.derive import failure_task
from review.queue import complete_item, completed_failures, drop_completed, open_items
from tests.paths import SEEDS
from validators.registry import VerifyContext
from validators.seeds import load_seeds

LINE = {
    "failure_id": "f-42",
    "family": "arithmetic",
    "messages": [{"role": "user", "content": "A box holds 6 eggs. How many eggs are in 7 boxes?"}],
    "output": "13",
    "user_correction": "It is 42, the bot added instead of multiplying.",
}


def review_item() -> dict:
    """LINE's review-queue item, as `failures` derives it (redacted first)."""
    record, _ = redact(parse_failure_log([json.dumps(LINE)]).records[0])
    derived = failure_task(record)
    assert derived.review is not None  # no expected outcome: the failure waits for a person
    return derived.review


@pytest.fixture
def item() -> dict:
    return review_item()


@pytest.fixture
def seeds(tmp_path: Path) -> Path:
    shutil.copytree(SEEDS / "arithmetic", tmp_path / "seeds" / "arithmetic")
    return tmp_path / "seeds"


def completed(stub: str) -> str:
    """LINE's seed stub with its TODOs filled in: the expected number and a reference that passes."""
    return stub.replace("TODO: the expected number", "42").replace(
        "TODO: a known-good completion that passes the verifier", "7 boxes of 6 eggs: 7 * 6 = 42\\n#### 42"
    )


def test_an_incomplete_stub_names_what_is_missing_and_writes_nothing(item: dict, seeds: Path) -> None:
    done = complete_item(item, item["seed_stub"], seeds)
    assert not done.ok
    assert done.problems == [
        "/verifier/params/answer: TODO: the expected number",
        "/reference: TODO: a known-good completion that passes the verifier",
    ]
    assert not list((seeds / "arithmetic").glob("failure-*"))


def test_a_completed_item_becomes_a_valid_seed_that_keeps_its_failure_id(item: dict, seeds: Path) -> None:
    done = complete_item(item, completed(item["seed_stub"]), seeds)
    assert done.ok, done.problems
    assert done.path == seeds / "arithmetic" / "failure-f-42.jsonl"
    loaded = load_seeds([seeds], context=VerifyContext(seeds_dir=seeds))  # what `seedwheel seeds validate` checks
    assert not loaded.problems, loaded.problems
    (task,) = [t for t in loaded.tasks if t["origin"].startswith(str(done.path))]
    assert task["lineage"]["failure_id"] == "f-42" and task["lineage"]["seed_id"] == task["task_id"]
    assert completed_failures(seeds) == {"f-42": f"{done.path}:1"}


def test_a_completed_item_leaves_the_queue(item: dict, seeds: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_table(frame_from_records([item, {**item, "failure_id": "f-43"}]), home / "review_queue.parquet")
    assert [i["failure_id"] for i in open_items(home, seeds)] == ["f-42", "f-43"]
    assert complete_item(item, completed(item["seed_stub"]), seeds).ok
    assert [i["failure_id"] for i in open_items(home, seeds)] == ["f-43"]
    assert drop_completed(pd.DataFrame({"failure_id": ["f-42"]}), {"f-42": "x"}).empty


def test_a_seed_with_pii_is_refused(item: dict, seeds: Path) -> None:
    stub = completed(item["seed_stub"]).replace("#### 42", "mail ann@example.com\\n#### 42")
    done = complete_item(item, stub, seeds)
    assert not done.ok and "PII" in done.problems[0] and "1 EMAIL" in done.problems[0]


def test_a_wrong_reference_is_named_by_the_seed_checks(item: dict, seeds: Path) -> None:
    stub = completed(item["seed_stub"]).replace("#### 42", "#### 41")
    done = complete_item(item, stub, seeds)
    assert not done.ok and "reference" in " ".join(done.problems)
