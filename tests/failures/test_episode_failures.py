"""A failure log row with a tool loop whose expected outcome is a state becomes an `episode` task; rows without
that information stay on their old path."""

import json
from typing import Any

import pytest

from failures import failure_task, parse_failure_log, redact
from tests.paths import SEEDS
from validators.registry import VerifyContext, verify
from validators.tasks import task_problems

CONTEXT = VerifyContext(seeds_dir=SEEDS)
SYSTEM = {"role": "system", "content": "You are the shop's support agent."}
USER = {"role": "user", "content": "Please cancel order 1027, I changed my mind. Mail me at kenji.w@example.jp."}


def call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


# The agent looped: looked the order up, tried to refund a pending order twice, then gave up.
LOOP = [
    SYSTEM,
    USER,
    call("get_order_status", {"order_id": 1027}, "c1"),
    {"role": "tool", "tool_call_id": "c1", "content": '{"status": "pending"}'},
    call("refund_order", {"order_id": 1027, "amount_cents": 7998, "reason": "changed mind"}, "c2"),
    {"role": "tool", "tool_call_id": "c2", "content": '{"error": "order 1027 is pending"}'},
    call("refund_order", {"order_id": 1027, "amount_cents": 7998, "reason": "changed mind"}, "c3"),
    {"role": "tool", "tool_call_id": "c3", "content": '{"error": "order 1027 is pending"}'},
]
EPISODE = {
    "environment": "shop",
    "state": {"database": "sql/shop.sqlite"},
    "goal": {"changes": [{"collection": "orders", "key": "1027", "after": {"status": "cancelled"}}]},
    # The corrected calls, logged in the OpenAI shape.
    "tool_calls": [{"type": "function", "function": {"name": "cancel_order", "arguments": '{"order_id": 1027}'}}],
}


def derive(**fields: Any):
    fields.setdefault("messages", LOOP)
    fields.setdefault("output", "Sorry, I could not refund it.")
    (parsed,) = parse_failure_log([json.dumps(fields)], "log.jsonl").records
    return failure_task(redact(parsed)[0], context=CONTEXT)


def test_a_tool_loop_with_an_expected_state_becomes_a_valid_episode_task():
    task = derive(failure_id="f-loop", expected={"episode": EPISODE}).task

    assert task is not None
    assert task_problems(task, CONTEXT, check_wrong_answer=True) == []
    assert (task["family"], task["verifier"]["name"]) == ("episode", "episode")
    assert task["verifier"]["params"] == {key: EPISODE[key] for key in ("environment", "state", "goal")}
    assert task["lineage"]["failure_id"] == "f-loop" and task["lineage"]["source"] == "production_failure"
    # The prompt stops before the loop (the fresh state is where the conversation began) and lists the tools.
    system, user = task["prompt"]
    assert user["content"] == "Please cancel order 1027, I changed my mind. Mail me at [EMAIL]."  # redacted
    assert "<tool_call>" in system["content"] and '"name": "cancel_order"' in system["content"]
    assert task["reference"] == '<tool_call>\n{"name": "cancel_order", "arguments": {"order_id": 1027}}\n</tool_call>'
    # The agent's own loop fails the task; the corrected episode passes.
    logged = [m for m in LOOP if m["role"] != "system"][1:]
    assert verify(task, [*logged, {"role": "assistant", "content": "Sorry."}], context=CONTEXT).code == "wasted_call"
    assert verify(task, task["reference"], context=CONTEXT).passed


def test_without_corrected_calls_the_task_has_no_reference_and_is_still_checked():
    episode = {key: EPISODE[key] for key in ("environment", "state", "goal")}
    task = derive(expected={"episode": episode}).task
    assert task is not None and task["reference"] is None
    assert task_problems(task, CONTEXT, check_wrong_answer=True) == []


@pytest.mark.parametrize(
    ("episode", "code", "words"),
    [
        # No goal: the expected final state is what the task checks.
        ({"environment": "shop", "state": {"database": "sql/shop.sqlite"}}, "unsupported_expected", "goal"),
        ({**EPISODE, "environment": "bank"}, "unsupported_expected", "environment"),
        # A log must not point the verifier at files outside seeds/.
        ({**EPISODE, "state": {"database": "../secret.sqlite"}}, "unsupported_expected", "relative to seeds/"),
        # Corrected calls that do not reach the goal (a refund of a pending order): the task is invalid.
        (
            {**EPISODE, "tool_calls": [{"name": "refund_order", "arguments": {"order_id": 1027, "amount_cents": 1}}]},
            "invalid_task",
            "reference fails its own verifier",
        ),
    ],
)
def test_an_episode_the_log_does_not_pin_down_goes_to_review(episode, code, words):
    derived = derive(expected={"episode": episode})
    assert derived.task is None and derived.review is not None
    assert derived.review["reason_code"] == code and words in derived.review["reason"]
    assert "verifier:\n    name: episode" in derived.review["seed_stub"]


def test_rows_without_a_state_stay_on_their_old_path():
    # The same loop with a single expected call: a one-call tool_call task, as before.
    tool_call = derive(expected={"tool_call": {"name": "cancel_order", "arguments": {"order_id": 1027}}}).task
    assert tool_call is not None and tool_call["verifier"]["name"] == "tool_call"
    assert any('"name": "get_order_status"' in m["content"] for m in tool_call["prompt"])  # the loop is kept
    # No expected outcome at all: review, as before.
    assert derive().review["reason_code"] == "no_expected"


def test_the_corrected_calls_must_be_calls():
    (parsed,) = parse_failure_log(
        [json.dumps({"messages": LOOP, "output": "x", "expected": {"episode": {**EPISODE, "tool_calls": [5]}}})]
    ).rejects or [None]
    assert parsed is not None and parsed.reason_code == "wrong_type"
