"""Difficulty labels of the offline profile, which labels GRPO trains on, the profile table and its checks of the
episodes it reads."""

import re

import pandas as pd
import pytest

from training.difficulty import (
    DIFFICULTY_LABELS,
    ROLLOUT_FIELDS,
    check_played_episodes,
    difficulty_label,
    empty_grpo_set_reason,
    grpo_set,
    in_grpo_set,
    labels_by_family,
    not_profiled,
    profile_table,
    rollouts_by_task,
    score_profiled,
    solved_counts,
    solved_histogram,
)
from training.evaluation import SampledVerdicts
from validators.registry import VerifyContext


@pytest.mark.parametrize(
    ("solved", "k", "label"),
    [
        # Not sampled (over the per-family cap): nothing is known.
        (None, 4, "not_profiled"),
        # No sample passed: every completion gets the same reward, no signal.
        (0, 4, "never_solved"),
        # Every sample passed: no signal either.
        (4, 4, "always_solved"),
        # Some passed: the rewards of the group differ, GRPO can learn from it.
        (1, 4, "learnable"),
        (3, 4, "learnable"),
        # One sample per task can never be learnable: it passes or it does not.
        (1, 1, "always_solved"),
        (0, 1, "never_solved"),
    ],
)
def test_difficulty_label(solved, k, label):
    assert difficulty_label(solved, k) == label
    assert label in DIFFICULTY_LABELS


@pytest.mark.parametrize(
    ("label", "grpo_unprofiled", "kept"),
    [
        # A learnable task is always trained on.
        ("learnable", True, True),
        ("learnable", False, True),
        # Known to carry no signal: left out whatever the policy.
        ("never_solved", True, False),
        ("always_solved", True, False),
        # Unknown signal: kept unless the policy keeps GRPO to learnable tasks.
        ("not_profiled", True, True),
        ("not_profiled", False, False),
    ],
)
def test_in_grpo_set(label, grpo_unprofiled, kept):
    assert in_grpo_set(label, grpo_unprofiled=grpo_unprofiled) is kept


@pytest.mark.parametrize(
    ("passed", "task_ids", "counts"),
    [
        # Passes are counted per task, in the order asked for.
        ({"a": [True, False, True], "b": [False, False]}, ["b", "a"], [0, 2]),
        # A task that was not sampled has no count (not 0: it was never tried).
        ({"a": [True]}, ["a", "c"], [1, None]),
        # Nothing sampled.
        ({}, ["a"], [None]),
    ],
)
def test_solved_counts(passed, task_ids, counts):
    assert solved_counts(passed, task_ids) == counts


def test_rollouts_by_task_keeps_the_fields_asked_for_in_row_order():
    rows = [
        {"task_id": "a", "sample": 0, "passed": False, "family": "sql"},
        {"task_id": "b", "sample": 0, "passed": True, "family": "sql"},
        {"task_id": "a", "sample": 1, "passed": True, "family": "sql"},
    ]
    assert rollouts_by_task(rows, ("sample", "passed")) == {
        "a": [{"sample": 0, "passed": False}, {"sample": 1, "passed": True}],
        "b": [{"sample": 0, "passed": True}],
    }


SPLIT = pd.DataFrame({"task_id": ["a", "b", "c"], "family": ["sql", "sql", "arithmetic"]}, index=[7, 8, 9])


def test_a_profile_labels_each_task_of_the_split_and_keeps_its_samples():
    # "a" solved 1 of 2, "b" 0 of 2, "c" over the per-family cap (not sampled).
    rows = [
        {"task_id": "a", "sample": 0, "passed": True, "reason": "ok", "completion": "x", "score": 1.0}
        | {"turns": None, "end_reason": None, "family": "sql"},
        {"task_id": "a", "sample": 1, "passed": False, "reason": "no", "completion": "y", "score": 0.0}
        | {"turns": None, "end_reason": None, "family": "sql"},
        {"task_id": "b", "sample": 0, "passed": False, "reason": "no", "completion": "z", "score": 0.0}
        | {"turns": None, "end_reason": None, "family": "sql"},
        {"task_id": "b", "sample": 1, "passed": False, "reason": "no", "completion": "z", "score": 0.0}
        | {"turns": None, "end_reason": None, "family": "sql"},
    ]
    sampled = SampledVerdicts(
        passed={"a": [True, False], "b": [False, False]}, families={"a": "sql", "b": "sql"}, rows=rows
    )
    profile = profile_table(SPLIT, sampled, 2, policy="sft/final", grpo_unprofiled=False)
    assert profile.index.tolist() == [0, 1, 2]  # the split's order, whatever its index
    assert profile[["task_id", "solved", "samples", "label", "in_grpo_set"]].values.tolist() == [
        ["a", 1, 2, "learnable", True],
        ["b", 0, 2, "never_solved", False],
        ["c", None, 0, "not_profiled", False],  # grpo_unprofiled=False keeps GRPO to learnable tasks
    ]
    assert set(profile["policy"]) == {"sft/final"}
    # The scored samples, their ROLLOUT_FIELDS only; none for a task that was not sampled.
    assert profile.loc[0, "rollouts"] == [{name: row[name] for name in ROLLOUT_FIELDS} for row in rows[:2]]
    assert profile.loc[2, "rollouts"] is None
    assert solved_histogram(profile["solved"], 2) == {"0": 1, "1": 1, "2": 0}
    assert labels_by_family(profile).to_dict(orient="records") == [
        {"family": "arithmetic", "learnable": 0, "never_solved": 0, "not_profiled": 1},
        {"family": "sql", "learnable": 1, "never_solved": 1, "not_profiled": 0},
    ]
    # GRPO trains on the learnable task alone, in split order.
    assert grpo_set(SPLIT, profile)["task_id"].tolist() == ["a"]


