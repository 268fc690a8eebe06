"""Preference pairs from verified rollouts: what pairs, dedup, the eval-split guard, determinism, export."""

from __future__ import annotations

import doctest
import json
import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.paths import SEEDS
from tests.training.scripted import reference_script
from training import preferences
from training.episodes import sample_episodes
from training.preferences import (
    PAIR_COLUMNS,
    PAIR_SCHEMA,
    EvalLeakError,
    PreferenceDataError,
    build_preference_pairs,
    episode_pairs,
    export_pairs,
    outcomes_by_split,
    pairs_by_family,
    pairs_frame,
    profile_rollouts,
    side_text,
    split_pairs,
)
from validators.registry import VerifyContext
from validators.seeds import load_seeds
from validators.verifiers.episode import CLAIM_OF_SUCCESS, episode_calls

PROMPT = [{"role": "system", "content": "Answer with #### <number>."}, {"role": "user", "content": "2 + 2?"}]
TASKS = [
    {"task_id": "t1", "family": "arithmetic", "prompt": PROMPT},
    {"task_id": "t2", "family": "sql", "prompt": [{"role": "user", "content": "Count the rows."}]},
]
SIDES = ("prompt", "chosen", "rejected")


def sample(text: str, passed: bool, index: int = 0, *, task: str = "t1", model: str = "m") -> dict[str, Any]:
    """One scored rollout, as difficulty_profile and checkpoint_eval keep them."""
    return {
        "task_id": task,
        "model": model,
        "sample": index,
        "completion": text,
        "passed": passed,
        "score": float(passed),
        "reason": "matches" if passed else "wrong answer",
    }


def texts(pairs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(p["chosen"][0]["content"], p["rejected"][0]["content"]) for p in pairs]


