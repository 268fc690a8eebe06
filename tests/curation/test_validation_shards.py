"""Validation shards: verdicts merge back in input order into the tables of one step, and an impossible config names
the setting."""

import pandas as pd
import pytest

from core.shards import ShardConfigError, plan_shards
from curation.validation_shards import (
    SHARD_VERDICT_COLUMNS,
    ShardConfig,
    ShardMergeError,
    merge_validation,
    merge_verdicts,
    shard_verdicts,
)
from tests.core.test_shards import task_ids
from validators.tasks import TASK_FIELDS, Problem

REFERENCE = Problem("reference_failed", "/reference", "the reference fails its verifier", "fix the reference")


def test_verdicts_merge_back_in_input_order_from_shards_in_any_order():
    ids = task_ids(12)
    tasks = [{"task_id": t} for t in ids]
    problems = [[REFERENCE] if i % 3 == 0 else [] for i in range(len(ids))]
    shards = []
    for positions in plan_shards(ids, 3):
        rows = shard_verdicts(positions, [tasks[i] for i in positions], [problems[i] for i in positions])
        assert all(tuple(row) == SHARD_VERDICT_COLUMNS for row in rows)
        shards.append(rows)
    shards.reverse()  # the last shard finished first
    assert merge_verdicts(ids, (row for rows in shards for row in rows)) == problems


def verdict(position: int, task_id: str | None) -> dict:
    return {"position": position, "task_id": task_id, "problems": []}


@pytest.mark.parametrize(
    ("verdicts", "message"),
    [
        # A task no shard answered for (a lost shard): never merged as valid.
        ([verdict(0, "a")], "no shard verdict for 1 task"),
        # Two shards answering for one position.
        ([verdict(0, "a"), verdict(1, "b"), verdict(1, "b")], "two shard verdicts for position 1"),
        # A position past the input: the shards split another batch.
        ([verdict(0, "a"), verdict(1, "b"), verdict(2, "c")], "position 2, but 2 tasks"),
        # The input changed between the split and the merge: the verdict is another task's.
        ([verdict(0, "a"), verdict(1, "c")], "position 1 holds task b but its shard checked c"),
    ],
)
def test_a_merge_that_does_not_cover_each_task_once_is_refused(verdicts, message):
    with pytest.raises(ShardMergeError, match=message):
        merge_verdicts(["a", "b"], verdicts)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        # No shard at all: nothing would check the tasks.
        ({"shards": 0}, "validation_shards must be a whole number of at least 1, got 0"),
        # A bool is not a count (True would pass as 1).
        ({"shards": True}, "got True"),
        # Zero threads would check nothing; None is the default (one per CPU).
        ({"threads": 0}, "validation_threads must be .* got 0"),
    ],
)
def test_an_impossible_shard_config_names_the_setting_and_the_fix(fields, message):
    with pytest.raises(ShardConfigError, match=message):
        ShardConfig(**fields)


def checked(task_id: str, family: str, generator: str | None = None) -> dict:
    lineage = {"source": "generated" if generator else "production_failure", "generator": {"name": generator}}
    return {**{field: None for field in TASK_FIELDS}, "task_id": task_id, "family": family, "lineage": lineage}


def test_the_merge_keeps_seeds_then_valid_tasks_each_once_and_rejects_the_others():
    seeds = pd.DataFrame([checked("s1", "sql"), checked("s2", "sql")]).assign(origin="seeds/sql")
    tasks = [
        checked("s1", "sql"),  # a failure task asking a seed's exact question: the seed's row is kept
        checked("v1", "sql", "swap"),
        checked("v2", "sql", "swap"),  # fails its checks
        checked("v3", "json", "resample"),
        checked("v1", "sql", "swap"),  # a variant reached twice: its first row is kept
    ]
    ids = [t["task_id"] for t in tasks]
    problems = [[], [], [REFERENCE], [], []]
    verdicts = shard_verdicts(range(len(tasks)), tasks, problems)
    merged = merge_validation(seeds, tasks, reversed(verdicts))  # shards in any order
    assert merged.tasks["task_id"].tolist() == ["s1", "s2", "v1", "v3"]
    assert list(merged.tasks.columns) == list(TASK_FIELDS)  # the seeds' other columns are not carried
    assert merged.repeated == ["s1", "v1"]
    assert [(r["task_id"], r["reason_code"]) for r in merged.rejects] == [("v2", "reference_failed")]
    assert (merged.checked, merged.valid, merged.validity_rate) == (len(ids), 4, 0.8)
    assert merged.by_family == {"json": (1, 1), "sql": (3, 4)}
    assert merged.by_generator == {"production_failure": (1, 1), "resample": (1, 1), "swap": (2, 3)}


def test_nothing_checked_is_fully_valid():
    seeds = pd.DataFrame([checked("s1", "sql")])
    merged = merge_validation(seeds, [], [])
    assert (merged.tasks["task_id"].tolist(), merged.rejects, merged.repeated) == (["s1"], [], [])
    assert (merged.validity_rate, merged.by_family, merged.by_generator) == (1.0, {}, {})
