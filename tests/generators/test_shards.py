"""Generation shards: variants and rejects merge back in parent order whatever the shards' order, rewrites last."""

import pytest

from generators.base import GenerationResult
from generators.shards import merge_variants


def variant(parent_id: str, task_id: str) -> dict:
    return {"task_id": task_id, "lineage": {"parent_id": parent_id}}


def reject(parent_id: str, code: str) -> dict:
    return {"parent_id": parent_id, "reason_code": code}


def test_rows_merge_back_in_parent_order_then_the_rewrites():
    shard_a = [variant("p3", "c1"), variant("p1", "a1"), variant("p1", "a2")]  # a shard holds p1 and p3
    shard_b = [variant("p2", "b1")]
    rewrites = GenerationResult(tasks=[variant("p1", "r1")], rejects=[reject("p1", "rewrite_failed")])
    merged = merge_variants(
        ["p1", "p2", "p3"],
        [*shard_b, *shard_a],  # the last shard finished first
        [reject("p3", "no_generator"), reject("p2", "unsupported_seed")],
        rewrites,
    )
    # A parent's rows keep their order (a1 before a2); the rewrites come after every shard's rows.
    assert [t["task_id"] for t in merged.tasks] == ["a1", "a2", "b1", "c1", "r1"]
    assert [r["reason_code"] for r in merged.rejects] == ["unsupported_seed", "no_generator", "rewrite_failed"]


def test_a_parent_listed_twice_takes_its_first_position():
    # A failure task equal to a seed is a parent twice: its variants sort where the seed is.
    merged = merge_variants(["p1", "p2", "p1"], [variant("p2", "b1"), variant("p1", "a1")], [], GenerationResult())
    assert [t["task_id"] for t in merged.tasks] == ["a1", "b1"]


def test_a_variant_of_no_listed_parent_is_refused():
    # The parents table and the shards disagree (the inputs changed under the run): no silent misplacement.
    with pytest.raises(KeyError):
        merge_variants(["p1"], [variant("p9", "x")], [], GenerationResult())


@pytest.mark.parametrize(
    ("result", "rate"),
    [
        # Nothing attempted, nothing failed.
        (GenerationResult(), 1.0),
        # Three variants and one reject: three of four attempts.
        (GenerationResult(tasks=[variant("p", "a")] * 3, rejects=[reject("p", "x")]), 0.75),
        # Only rejects.
        (GenerationResult(rejects=[reject("p", "x")]), 0.0),
    ],
)
def test_accept_rate(result, rate):
    assert result.accept_rate() == rate
