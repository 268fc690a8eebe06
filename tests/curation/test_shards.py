"""Validation shards: verdicts merge back in input order, and an impossible config names the setting."""

import pytest

from core.shards import ShardConfigError, plan_shards
from curation.shards import SHARD_VERDICT_COLUMNS, ShardConfig, ShardMergeError, merge_verdicts, shard_verdicts
from tests.core.test_shards import task_ids
from validators.tasks import Problem

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
