"""Preference pairs from verified rollouts: what pairs, dedup, the eval-split guard, determinism, export."""

from __future__ import annotations

import doctest
import json
import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from training import preferences
from training.preferences import (
    PAIR_COLUMNS,
    PAIR_SCHEMA,
    EvalLeakError,
    PreferenceDataError,
    build_preference_pairs,
    export_pairs,
)

PROMPT = [{"role": "system", "content": "Answer with #### <number>."}, {"role": "user", "content": "2 + 2?"}]
TASKS = [
    {"task_id": "t1", "family": "arithmetic", "prompt": PROMPT},
    {"task_id": "t2", "family": "sql", "prompt": [{"role": "user", "content": "Count the rows."}]},
]


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
    assert pq.read_table(exported.parquet).to_pylist() == pairs.pairs
    assert [json.loads(line) for line in exported.jsonl.read_text().splitlines()] == pairs.pairs
    empty = export_pairs([], tmp_path, "eval")  # no pairs this run: the file still has its columns and types
    assert pq.read_schema(empty.parquet).equals(PAIR_SCHEMA) and empty.jsonl.read_text() == ""
    with pytest.raises(PreferenceDataError, match="another split in the eval export"):
        export_pairs(pairs.pairs, tmp_path, "eval")


def test_the_docstring_example_runs() -> None:
    result = doctest.testmod(preferences)
    assert (result.attempted, result.failed) == (4, 0)
