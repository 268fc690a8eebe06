"""`episode_resample` on the bundled episode seeds: valid variants whose goals are what their references do,
determinism, and a reject with a reason for every seed or attempt it cannot vary."""

from __future__ import annotations

import json
from typing import Any

import pytest

from generators.base import derive_task
from generators.programmatic import PROGRAMMATIC_GENERATORS, EpisodeResample
from tests.paths import SEEDS, copy_seeds
from validators.registry import VerifyContext
from validators.seeds import load_seeds
from validators.tasks import check_tasks
from validators.verifiers.episode import change_fits, replay


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory) -> VerifyContext:
    return VerifyContext(seeds_dir=copy_seeds(tmp_path_factory.mktemp("seeds"), ["sql"]))


@pytest.fixture(scope="module")
def seeds(context: VerifyContext) -> list[dict[str, Any]]:
    loaded = load_seeds([SEEDS / "episode"], root=SEEDS.parent, context=context)
    assert not loaded.problems
    return loaded.tasks


def shop(seeds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in seeds if s["verifier"]["params"]["environment"] == "shop"]


def seed(seeds: list[dict[str, Any]], words: str) -> dict[str, Any]:
    return next(s for s in seeds if words in s["prompt"][-1]["content"])


def calls_text(*calls: tuple[str, dict[str, Any]], answer: str = "Done.") -> str:
    blocks = [f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>" for n, a in calls]
    return "\n".join([*blocks, answer])


def test_registered_for_the_episode_family():
    assert isinstance(PROGRAMMATIC_GENERATORS["episode"], EpisodeResample)


def test_variants_of_every_shop_seed_are_valid_and_their_goals_are_what_their_references_do(seeds, context):
    generator = EpisodeResample(context)
    made = 0
    for parent in shop(seeds):
        out = generator.generate(parent, n=3, random_seed=0)
        assert out.tasks or out.rejects, parent["origin"]
        assert check_tasks(out.tasks, context) == [[] for _ in out.tasks], parent["origin"]
        for task in out.tasks:
            made += 1
            params = task["verifier"]["params"]
            lineage = task["lineage"]
            assert (lineage["parent_id"], lineage["generator"]["name"]) == (parent["task_id"], "episode_resample")
            assert task["prompt"] != parent["prompt"] and params["goal"] != parent["verifier"]["params"]["goal"]
            # The goal is the executed diff: one expected change per change the reference makes, with its values.
            run = replay(params, task["reference"], context)
            expected = params["goal"].get("changes", [])
            assert len(expected) == len(run.changes) > 0
            for change, goal in zip(run.changes, expected, strict=True):
                assert change_fits(change, goal), (change.describe(), goal)
                assert goal["after"] == {field: change.after[field] for field in goal["after"]}
    assert made >= 8


def test_a_described_order_keeps_its_description(seeds, context):
    # "My most recent delivered order": each variant refunds, in full, the new customer's last delivered order.
    out = EpisodeResample(context).generate(seed(seeds, "alice.martin"), n=5, random_seed=0)
    refunds = {t["prompt"][-1]["content"].split()[3]: t["verifier"]["params"]["goal"]["changes"] for t in out.tasks}
    assert refunds == {
        "bruno.keller@example.de.": [{"collection": "refunds", "after": {"order_id": 1018, "amount_cents": 21899}}],
        "chloe.dubois@example.fr.": [{"collection": "refunds", "after": {"order_id": 1010, "amount_cents": 7000}}],
        "hannah.schulz@example.de.": [{"collection": "refunds", "after": {"order_id": 1023, "amount_cents": 10499}}],
    }
    bruno = next(t for t in out.tasks if "bruno" in t["prompt"][-1]["content"])
    assert "refunded order 1018 in full (218.99)" in bruno["reference"]


def test_a_named_item_becomes_another_of_its_category_in_request_reason_answer_and_goal(seeds, context):
    out = EpisodeResample(context).generate(seed(seeds, "SQL Pocket Guide"), n=5, random_seed=0)
    assert out.tasks
    for task in out.tasks:
        [change] = task["verifier"]["params"]["goal"]["changes"]
        order, amount = change["after"]["order_id"], change["after"]["amount_cents"]
        request, reference = task["prompt"][-1]["content"], task["reference"]
        assert "SQL Pocket Guide" not in request + reference and f"my order {order}." in request
        assert f"{amount / 100:.2f}" in reference and "The The" not in request
        assert task["verifier"]["params"]["goal"]["calls"] == [
            {"name": "get_order_status", "arguments": {"order_id": order}},
            {"name": "refund_order", "arguments": {"order_id": order}},
        ]


def test_deterministic_per_parent_and_random_seed(seeds, context):
    parent = seed(seeds, "SQL Pocket Guide")
    first = EpisodeResample(context).generate(parent, n=2, random_seed=0)
    again = EpisodeResample(context).generate(parent, n=2, random_seed=0)
    other = EpisodeResample(context).generate(parent, n=2, random_seed=1)
    assert first.tasks == again.tasks and first.rejects == again.rejects
    assert [t["task_id"] for t in first.tasks] != [t["task_id"] for t in other.tasks]


@pytest.mark.parametrize(
    ("words", "code"),
    [
        # A files episode: its paths and contents are free text, not re-targeted.
        ("report.txt", "unsupported_seed"),
        # Two LED desk lamps on a shipped order: no other shipped order holds two of them.
        ("LED desk lamps", "no_alternatives"),
        # The only pending order and the only (April) delivered order of one customer: nobody else has both.
        ("kenji.w", "no_alternatives"),
    ],
)
def test_seeds_it_cannot_vary_are_rejects_with_a_reason(seeds, context, words, code):
    out = EpisodeResample(context).generate(seed(seeds, words), n=3, random_seed=0)
    assert out.tasks == []
    assert [r["reason_code"] for r in out.rejects] == [code]


def _variant_of(parent: dict[str, Any], reference: str, goal: dict[str, Any]) -> dict[str, Any]:
    """The parent with another reference and goal, as a task record (a fresh task_id)."""
    params = {**parent["verifier"]["params"], "goal": goal}
    spec = {"name": "test", "version": 1, "params": {}}
    return {
        **derive_task(parent, prompt=parent["prompt"], verifier_params=params, reference=reference, generator=spec)
    }


@pytest.mark.parametrize(
    ("reference", "goal", "code"),
    [
        # Prose: no calls to move.
        ("I cancelled it.", {"calls": [{"name": "get_order_status"}]}, "unsupported_seed"),
        # A refund of 10 cents: neither the order's total nor whole units of one item.
        (
            calls_text(("refund_order", {"order_id": 1021, "amount_cents": 10, "reason": "goodwill"})),
            {"changes": [{"collection": "refunds", "after": {"order_id": 1021, "amount_cents": 10}}]},
            "unsupported_seed",
        ),
        # Orders of two customers in one episode.
        (
            calls_text(("cancel_order", {"order_id": 1026}), ("cancel_order", {"order_id": 1027})),
            {"changes": [{"collection": "orders", "key": "1026", "after": {"status": "cancelled"}}]},
            "unsupported_seed",
        ),
        # Only a lookup: the moved episode changes nothing, and a variant must change something.
        (
            calls_text(("get_order_status", {"order_id": 1027})),
            {"calls": [{"name": "get_order_status", "arguments": {"order_id": 1027}}]},
            "empty_diff",
        ),
    ],
)
def test_attempts_it_cannot_make_are_rejects_with_a_reason(seeds, context, reference, goal, code):
    parent = _variant_of(seed(seeds, "Please cancel order 1027"), reference, goal)
    out = EpisodeResample(context).generate(parent, n=2, random_seed=0)
    assert out.tasks == []
    assert {r["reason_code"] for r in out.rejects} == {code}, out.rejects


def test_fixtures_are_the_shop_database(seeds, context):
    parent = seed(seeds, "Please cancel order 1027")
    assert EpisodeResample(context).fixtures(parent) == [context.seeds_dir / "sql" / "shop.sqlite"]
