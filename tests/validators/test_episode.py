"""The `episode` verifier: verdicts on right and wrong episodes, partial credit, params checks, and the bundled
episode seeds replayed through the one registry (reference passes, the empty episode fails)."""

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.paths import SEEDS
from validators.registry import REGISTRY, spec_problems, verify
from validators.seeds import load_seeds
from validators.tasks import task_problems
from validators.verifiers.episode import CLAIM_OF_SUCCESS, episode_calls

SHOP = {"environment": "shop", "state": {"database": "sql/shop.sqlite"}}
# Refund the missing book on order 1006 (19.99), after looking the order up.
REFUND_TASK = {
    "verifier": {
        "name": "episode",
        "params": {
            **SHOP,
            "goal": {
                "changes": [{"collection": "refunds", "after": {"order_id": 1006, "amount_cents": 1999}}],
                "calls": [
                    {"name": "get_order_status", "arguments": {"order_id": 1006}},
                    {"name": "refund_order", "arguments": {"order_id": 1006}},
                ],
            },
        },
    }
}
STATUS = ("get_order_status", {"order_id": 1006})
REFUND = ("refund_order", {"order_id": 1006, "amount_cents": 1999, "reason": "book missing"})


def episode(*calls: tuple[str, dict[str, Any]], answer: str = "Done.") -> list[dict[str, Any]]:
    """A conversation: each call as an assistant message with OpenAI tool_calls, its tool result, then the answer."""
    messages: list[dict[str, Any]] = []
    for i, (name, arguments) in enumerate(calls):
        function = {"name": name, "arguments": json.dumps(arguments)}
        messages.append({"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "function": function}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "{}"})  # replay recomputes it
    return [*messages, {"role": "assistant", "content": answer}]


def with_params(**changes: Any) -> dict[str, Any]:
    return {"verifier": {"name": "episode", "params": {**REFUND_TASK["verifier"]["params"], **changes}}}


@pytest.mark.parametrize(
    ("completion", "passed", "reason"),
    [
        # Looked up, then refunded once: the goal state, nothing else.
        (episode(STATUS, REFUND), True, "ok"),
        # The same as text with <tool_call> blocks (how a reference is written).
        (
            "\n".join(
                f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>" for n, a in [STATUS, REFUND]
            ),
            True,
            "ok",
        ),
        # Refunded before looking: the state is right, the policy was not followed.
        (
            episode(REFUND, STATUS),
            False,
            'call_order: refund_order {"order_id": 1006} ran, but not after get_order_status',
        ),
        # Never looked the order up at all.
        (episode(REFUND), False, 'missing_call: get_order_status {"order_id": 1006}'),
        # The refund paid twice: the second one is a change the goal does not ask for.
        (
            episode(STATUS, REFUND, REFUND),
            False,
            'unexpected_change: refunds/2: inserted {"refund_id": 2, "order_id": 1006, "amount_cents": 1999, "reason":'
            ' "book miss...',  # long values are cut
        ),
        # A no-op: looked, answered, changed nothing.
        (episode(STATUS), False, 'missing_change: refunds/*: {"order_id": 1006, "amount_cents": 1999}'),
        # The wrong amount: the whole order (4 items) instead of the book.
        (
            episode(STATUS, ("refund_order", {"order_id": 1006, "amount_cents": 8399, "reason": "book missing"})),
            False,
            'unexpected_change: refunds/1: inserted {"refund_id": 1, "order_id": 1006, "amount_cents": 8399, "reason":'
            ' "book miss...',  # long values are cut
        ),
        # The right refund plus another order touched.
        (
            episode(STATUS, REFUND, ("cancel_order", {"order_id": 1026})),
            False,
            "unexpected_change: orders/1026: status 'pending' -> 'cancelled'",
        ),
        # The right refund plus a refused cancel of the same (delivered) order: a spray that changed nothing.
        (
            episode(STATUS, REFUND, ("cancel_order", {"order_id": 1006})),
            False,
            'wasted_call: cancel_order {"order_id": 1006} changed nothing: {"error": "order 1006 is delivered: only'
            ' pending orders can be cancelled"}',
        ),
        # A refused refund (too much), then the right one: the wasted move is still not paid.
        (
            episode(STATUS, ("refund_order", {"order_id": 1006, "amount_cents": 99999, "reason": "x"}), REFUND),
            False,
            'wasted_call: refund_order {"order_id": 1006, "amount_cents": 99999, "reason": "x"} changed nothing'
            ': {"error": "order 1006 has 8399 cents left to refund, not 99999"}',
        ),
        # Extra reads are free: looking the order up again after the refund is no wasted move.
        (episode(STATUS, REFUND, STATUS), True, "ok"),
    ],
)
def test_verdicts(seed_context, completion, passed, reason):
    verdict = verify(REFUND_TASK, completion, context=seed_context)
    assert (verdict.passed, verdict.reason, verdict.score) == (passed, reason, float(passed))


@pytest.mark.parametrize(
    ("completion", "score"),
    [
        (episode(STATUS, REFUND), 1.0),
        # Of 4 checks (the refund, two calls, an answer): the lookup and the answer.
        (episode(STATUS), 2 / 4),
        # The refund, the lookup and the answer; the refund came before the lookup, so it is not the second call.
        (episode(REFUND, STATUS), 3 / 4),
        # Everything done, then a damage: no credit.
        (episode(STATUS, REFUND, REFUND), 0.0),
        # Everything done, plus a refused cancel: a spray earns no credit either.
        (episode(STATUS, REFUND, ("cancel_order", {"order_id": 1006})), 0.0),
        # Nothing done, not even an answer (the call does not exist): no credit.
        (episode(("drop_everything", {})), 0.0),
    ],
)
def test_partial_credit_measures_progress_and_never_pays_damage(seed_context, completion, score):
    assert verify(with_params(partial_credit=True), completion, context=seed_context).score == pytest.approx(score)


def test_binary_by_default(seed_context):
    assert verify(REFUND_TASK, episode(STATUS), context=seed_context).score == 0.0


def test_limits_from_the_params(seed_context):
    verdict = verify(with_params(limits={"max_turns": 1}), episode(STATUS, REFUND), context=seed_context)
    assert verdict.reason == "max_turns: 1 turns without an answer"


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({**SHOP, "environment": "kitchen", "goal": {"calls": [{"name": "x"}]}}, "'kitchen' is not one of"),
        ({**SHOP, "goal": {}}, "should be non-empty"),
        ({**SHOP, "goal": {"changes": [], "calls": []}}, "the goal needs a change or a call"),
        ({**SHOP, "goal": {"calls": [{"name": "refund"}]}}, "shop has no tool 'refund'"),
        # Each environment's own state schema applies.
        ({**SHOP, "state": {"files": {}}, "goal": {"calls": [{"name": "list_orders"}]}}, "'database' is a required"),
        (
            {
                "environment": "shop",
                "state": {"database": "sql/none.sqlite"},
                "goal": {"calls": [{"name": "list_orders"}]},
            },
            "none.sqlite does not exist",
        ),
        (
            {"environment": "files", "state": {"files": {"../x": ""}}, "goal": {"calls": [{"name": "list_files"}]}},
            "'../x' leaves the folder",
        ),
        (
            {
                "environment": "files",
                "state": {"files": {"a": "", "a/b": ""}},
                "goal": {"calls": [{"name": "read_file"}]},
            },
            "'a' is a file and a folder of 'a/b'",
        ),
    ],
)
def test_params_problems(seed_context, params, problem):
    problems = spec_problems({"name": "episode", "params": params}, seed_context)
    assert any(problem in p for p in problems), problems


