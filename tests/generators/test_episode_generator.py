"""`episode_resample` on the bundled episode seeds, shop and files: valid variants whose goals are what their
references do, determinism, and a reject with a reason for every seed or attempt it cannot vary."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from generators.base import derive_task
from generators.programmatic import PROGRAMMATIC_GENERATORS, EpisodeResample
from generators.programmatic.episode import recomputed_goal
from tests.paths import SEEDS
from validators.registry import VerifyContext, verify
from validators.seeds import load_seeds
from validators.tasks import check_tasks
from validators.verifiers.episode import change_fits, episode_calls, replay


@pytest.fixture(scope="module")
def seeds(seed_context: VerifyContext) -> list[dict[str, Any]]:
    loaded = load_seeds([SEEDS / "episode"], root=SEEDS.parent, context=seed_context)
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


def test_variants_of_every_shop_seed_are_valid_and_their_goals_are_what_their_references_do(seeds, seed_context):
    generator = EpisodeResample(seed_context)
    made = 0
    for parent in shop(seeds):
        out = generator.generate(parent, n=3, random_seed=0)
        assert out.tasks or out.rejects, parent["origin"]
        assert check_tasks(out.tasks, seed_context) == [[] for _ in out.tasks], parent["origin"]
        for task in out.tasks:
            made += 1
            params = task["verifier"]["params"]
            lineage = task["lineage"]
            assert (lineage["parent_id"], lineage["generator"]["name"]) == (parent["task_id"], "episode_resample")
            assert task["prompt"] != parent["prompt"] and params["goal"] != parent["verifier"]["params"]["goal"]
            # The goal is the executed diff: one expected change per change the reference makes, with its values.
            run = replay(params, task["reference"], seed_context)
            expected = params["goal"].get("changes", [])
            assert len(expected) == len(run.changes) > 0
            for change, goal in zip(run.changes, expected, strict=True):
                assert change_fits(change, goal), (change.describe(), goal)
                assert goal["after"] == {field: change.after[field] for field in goal["after"]}
    assert made >= 8


def test_a_described_order_keeps_its_description(seeds, seed_context):
    # "My most recent delivered order": each variant refunds, in full, the new customer's last delivered order.
    out = EpisodeResample(seed_context).generate(seed(seeds, "alice.martin"), n=5, random_seed=0)
    refunds = {t["prompt"][-1]["content"].split()[3]: t["verifier"]["params"]["goal"]["changes"] for t in out.tasks}
    assert refunds == {
        "bruno.keller@example.de.": [{"collection": "refunds", "after": {"order_id": 1018, "amount_cents": 21899}}],
        "chloe.dubois@example.fr.": [{"collection": "refunds", "after": {"order_id": 1010, "amount_cents": 7000}}],
        "hannah.schulz@example.de.": [{"collection": "refunds", "after": {"order_id": 1023, "amount_cents": 10499}}],
    }
    bruno = next(t for t in out.tasks if "bruno" in t["prompt"][-1]["content"])
    assert "refunded order 1018 in full (218.99)" in bruno["reference"]


def test_a_named_item_becomes_another_of_its_category_in_request_reason_answer_and_goal(seeds, seed_context):
    out = EpisodeResample(seed_context).generate(seed(seeds, "SQL Pocket Guide"), n=5, random_seed=0)
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


def test_deterministic_per_parent_and_random_seed(seeds, seed_context):
    parent = seed(seeds, "SQL Pocket Guide")
    first = EpisodeResample(seed_context).generate(parent, n=2, random_seed=0)
    again = EpisodeResample(seed_context).generate(parent, n=2, random_seed=0)
    other = EpisodeResample(seed_context).generate(parent, n=2, random_seed=1)
    assert first.tasks == again.tasks and first.rejects == again.rejects
    assert [t["task_id"] for t in first.tasks] != [t["task_id"] for t in other.tasks]


@pytest.mark.parametrize(
    ("words", "code"),
    [
        # Two LED desk lamps on a shipped order: no other shipped order holds two of them.
        ("LED desk lamps", "no_alternatives"),
        # The only pending order and the only (April) delivered order of one customer: nobody else has both.
        ("kenji.w", "no_alternatives"),
    ],
)
def test_seeds_it_cannot_vary_are_rejects_with_a_reason(seeds, seed_context, words, code):
    out = EpisodeResample(seed_context).generate(seed(seeds, words), n=3, random_seed=0)
    assert out.tasks == []
    assert [r["reason_code"] for r in out.rejects] == [code]


def renamed_back(value: Any, names: dict[str, str]) -> Any:
    """`value` (text, or JSON-like data) with each new name put back to the old one (new names are plain words)."""
    if isinstance(value, str):
        for old, new in names.items():
            value = re.sub(rf"\b{new}\b", old, value)
        return value
    if isinstance(value, dict):
        return {renamed_back(k, names): renamed_back(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [renamed_back(v, names) for v in value]
    return value


@pytest.mark.parametrize(
    ("words", "renamed"),
    [
        # The file and folder the request names ("report.txt", "the archive folder") and notes.txt, which no text
        # mentions; q2.txt keeps its name, since its text says "Q2" and a rewrite cannot tell the two apart.
        ("report.txt", {"report", "archive", "notes"}),
        # app.log, logs/app.log.1 and the old logs/app.log.0 share the name `app`, and are renamed together.
        ("Rotate the log", {"app", "logs"}),
        # The file the request names, and README.md, whose text names it too (rewritten with it).
        ("config.ini", {"config", "README"}),
        # "every .tmp file under build/" describes the files it deletes: only the folder it names is renamed, and
        # every other name stays (a renamed file could come to fit, or stop fitting, the description).
        (".tmp file", {"build"}),
    ],
)
def test_variants_of_every_files_seed_rename_it_consistently_and_pass_their_own_reference(
    seeds, seed_context, words, renamed
):
    parent = seed(seeds, words)
    out = EpisodeResample(seed_context).generate(parent, n=3, random_seed=0)
    assert out.rejects == [] and len(out.tasks) == 3
    # Valid as validation requires them: the reference passes its verifier and the known-wrong (empty) episode fails.
    assert check_tasks(out.tasks, seed_context) == [[], [], []]
    old = parent["verifier"]["params"]
    for task in out.tasks:
        params = task["verifier"]["params"]
        names = task["lineage"]["generator"]["params"]["names"]
        assert set(names) == renamed and len(set(names.values())) == len(names)
        assert verify(task, task["reference"], context=seed_context).passed
        assert not verify(task, "", context=seed_context).passed
        assert task["prompt"][-1] != parent["prompt"][-1] and task["prompt"][:-1] == parent["prompt"][:-1]
        assert params["state"] != old["state"] and params["goal"] != old["goal"]
        # Renamed consistently, and nothing else changed: putting the old names back gives the parent's request,
        # state (paths and contents), reference calls and goal.
        assert renamed_back(task["prompt"][-1]["content"], names) == parent["prompt"][-1]["content"]
        assert renamed_back(params["state"], names) == old["state"]
        assert renamed_back(episode_calls(task["reference"]), names) == episode_calls(parent["reference"])
        assert renamed_back(params["goal"], names) == old["goal"]
        # No old name is left anywhere (README.md's "Run with config.ini." follows the file it names).
        texts = json.dumps([task["prompt"][-1], params["state"], task["reference"], params["goal"]])
        assert not [name for name in names if re.search(rf"\b{name}\b", texts)]
        # The goal is what the new reference does in a fresh environment.
        run = replay(params, task["reference"], seed_context)
        assert len(run.changes) == len(params["goal"]["changes"])
        assert all(any(change_fits(c, goal) for c in run.changes) for goal in params["goal"]["changes"])


def test_files_variants_are_deterministic_per_parent_and_random_seed(seeds, seed_context):
    parent = seed(seeds, "report.txt")
    first = EpisodeResample(seed_context).generate(parent, n=3, random_seed=0)
    again = EpisodeResample(seed_context).generate(parent, n=3, random_seed=0)
    other = EpisodeResample(seed_context).generate(parent, n=3, random_seed=1)
    assert first.tasks and first.tasks == again.tasks and first.rejects == again.rejects
    assert [t["task_id"] for t in first.tasks] != [t["task_id"] for t in other.tasks]


def test_a_moves_delete_and_insert_pair_up_whatever_order_the_new_paths_sort_in(seeds):
    # The parent's move diffs as archive/report.txt (inserted) before report.txt (deleted); with vault/ and
    # summary.txt, the deletion sorts first. Each expected change still takes the change of its own kind.
    parent = seed(seeds, "report.txt")
    params = parent["verifier"]["params"]
    moved = {**params, "state": {"files": {"summary.txt": "Q3 revenue: 1.2M\n", "notes.txt": "call Bob\n"}}}
    move = calls_text(("move_file", {"source": "summary.txt", "destination": "vault/summary.txt"}))
    goal = recomputed_goal(params["goal"], replay(params, parent["reference"]), replay(moved, move))
    assert goal == {
        "changes": [
            {"collection": "files", "key": "summary.txt", "after": None},
            {"collection": "files", "key": "vault/summary.txt", "after": {"content": "Q3 revenue: 1.2M\n"}},
        ]
    }


def _with_request(parent: dict[str, Any], request: str) -> dict[str, Any]:
    """The parent with another request, as a task record (a fresh task_id)."""
    prompt = [*parent["prompt"][:-1], {"role": "user", "content": request}]
    spec = {"name": "test", "version": 1, "params": {}}
    params = parent["verifier"]["params"]
    return derive_task(parent, prompt=prompt, verifier_params=params, reference=parent["reference"], generator=spec)


@pytest.mark.parametrize(
    ("request_text", "code", "words"),
    [
        # "Archive" the verb and "archive" the folder the file moves into: a rewrite cannot tell them apart.
        ("Archive report.txt: move it into the archive folder.", "unsupported_seed", "'archive' both as"),
        # The file in another case than its path: which spelling is the file's would be a guess.
        ("Move REPORT.TXT into the archive folder, keeping its name.", "unsupported_seed", "'REPORT'"),
        # A name pattern: a renamed file could stop fitting it.
        ("Move report* into the archive folder, keeping its name.", "unsupported_seed", "pattern ('report*')"),
        # No path named: the request describes the files it acts on, so every name stays.
        ("Move the quarterly report into the archive, keeping its name.", "no_alternatives", "no name can change"),
    ],
)
def test_files_requests_it_cannot_rewrite_are_rejects_with_a_reason(seeds, seed_context, request_text, code, words):
    parent = _with_request(seed(seeds, "report.txt"), request_text)
    out = EpisodeResample(seed_context).generate(parent, n=3, random_seed=0)
    assert out.tasks == []
    assert [r["reason_code"] for r in out.rejects] == [code]
    assert words in out.rejects[0]["reason"], out.rejects[0]["reason"]


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
def test_attempts_it_cannot_make_are_rejects_with_a_reason(seeds, seed_context, reference, goal, code):
    parent = _variant_of(seed(seeds, "Please cancel order 1027"), reference, goal)
    out = EpisodeResample(seed_context).generate(parent, n=2, random_seed=0)
    assert out.tasks == []
    assert {r["reason_code"] for r in out.rejects} == {code}, out.rejects


def test_fixtures_are_the_shop_database_and_no_file_for_files(seeds, seed_context):
    parent = seed(seeds, "Please cancel order 1027")
    assert EpisodeResample(seed_context).fixtures(parent) == [seed_context.seeds_dir / "sql" / "shop.sqlite"]
    assert EpisodeResample(seed_context).fixtures(seed(seeds, "report.txt")) == []
