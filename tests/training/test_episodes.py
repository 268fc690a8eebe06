"""Sampled multi-turn episodes: rollouts in the task's environment, batched per turn, scored by the `episode`
verifier. A scripted policy drives the loop for the exact cases (references, hostile output); the tiny random
model proves the real generation path, chat template and tool messages included."""

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from langmodels.generation import Engine
from tests.paths import SEEDS
from tests.training.scripted import Scripted, reference_script, request
from tests.training.scripted import tool_call as call
from training.episodes import (
    EPISODE_FIELDS,
    EngineTurns,
    assistant_tokens,
    episodes_table,
    pass_rates_by_environment,
    reference_turns,
    sample_episodes,
)
from training.stats import EvaluationError
from validators.environments import END_REASONS
from validators.registry import VerifyContext, verify
from validators.seeds import load_seeds
from validators.verifiers.episode import CLAIM_OF_SUCCESS, episode_answer, episode_calls, replay


@pytest.fixture(scope="module")
def seed_tasks(seed_context: VerifyContext) -> list[dict[str, Any]]:
    seeds = load_seeds([SEEDS / "episode"], root=SEEDS.parent, context=seed_context)
    assert seeds.problems == [] and len(seeds.tasks) >= 6
    return seeds.tasks


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary folder the environments copy their state into, so a test can see that nothing is left."""
    folder = tmp_path / "episodes-tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def assert_replay_agrees(task: Mapping[str, Any], row: Mapping[str, Any], context: VerifyContext) -> None:
    """The verifier's replay of the row's messages ends as the rollout did, with the same changes and verdict."""
    replayed = replay(task["verifier"]["params"], row["turns"], context, prompt=task["prompt"])
    assert replayed.end_reason == row["end_reason"]
    assert [c.__dict__ for c in replayed.changes] == row["changes"]
    assert (replayed.verdict.passed, replayed.verdict.reason) == (row["passed"], row["reason"])
    assert verify(task, row["completion"], context=context) == replayed.verdict


def test_the_seed_references_played_turn_by_turn_end_answered_and_pass(seed_tasks, seed_context, private_tmp):
    database = seed_context.seeds_dir / "sql" / "shop.sqlite"
    before = database.read_bytes()
    plays = {request(task["prompt"]): reference_script(task) for task in seed_tasks}
    policy = Scripted(plays)

    rows = sample_episodes("scripted", seed_tasks, k=2, context=seed_context, workers=1, generate=policy)
    assert all(tuple(row) == EPISODE_FIELDS for row in rows)  # the columns the `episodes` asset stores

    assert [(r["task_id"], r["sample"]) for r in rows] == [(t["task_id"], s) for t in seed_tasks for s in (0, 1)]
    for task, row in zip([t for t in seed_tasks for _ in (0, 1)], rows, strict=True):
        calls = episode_calls(task["reference"])
        assert (row["end_reason"], row["passed"], row["score"], row["reason"]) == ("answered", True, 1.0, "ok")
        assert (row["family"], row["model"], row["tool_calls"]) == ("episode", "scripted", len(calls))
        assert episode_calls(row["completion"]) == calls and row["completion"].endswith(
            plays[request(task["prompt"])][-1]
        )
        # Each call its own assistant turn, answered by its tool message; then the answer.
        assert [m["role"] for m in row["turns"]] == ["assistant", "tool"] * len(calls) + ["assistant"]
        for message, result in zip(row["turns"][0:-1:2], row["turns"][1::2], strict=True):
            assert result["tool_call_id"] == message["tool_calls"][0]["id"]
            assert "error" not in json.loads(result["content"])
        assert row["changes"], task["origin"]
        assert_replay_agrees(task, row, seed_context)
    # One batched turn per round for every live episode: all of them, then fewer as the short ones answer.
    longest = max(len(p) for p in plays.values())
    assert len(policy.batches) == longest and policy.batches[0] == 2 * len(seed_tasks)
    assert policy.batches == sorted(policy.batches, reverse=True)
    assert database.read_bytes() == before
    assert list(private_tmp.iterdir()) == []  # every episode's copy removed


def test_the_episodes_table_names_the_policy_each_environment_and_how_they_were_played(seed_tasks):
    tasks = [t for t in seed_tasks if t["verifier"]["params"]["environment"] == "shop"][:2]
    rows = [
        dict.fromkeys(EPISODE_FIELDS) | {"task_id": t["task_id"], "sample": s, "model": "/tmp/copy", "passed": s == 0}
        for t in tasks
        for s in (0, 1)
    ]
    played = episodes_table(rows, tasks, model="s3://b/sft/final", sampling="max_turns=2")
    assert played.columns.tolist() == [*EPISODE_FIELDS, "environment", "sampling"]
    # The policy as the pipeline names it (difficulty_profile compares it), not the local copy that played.
    assert set(played["model"]) == {"s3://b/sft/final"} and set(played["sampling"]) == {"max_turns=2"}
    assert played["environment"].tolist() == ["shop"] * 4
    assert pass_rates_by_environment(played) == [{"environment": "shop", "episodes": 4, "pass_rate": 0.5}]
    # No episode task among the profiled ones: an empty table with the same columns.
    nothing = episodes_table([], [], model="s3://b/sft/final", sampling="max_turns=2")
    assert nothing.columns.tolist() == played.columns.tolist() and pass_rates_by_environment(nothing) == []


def test_reference_turns_are_one_call_per_turn_with_its_result_then_the_answer(seed_tasks, seed_context, private_tmp):
    database = seed_context.seeds_dir / "sql" / "shop.sqlite"
    before = database.read_bytes()
    played = reference_turns(seed_tasks, seed_context)
    assert len(played) == len(seed_tasks)
    for task, turns in zip(seed_tasks, played, strict=True):
        calls = episode_calls(task["reference"])
        assert [m["role"] for m in turns] == ["assistant", "tool"] * len(calls) + ["assistant"]
        assert [episode_calls(m["content"]) for m in turns[0:-1:2]] == [[c] for c in calls]
        assert turns[-1]["content"] == episode_answer(task["reference"])
        assert all("error" not in json.loads(m["content"]) for m in turns[1::2])
        replayed = replay(task["verifier"]["params"], turns, seed_context, prompt=task["prompt"])
        assert (replayed.end_reason, replayed.verdict.passed) == ("answered", True), task["origin"]
    assert database.read_bytes() == before
    assert list(private_tmp.iterdir()) == []


def test_assistant_tokens_mark_what_the_assistant_wrote(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompt = [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": "Cancel order 1027."}]
    turn = call("cancel_order", {"order_id": 1027})
    side = [
        {"role": "assistant", "content": turn},
        {"role": "tool", "content": '{"status": "cancelled"}'},
        {"role": "assistant", "content": "Cancelled."},
    ]
    ids, mask = assistant_tokens(tokenizer, prompt, side)
    assert ids == tokenizer.apply_chat_template(prompt + side)["input_ids"] and len(mask) == len(ids)
    trained = tokenizer.decode([token for token, keep in zip(ids, mask, strict=True) if keep])
    assert trained == f"{turn}<|im_end|>\nCancelled.<|im_end|>\n"
    # One answer: the usual split, everything after the prompt and its generation prompt.
    opener = len(tokenizer.apply_chat_template(prompt, add_generation_prompt=True)["input_ids"])
    _, answer = assistant_tokens(tokenizer, prompt, side[-1:])
    assert answer == [0] * opener + [1] * (len(answer) - opener)


BIG = "x" * 10_000_000
REFUND = {"order_id": 1021, "amount_cents": 10696, "reason": "arrived damaged"}
LOOKUPS = [call("find_customer", {"email": "alice.martin@example.com"}), call("list_orders", {"customer_id": 1})]
UNPARSED = '<tool_call>{"name": "refund_order", "arguments": {"order_id": 1021,</tool_call>'
STRING_ARGUMENTS = '<tool_call>{"name": "refund_order", "arguments": "{order_id: 1021"}</tool_call>'
# Braces and a closing tag inside a value: the completion written from the calls must read back as the same calls.
TRICKY_REFUND = call("refund_order", {**REFUND, "reason": "box {crushed</tool_call> {"})


@pytest.mark.parametrize(
    ("turns", "end_reason", "code", "tool_calls"),
    [
        # A claim of success without a call: answered, and nothing changed.
        pytest.param([CLAIM_OF_SUCCESS], "answered", "missing_change", 0, id="claim"),
        # Nothing at all.
        pytest.param([""], "answered", "missing_change", 0, id="empty"),
        # 10 MB of arguments: refused before they are parsed, the episode ends.
        pytest.param([call("refund_order", {**REFUND, "reason": BIG})], "invalid_call", "invalid_call", 1, id="10MB"),
        # A tool the environment does not offer.
        pytest.param([call("drop_table", {"table": "orders"})], "invalid_call", "invalid_call", 1, id="unknown-tool"),
        # JSON that does not parse is no call: the turn is the answer.
        pytest.param([UNPARSED], "answered", "missing_change", 0, id="malformed-json"),
        # Arguments that are not a JSON object.
        pytest.param([STRING_ARGUMENTS], "invalid_call", "invalid_call", 1, id="arguments-not-json"),
        # Arguments against the tool's schema (a string where cents are an integer).
        pytest.param(
            [call("refund_order", {**REFUND, "amount_cents": "all"})], "invalid_call", "invalid_call", 1, id="schema"
        ),
        # The same lookup until the turn limit (the task's 30).
        pytest.param([LOOKUPS[0]], "max_turns", "max_turns", 30, id="repeat-lookup"),
        # The refund, then the same refund again: each refusal comes back, the third ends the episode.
        pytest.param([*LOOKUPS, call("refund_order", REFUND)], "tool_error", "tool_error", 6, id="repeat-refund"),
        # An invalid call ends the episode at once: the refund written after it in the same turn never runs.
        pytest.param(
            [call("drop_table", {}) + call("refund_order", REFUND)],
            "invalid_call",
            "invalid_call",
            1,
            id="then-refund",
        ),
        # Every call of the episode in one turn, then the answer: they all run, in order.
        pytest.param(["".join([*LOOKUPS, TRICKY_REFUND]), "Refunded."], "answered", "ok", 3, id="one-turn"),
    ],
)
def test_hostile_and_broken_turns_end_cleanly(
    seed_tasks, seed_context, private_tmp, turns, end_reason, code, tool_calls
):
    [task] = [t for t in seed_tasks if "alice.martin" in request(t["prompt"])]
    database = seed_context.seeds_dir / "sql" / "shop.sqlite"
    before = database.read_bytes()

    [row] = sample_episodes(
        "scripted", [task], context=seed_context, workers=1, generate=Scripted({request(task["prompt"]): turns})
    )

    assert (row["end_reason"], row["reason"].split(":")[0], row["tool_calls"]) == (end_reason, code, tool_calls)
    assert row["passed"] is (code == "ok")
    assert_replay_agrees(task, row, seed_context)
    assert database.read_bytes() == before
    assert list(private_tmp.iterdir()) == []


def with_limits(task: Mapping[str, Any], **limits: Any) -> dict[str, Any]:
    params = {**task["verifier"]["params"], "limits": limits}
    return {**task, "verifier": {**task["verifier"], "params": params}}


def test_generation_time_is_not_the_episodes_time(seed_tasks, seed_context):
    task = next(t for t in seed_tasks if t["verifier"]["params"]["environment"] == "shop")
    plays = {request(task["prompt"]): reference_script(task)}
    # Each generation takes longer than the episode's whole time limit; its tools take far less.
    [slow] = sample_episodes(
        "scripted",
        [with_limits(task, max_seconds=0.2)],
        context=seed_context,
        workers=1,
        generate=Scripted(plays, 0.25),
    )
    assert (slow["end_reason"], slow["passed"]) == ("answered", True)
    # With no time at all, the first call runs (no time has gone by yet) and the next turn is refused.
    hurried = with_limits(task, max_seconds=1e-9)
    [row] = sample_episodes("scripted", [hurried], context=seed_context, workers=1, generate=Scripted(plays))
    assert (row["end_reason"], row["tool_calls"], row["passed"]) == ("timeout", 2, False)
    assert row["reason"].startswith("timeout")


def test_max_turns_caps_the_episode_and_its_replay(seed_tasks, seed_context):
    task = next(t for t in seed_tasks if len(episode_calls(t["reference"])) >= 3)
    plays = {request(task["prompt"]): reference_script(task)}

    [row] = sample_episodes("scripted", [task], context=seed_context, max_turns=2, workers=1, generate=Scripted(plays))

    assert (row["end_reason"], row["tool_calls"], row["passed"]) == ("max_turns", 2, False)
    assert row["reason"] == "max_turns: 2 turns without an answer"
    # A cap above the task's own limit changes nothing.
    [full] = sample_episodes(
        "scripted", [task], context=seed_context, max_turns=99, workers=1, generate=Scripted(plays)
    )
    assert (full["end_reason"], full["passed"]) == ("answered", True)


def test_a_failing_policy_leaves_no_episode_behind(seed_tasks, seed_context, private_tmp):
    copies = []

    def broken(conversations, seeds):
        copies.append(len(list(private_tmp.iterdir())))
        raise RuntimeError("the GPU fell over")

    with pytest.raises(RuntimeError, match="fell over") as raised:
        sample_episodes("scripted", seed_tasks, k=2, context=seed_context, generate=broken)
    assert copies == [2 * len(seed_tasks)]  # one copy of its state per episode while they ran
    # Closed by sample_episodes itself: the traceback still holds the environments, so no finalizer removed them.
    assert raised.traceback and list(private_tmp.iterdir()) == []


@pytest.mark.parametrize(
    ("tasks", "options", "match"),
    [
        # No sample per task.
        ([], {"k": 0}, "at least 1"),
        # A turn cap of zero turns would end every episode before it starts.
        ([], {"max_turns": 0}, "at least 1"),
        # A negative temperature is no sampling setting (0 is greedy).
        ([], {"temperature": -1.0}, "temperature"),
        # A task listed twice would be counted twice.
        ([{"task_id": "a", "verifier": {"name": "episode"}}] * 2, {}, "twice"),
        # A single-turn task has no environment to act in.
        ([{"task_id": "a", "verifier": {"name": "numeric_answer"}}], {}, "sample_and_score"),
    ],
)
def test_bad_arguments_raise_with_a_reason(tasks, options, match):
    with pytest.raises(EvaluationError, match=match):
        sample_episodes("unused", tasks, **options)


def test_the_tiny_model_plays_episodes_one_batched_generation_per_turn(
    tiny_model_dir, seed_tasks, seed_context, monkeypatch
):
    # A files episode and a shop one whose references make at least two calls.
    tasks = [
        next(t for t in seed_tasks if t["verifier"]["params"]["environment"] == env and len(reference_script(t)) > 2)
        for env in ("files", "shop")
    ]
    batches: list[int] = []
    generate = Engine.generate

    def counted(engine, requests):
        batches.append(len(requests))
        return generate(engine, requests)

    monkeypatch.setattr(Engine, "generate", counted)
    real = EngineTurns(tiny_model_dir, max_new_tokens=8, temperature=1.0, batch_size=8)
    plays = {request(t["prompt"]): reference_script(t)[:2] for t in tasks}

    def policy(conversations, seeds):
        """The model's own turns, overridden by the reference's first two calls: the tool messages and the
        assistant turns with calls go through the real chat template, and the third turn is the model's."""
        texts = real(conversations, seeds)
        turns = [sum(m["role"] == "assistant" for m in c) for c in conversations]
        return [
            plays[request(c)][t] if t < 2 else text for c, t, text in zip(conversations, turns, texts, strict=True)
        ]

    rows = sample_episodes(
        tiny_model_dir, tasks, k=2, context=seed_context, max_new_tokens=8, workers=1, generate=policy
    )

    # Three rounds (two scripted calls, the model's turn), each one generate call for every live episode.
    assert batches == [4, 4, 4]
    for task, row in zip([t for t in tasks for _ in (0, 1)], rows, strict=True):
        assert row["end_reason"] in END_REASONS and row["tool_calls"] >= 2
        assert_replay_agrees(task, row, seed_context)
    # The model's own texts differ between samples: each (task, sample, turn) has its own seed.
    assert len({json.dumps(row["turns"][4:]) for row in rows}) == 4