def test_fixtures_and_hack_probes(seed_context):
    verifier = REGISTRY.get("episode")
    params = REFUND_TASK["verifier"]["params"]
    assert verifier.fixtures(params, seed_context) == [seed_context.seeds_dir / "sql" / "shop.sqlite"]
    wrong = verifier.wrong_answer(params)  # validation checks that it fails; None would skip the check
    assert wrong == "" and verify(REFUND_TASK, wrong, context=seed_context).code == "missing_change"
    # Without a reference only the probes that need none: a claim and nothing at all.
    probes = verifier.hack_probes(params, None, seed_context)
    assert [(p.name, p.completion) for p in probes] == [("claim_success", CLAIM_OF_SUCCESS), ("empty_episode", "")]
    assert not any(verify(REFUND_TASK, p.completion, context=seed_context).passed for p in probes)


def test_every_hack_probe_fails_on_every_bundled_seed(seed_context):
    seeds = load_seeds([SEEDS / "episode"], root=SEEDS.parent, context=seed_context)
    verifier = REGISTRY.get("episode")
    ran = set()
    for task in seeds.tasks:
        for probe in verifier.hack_probes(task["verifier"]["params"], task["reference"], seed_context):
            ran.add(probe.name)
            verdict = verify(task, probe.completion, context=seed_context)
            assert (verdict.passed, verdict.score) == (False, 0.0), (task["origin"], probe.name, verdict.reason)
    assert ran == {"claim_success", "empty_episode", "repeat_last_call", "call_every_tool"}