def test_a_split_not_profiled_goes_to_grpo_whole():
    profile = not_profiled(SPLIT)
    assert profile.columns.tolist() == [
        *("task_id", "family", "solved", "samples", "label", "in_grpo_set", "policy", "rollouts")
    ]
    assert set(profile["label"]) == {"not_profiled"} and (profile["samples"] == 0).all()
    assert profile["solved"].isna().all() and profile["rollouts"].isna().all()
    assert grpo_set(SPLIT, profile)["task_id"].tolist() == ["a", "b", "c"]


def test_an_empty_grpo_set_is_explained_by_the_labels_of_the_split():
    profile = SPLIT.assign(label=["always_solved", "never_solved", "never_solved"], in_grpo_set=False)
    assert grpo_set(SPLIT, profile).empty
    # Counted over the split's tasks alone: a profile row of another split does not explain this one.
    stale = pd.concat([profile, pd.DataFrame([{"task_id": "z", "label": "learnable", "in_grpo_set": True}])])
    assert empty_grpo_set_reason(SPLIT, stale) == (
        "no training task is in the GRPO set: difficulty_profile kept none of 3 (always_solved: 1, never_solved: 2)"
    )
    assert empty_grpo_set_reason(SPLIT, stale.iloc[3:]).endswith("kept none of 3 (none profiled)")


PLAYED_WITH = "max_new_tokens=4, temperature=0.7, max_turns=4"


@pytest.mark.parametrize(
    ("models", "sampling", "failure"),
    [
        # Played by this policy, as this profile samples: nothing to refuse.
        (["sft/now", "sft/now"], [PLAYED_WITH, PLAYED_WITH], None),
        # Another policy played some of them (an episodes table older than the sft_checkpoint).
        (["sft/now", "sft/old"], [PLAYED_WITH, PLAYED_WITH], "episodes were played by ['sft/old'], not by"),
        # Played at another temperature: another pass rate.
        (["sft/now"], [PLAYED_WITH.replace("0.7", "1.0")], "played with max_new_tokens=4, temperature=1.0"),
        # A table from before the sampling was recorded says nothing about it.
        (["sft/now"], None, "played with not recorded, not with this profile's"),
    ],
)
def test_episodes_played_by_another_policy_or_otherwise_are_refused(models, sampling, failure):
    episodes = pd.DataFrame({"model": models} | ({} if sampling is None else {"sampling": sampling}))
    if failure is None:
        check_played_episodes(episodes, policy="sft/now", sampling=PLAYED_WITH)
        return
    with pytest.raises(ValueError, match=re.escape(failure)) as raised:
        check_played_episodes(episodes, policy="sft/now", sampling=PLAYED_WITH)
    assert "materialize episodes again" in str(raised.value)


def test_episodes_of_another_k_are_refused_with_the_fix():
    task = {"task_id": "e", "family": "episode", "prompt": "?", "verifier": {"name": "episode", "params": {}}}
    played = pd.DataFrame([{"task_id": "e", "sample": 0, "passed": True}])  # one episode, the profile counts 2
    with pytest.raises(ValueError, match=r"samples \[0\], not samples 0..1 \(k=2\);.*materialize episodes again"):
        score_profiled(
            "no-model", [task], played, k=2, max_new_tokens=4, temperature=1.0, batch_size=2, context=VerifyContext()
        )
