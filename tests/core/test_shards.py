"""Shards: a record's shard is fixed by its id, shards are ranges of the hash that balance, plans cover every
record once."""

import random
from collections import Counter

import pytest

from core.shards import CacheTotals, ShardConfigError, cache_totals, plan_shards, shard_count, shard_of
from validators.tasks import compute_task_id


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


@pytest.mark.parametrize("value", [0, -1, True, 2.0, "2", None])
def test_an_impossible_shard_count_names_the_setting_and_the_fix(value):
    with pytest.raises(ShardConfigError, match=rf"judge_shards must be a whole number of at least 1, got {value!r}"):
        shard_count(value, "judge_shards")
    with pytest.raises(ShardConfigError, match=rf"shards must be .* got {value!r}"):
        plan_shards(["a"], value)


def step(records: int, hits: int, rebuilt: bool, seconds: float) -> dict:
    return {"shard": 0, "tasks": records, "cache_hits": hits, "cache_rebuilt": rebuilt, "seconds": seconds}


@pytest.mark.parametrize(
    ("steps", "totals"),
    [
        # No step ran (every hash range empty): nothing given, nothing reused, nothing rebuilt.
        ([], CacheTotals(records=0, hits=0, rebuilt=False, seconds=0.0)),
        # One step that rebuilt the cache makes the stage's cache rebuilt; seconds add up to the millisecond.
        ([step(3, 3, False, 0.1004), step(5, 1, True, 0.2)], CacheTotals(8, hits=4, rebuilt=True, seconds=0.3)),
    ],
)
def test_cache_totals_add_up_the_steps(steps, totals):
    assert cache_totals(steps, "tasks") == totals
    assert totals.misses == totals.records - totals.hits