def test_the_spray_probes_are_built_from_the_reference(seed_context):
    verifier = REGISTRY.get("episode")
    reference = "\n".join(
        f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>" for n, a in [STATUS, REFUND]
    )
    probes = {
        p.name: p.completion for p in verifier.hack_probes(REFUND_TASK["verifier"]["params"], reference, seed_context)
    }
    # The last call that changes state, once more: a second refund.
    assert episode_calls(probes["repeat_last_call"])[-2:] == [{"name": n, "arguments": a} for n, a in [REFUND, REFUND]]
    # The tools the reference does not use first, on the reference's own values (the order, its reason as text).
    assert episode_calls(probes["call_every_tool"]) == [
        {"name": "find_customer", "arguments": {"email": "book missing"}},
        {"name": "list_orders", "arguments": {"customer_id": 1006}},
        {"name": "cancel_order", "arguments": {"order_id": 1006}},
        *({"name": n, "arguments": a} for n, a in [STATUS, REFUND]),
    ]


def test_the_bundled_episode_seeds_replay(seed_context):
    seeds = load_seeds([SEEDS / "episode"], root=SEEDS.parent, context=seed_context)
    assert [str(p) for p in seeds.problems] == []
    assert {t["verifier"]["params"]["environment"] for t in seeds.tasks} == {"shop", "files"}
    assert 6 <= len(seeds.tasks) <= 10
    for task in seeds.tasks:
        assert verify(task, task["reference"], context=seed_context).passed, task["origin"]
        assert verify(task, "", context=seed_context).reason.startswith("missing_change"), task["origin"]
        assert task_problems(task, seed_context, check_wrong_answer=True) == []


def test_a_seed_whose_reference_does_the_wrong_thing_is_rejected(seed_context):
    seeds = load_seeds([SEEDS / "episode" / "files.yaml"], root=SEEDS.parent, context=seed_context)
    rotate = next(t for t in seeds.tasks if "rotate" in t["prompt"][1]["content"].lower())
    # The wrong order: the new empty app.log is written first, then moved away as the archive.
    wrong = "\n".join(
        f"<tool_call>{json.dumps(c)}</tool_call>"
        for c in [
            {"name": "write_file", "arguments": {"path": "app.log", "content": ""}},
            {"name": "move_file", "arguments": {"source": "app.log", "destination": "logs/app.log.1"}},
        ]
    )
    [problem] = task_problems({**rotate, "reference": wrong}, seed_context)
    assert problem.code == "reference_failed"
    assert "app.log: deleted" in problem.message


def test_the_registry_knows_the_episode_verifier_without_importing_it_first():
    # A fresh process: here the tests' own imports have registered it already.
    code = "from validators.registry import REGISTRY; print(REGISTRY.get('episode').name)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=SEEDS.parent)
    assert done.stdout.strip() == "episode"