def test_the_tiny_model_samples_episodes_end_to_end(tiny_model_dir, seed_tasks, seed_context):
    tasks = seed_tasks[3:6]
    options = {"k": 2, "max_new_tokens": 8, "temperature": 1.0, "seed": 5, "context": seed_context, "workers": 1}

    rows = sample_episodes(tiny_model_dir, tasks, batch_size=8, **options)
    again = sample_episodes(tiny_model_dir, tasks, batch_size=1, **options)

    assert len(rows) == 6
    for row in rows:
        assert {"completion", "passed", "score", "reason", "turns", "changes", "end_reason"} <= set(row)
        assert row["model"] == str(tiny_model_dir) and isinstance(row["completion"], str)
        assert row["turns"][0]["role"] == "assistant" and not row["passed"]  # random weights solve nothing
    # The same episodes whatever the batch size.
    assert [r["turns"] for r in again] == [r["turns"] for r in rows]


def test_engine_turns_match_one_conversation_at_a_time(tiny_model_dir, seed_tasks, caplog):
    # Prompts of different lengths, given out of their token order: each gets its own turn back.
    conversations = [t["prompt"] for t in seed_tasks[:4]][::-1]
    seeds = [11, 12, 13, 14]
    turns = EngineTurns(tiny_model_dir, max_new_tokens=6, temperature=1.0, batch_size=3)

    together = turns(conversations, seeds)

    assert together == [turns([c], [s])[0] for c, s in zip(conversations, seeds, strict=True)]
    # Past the model's context (4096 positions) a conversation gets an empty turn, and a warning says so.
    too_long = EngineTurns(tiny_model_dir, max_new_tokens=5000, temperature=1.0, batch_size=3)
    assert too_long(conversations[:2], seeds[:2]) == ["", ""]
    assert "2 of 2 episodes plus max_new_tokens=5000 exceed" in caplog.text