def without_nulls(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pairs read back from Parquet, less the null keys its fixed message type gives a message that lacks them."""
    return [
        {k: [{f: v for f, v in m.items() if v is not None} for m in v] if k in SIDES else v for k, v in row.items()}
        for row in rows
    ]


@pytest.mark.parametrize(
    ("samples", "max_pairs", "expected", "outcome", "dropped"),
    [
        # Every completion passed: nothing to prefer against, no pair.
        ([sample("#### 4", True, 0), sample("4", True, 1)], 4, [], "no_failing", {}),
        # Every completion failed: nothing to prefer, no pair.
        ([sample("#### 5", False, 0), sample("", False, 1)], 4, [], "no_passing", {}),
        # One of each: one pair, the passing one chosen.
        ([sample("#### 5", False, 0), sample("#### 4", True, 1)], 4, [("#### 4", "#### 5")], "paired", {}),
        # Exact duplicates on both sides count once: one pair, not four copies of it.
        (
            [sample("#### 4", True, 0), sample("#### 4", True, 1), sample("x", False, 2), sample("x", False, 3)],
            4,
            [("#### 4", "x")],
            "paired",
            {"duplicate": 2},
        ),
        # A text that passed once and failed once (a flaky verifier) is dropped from both sides, so no pair ever
        # has the same text on both sides; here that leaves no passing completion.
        (
            [sample("#### 4", True, 0), sample("#### 4", False, 1), sample("x", False, 2)],
            4,
            [],
            "no_passing",
            {"conflicting": 2},
        ),
        # 2 passing, 3 failing: every distinct completion is used before any is reused, in sample order.
        (
            [sample(t, t.startswith("ok"), i) for i, t in enumerate(["ok1", "bad1", "bad2", "ok2", "bad3"])],
            4,
            [("ok1", "bad1"), ("ok2", "bad2"), ("ok1", "bad3")],
            "paired",
            {},
        ),
        # The cap: 3 passing x 3 failing could make 9 pairs; 2 are kept, so one task cannot dominate the set.
        (
            [sample(f"ok{i}", True, i) for i in range(3)] + [sample(f"bad{i}", False, 3 + i) for i in range(3)],
            2,
            [("ok0", "bad0"), ("ok1", "bad1")],
            "paired",
            {},
        ),
    ],
)
def test_pairs_per_task(samples, max_pairs, expected, outcome, dropped) -> None:
    result = build_preference_pairs(samples, TASKS, split="train", source="rollouts", max_pairs_per_task=max_pairs)
    assert texts(result.pairs) == expected
    assert result.outcomes == {("t1", "m"): outcome}
    assert dict(result.dropped) == dropped
    assert result.tasks_with_pairs == (1 if expected else 0)
    assert all(p["chosen"] != p["rejected"] for p in result.pairs)


def test_a_pair_is_trl_conversational_preference_data_with_both_verdicts() -> None:
    [pair] = build_preference_pairs(
        [sample("#### 4", True, 0), sample("#### 5", False, 1)], TASKS, split="train", source="difficulty_profile"
    ).pairs
    assert set(pair) == set(PAIR_COLUMNS)
    assert pair["prompt"] == PROMPT  # the task's own messages
    assert pair["chosen"] == [{"role": "assistant", "content": "#### 4"}]
    assert pair["rejected"] == [{"role": "assistant", "content": "#### 5"}]
    assert (pair["chosen_reason"], pair["rejected_reason"]) == ("matches", "wrong answer")
    assert (pair["chosen_score"], pair["rejected_score"]) == (1.0, 0.0)
    assert (pair["task_id"], pair["family"], pair["split"]) == ("t1", "arithmetic", "train")
    assert (pair["source"], pair["model"]) == ("difficulty_profile", "m")


def test_pairs_never_mix_models_and_unknown_tasks_are_counted() -> None:
    samples = [
        sample("#### 4", True, 0, model="candidate"),  # the candidate passed ...
        sample("#### 5", False, 0, model="baseline"),  # ... the baseline failed: not a pair of one policy's samples
        sample("#### 4", True, 0, task="gone"),  # a task no longer in the split
    ]
    result = build_preference_pairs(samples, TASKS, split="eval", source="checkpoint_eval")
    assert result.pairs == []
    assert result.outcomes == {("t1", "baseline"): "no_passing", ("t1", "candidate"): "no_failing"}
    assert dict(result.dropped) == {"unknown_task": 1}


def test_rollouts_on_eval_tasks_never_become_training_pairs() -> None:
    rollouts = [sample("#### 4", True, 0, task="t2"), sample("x", False, 1, task="t2")]
    with pytest.raises(EvalLeakError, match=r"1 held-out task\(s\).*\['t2'\].*split='eval'"):
        build_preference_pairs(rollouts, TASKS, split="train", source="checkpoint_eval", held_out={"t2"})
    # The same rollouts are fine as held-out pairs, marked so.
    held_out = build_preference_pairs(rollouts, TASKS, split="eval", source="checkpoint_eval", held_out={"t2"})
    assert [p["split"] for p in held_out.pairs] == ["eval"]


def test_the_two_splits_pair_apart_from_their_own_rollouts() -> None:
    train, held_out = TASKS[:1], [{**TASKS[1], "family": "episode", "verifier": {"name": "episode", "params": {}}}]
    # The profile's rollouts of t1 (sampled by the policy it profiled); a task it did not sample has none.
    profile = [
        {"task_id": "t1", "policy": "sft", "rollouts": [sample("#### 4", True, 0), sample("#### 5", False, 1)]},
        {"task_id": "t9", "policy": "sft", "rollouts": None},
    ]
    rollouts = profile_rollouts(profile)
    assert [(r["task_id"], r["model"], r["sample"]) for r in rollouts] == [("t1", "sft", 0), ("t1", "sft", 1)]
    gate = [sample("#### 1", True, 0, task="t2", model="ckpt"), sample("#### 2", False, 1, task="t2", model="ckpt")]
    built = split_pairs(rollouts, train, gate, held_out, max_pairs_per_task=2)
    pairs = pairs_frame(built)
    assert pairs[["split", "task_id", "source", "model"]].values.tolist() == [
        ["train", "t1", "difficulty_profile", "sft"],
        ["eval", "t2", "checkpoint_eval", "ckpt"],
    ]
    assert pairs_by_family(pairs) == [
        {"split": "eval", "source": "checkpoint_eval", "family": "episode", "pairs": 1, "tasks": 1},
        {"split": "train", "source": "difficulty_profile", "family": "arithmetic", "pairs": 1, "tasks": 1},
    ]
    assert outcomes_by_split(built) == [
        {"split": "train", "outcome": "paired", "tasks": 1},
        {"split": "eval", "outcome": "paired", "tasks": 1},
    ]
    assert (episode_pairs(pairs, train + held_out), episode_pairs(pairs, train)) == (1, 0)  # t2 is an episode task
    # The profile's rollouts must not hold an eval task: the eval split is held out of the training pairs.
    with pytest.raises(EvalLeakError, match=r"\['t2'\]"):
        split_pairs([*rollouts, *gate], train, gate, held_out)


def test_pairs_do_not_depend_on_row_order() -> None:
    samples = [sample(f"ok{i}", True, i) for i in range(3)] + [sample(f"bad{i}", False, 3 + i) for i in range(4)]
    samples += [sample("ok9", True, 0, task="t2"), sample("bad9", False, 1, task="t2")]
    first = build_preference_pairs(samples, TASKS, split="train", source="s").pairs
    random.Random(7).shuffle(samples)
    assert build_preference_pairs(samples, list(reversed(TASKS)), split="train", source="s").pairs == first
    assert [p["task_id"] for p in first] == ["t1"] * 4 + ["t2"]


@pytest.mark.parametrize(
    ("samples", "kwargs", "message"),
    [
        # A rollout without its text cannot be paired: the row is named.
        ([{"task_id": "t1", "passed": True}], {}, "rollout row 0 \\(task t1\\) lacks completion"),
        # A cap below one would silently make no pairs.
        ([], {"max_pairs_per_task": 0}, "max_pairs_per_task=0 must be >= 1"),
        # Only train and eval exist; anything else is a typo.
        ([], {"split": "test"}, "split must be one of train, eval"),
    ],
)
def test_bad_input_is_refused_with_the_fix(samples, kwargs, message) -> None:
    with pytest.raises(PreferenceDataError, match=message):
        build_preference_pairs(samples, TASKS, **{"split": "train", "source": "s", **kwargs})


def test_export_writes_each_split_to_its_own_files(tmp_path: Path) -> None:
    pairs = build_preference_pairs([sample("ok", True, 0), sample("bad", False, 1)], TASKS, split="train", source="s")
    exported = export_pairs(pairs.pairs, tmp_path, "train")
    assert (exported.parquet.name, exported.jsonl.name, exported.rows) == (
        "preferences_train.parquet",
        "preferences_train.jsonl",
        1,
    )
    assert without_nulls(pq.read_table(exported.parquet).to_pylist()) == pairs.pairs
    assert [json.loads(line) for line in exported.jsonl.read_text().splitlines()] == pairs.pairs
    empty = export_pairs([], tmp_path, "eval")  # no pairs this run: the file still has its columns and types
    assert pq.read_schema(empty.parquet).equals(PAIR_SCHEMA) and empty.jsonl.read_text() == ""
    with pytest.raises(PreferenceDataError, match="another split in the eval export"):
        export_pairs(pairs.pairs, tmp_path, "eval")


def test_the_docstring_example_runs() -> None:
    result = doctest.testmod(preferences)
    assert (result.attempted, result.failed) == (9, 0)


@pytest.fixture(scope="module")
def shop_task(seed_context: VerifyContext) -> dict[str, Any]:
    """A shop episode whose reference makes at least two calls."""
    seeds = load_seeds([SEEDS / "episode"], root=SEEDS.parent, context=seed_context)
    return next(
        t
        for t in seeds.tasks
        if t["verifier"]["params"]["environment"] == "shop" and len(episode_calls(t["reference"])) > 1
    )


def played(task: dict[str, Any], turns: list[str], context: VerifyContext, sample: int = 0) -> dict[str, Any]:
    """One episode of `task` in which the policy writes `turns`, one per round, as sample_episodes scores it."""
    [row] = sample_episodes(
        "sft",
        [task],
        context=context,
        workers=1,
        generate=lambda conversations, seeds: [
            turns[min(sum(m["role"] == "assistant" for m in c), len(turns) - 1)] for c in conversations
        ],
    )
    return {**row, "sample": sample}


def test_an_episode_side_is_its_turns_exactly_as_played(shop_task, seed_context, tmp_path: Path) -> None:
    solved = played(shop_task, reference_script(shop_task), seed_context, sample=0)
    claimed = played(shop_task, [reference_script(shop_task)[0], CLAIM_OF_SUCCESS], seed_context, sample=1)
    assert (solved["passed"], claimed["passed"]) == (True, False)

    [pair] = build_preference_pairs([solved, claimed], [shop_task], split="train", source="difficulty_profile").pairs

    # Every turn: the calls (with their OpenAI tool_calls), the tools' answers, the final answer; not the flattened
    # completion, which holds the calls alone.
    assert pair["chosen"] == solved["turns"] and pair["rejected"] == claimed["turns"]
    assert [m["role"] for m in pair["chosen"]] == ["assistant", "tool"] * (len(solved["turns"]) // 2) + ["assistant"]
    assert pair["chosen"][0]["tool_calls"][0]["function"]["name"] == episode_calls(shop_task["reference"])[0]["name"]
    assert pair["prompt"] == shop_task["prompt"]
    assert (pair["chosen_reason"], pair["rejected_reason"].split(":")[0]) == ("ok", "missing_change")
    # The pair owns its messages: changing them leaves the rollouts as they were.
    pair["chosen"][0]["content"] = "edited"
    assert solved["turns"][0]["content"] != "edited"
    # Both files keep every message: the JSON Lines exactly, the Parquet file with nulls where a key is absent.
    exported = export_pairs(
        build_preference_pairs([solved, claimed], [shop_task], split="train", source="s").pairs,
        tmp_path,
        "train",
    )
    [from_jsonl] = [json.loads(line) for line in exported.jsonl.read_text().splitlines()]
    assert (from_jsonl["chosen"], from_jsonl["rejected"]) == (solved["turns"], claimed["turns"])
    [from_parquet] = without_nulls(pq.read_table(exported.parquet).to_pylist())
    assert (from_parquet["chosen"], from_parquet["rejected"]) == (solved["turns"], claimed["turns"])
    assert side_text(pair["rejected"]).endswith(f"→ {CLAIM_OF_SUCCESS}")


def episode(turns: list[dict[str, Any]], passed: bool, index: int, completion: str = "<tool_call>...</tool_call>"):
    return {**sample(completion, passed, index), "turns": turns}


CALL = {
    "role": "assistant",
    "content": "<tool_call>{}</tool_call>",
    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "find_customer", "arguments": "{}"}}],
}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": '{"id": 1}'}


DONE = [CALL, RESULT, {"role": "assistant", "content": "Done."}]
REFUSED = [CALL, RESULT, {"role": "assistant", "content": "No."}]
WORDY = [[{**CALL, "content": f"{word} <tool_call>{{}}</tool_call>"}, RESULT] for word in ("Let me", "I will")]


@pytest.mark.parametrize(
    ("samples", "rejected", "dropped"),
    [
        # The same turns twice count once: one pair.
        (
            [episode(DONE, True, 0), episode(REFUSED, False, 1), episode(REFUSED, False, 2)],
            [REFUSED],
            {"duplicate": 1},
        ),
        # The same calls (so one completion text) in other words: two sides, each paired.
        ([episode(DONE, True, 0), episode(WORDY[0], False, 1), episode(WORDY[1], False, 2)], WORDY, {}),
        # A single-turn sample (no turns) beside an episode of the same task and model: its side is its text.
        ([episode(DONE, True, 0), sample("No.", False, 1)], [[{"role": "assistant", "content": "No."}]], {}),
    ],
)
def test_episode_sides_are_compared_by_their_messages(samples, rejected, dropped) -> None:
    result = build_preference_pairs(samples, TASKS, split="train", source="s")
    assert [p["chosen"] for p in result.pairs] == [DONE] * len(rejected)
    assert [p["rejected"] for p in result.pairs] == rejected
    assert dict(result.dropped) == dropped


@pytest.mark.parametrize(
    "turns",
    [
        # Text where the messages should be.
        "<tool_call>{}</tool_call>",
        # No message at all: an episode always has at least its first turn.
        [],
        # A message without content.
        [{"role": "assistant"}],
    ],
)
def test_turns_that_are_not_messages_are_refused(turns) -> None:
    with pytest.raises(PreferenceDataError, match=r"rollout row 0 \(task t1\) has turns that are not chat messages"):
        build_preference_pairs([episode(turns, True, 0)], TASKS, split="train", source="s")
