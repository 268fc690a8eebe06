"""Validation shards: a task's shard is fixed by its id, shards balance, and verdicts merge back in input order."""

import random
from collections import Counter

import pytest

from curation.shards import (
    SHARD_VERDICT_COLUMNS,
    ShardConfig,
    ShardConfigError,
    ShardMergeError,
    merge_verdicts,
    plan_shards,
    shard_of,
    shard_verdicts,
)
from validators.tasks import Problem, compute_task_id

REFERENCE = Problem("reference_failed", "/reference", "the reference fails its verifier", "fix the reference")


def task_ids(count: int, start: int = 0) -> list[str]:
    """Content-hash ids, as real tasks carry them."""
    return [
        compute_task_id([{"role": "user", "content": f"{n} + 1?"}], {"name": "numeric_answer"})
        for n in range(start, start + count)
    ]


def shard_by_id(ids: list[str], shards: int) -> dict[str, int]:
    return {ids[i]: shard for shard, positions in enumerate(plan_shards(ids, shards)) for i in positions}


def test_a_task_keeps_its_shard_when_tasks_are_added_removed_or_reordered():
    night1 = task_ids(200)
    night2 = [*task_ids(50, start=1000), *night1[100:], *task_ids(50, start=2000)]  # half gone, 100 new
    random.Random(0).shuffle(night2)  # and arriving in another order
    before, after = shard_by_id(night1, 5), shard_by_id(night2, 5)
    assert {t: after[t] for t in night1[100:]} == {t: before[t] for t in night1[100:]}
    assert all(before[t] == shard_of(t, 5) for t in night1)  # the plan is the per-id function, nothing more


def test_shards_are_ranges_of_the_hash_that_nest_as_the_count_doubles():
    ids = task_ids(300)
    # Each shard is a contiguous range of the hash space: shard k of 4 is half of shard k // 2 of 2.
    assert all(shard_of(t, 4) // 2 == shard_of(t, 2) for t in ids)
    assert {shard_of(t, 1) for t in ids} == {0}


def test_shards_balance_within_a_few_percent():
    counts = Counter(shard_of(t, 4) for t in task_ids(4000))
    # 1,000 expected each; the spread of a fair split is about sqrt(1000) = 32, so 10% is over three of them.
    assert sorted(counts) == [0, 1, 2, 3] and all(900 <= n <= 1100 for n in counts.values()), counts


def test_a_plan_covers_every_position_once_in_ascending_order():
    ids = [*task_ids(30), None, "0" * 16, "0" * 16]  # no id, and one id twice (two tasks, two positions)
    plan = plan_shards(ids, 3)
    assert sorted(i for positions in plan for i in positions) == list(range(len(ids)))
    assert all(positions == sorted(positions) for positions in plan)
    assert plan_shards([], 3) == [[], [], []]  # nothing to check: three empty shards, no step for any


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
        ({"shards": 0}, "validation shards must be a whole number of at least 1, got 0; set validation_shards"),
        # A bool is not a count (True would pass as 1).
        ({"shards": True}, "got True"),
        # Zero threads would check nothing; None is the default (one per CPU).
        ({"threads": 0}, "validation threads must be .* got 0; set validation_threads"),
    ],
)
def test_an_impossible_shard_config_names_the_setting_and_the_fix(fields, message):
    with pytest.raises(ShardConfigError, match=message):
        ShardConfig(**fields)
    if "shards" in fields:
        with pytest.raises(ShardConfigError, match=message):
            plan_shards(["a"], fields["shards"])
