"""Difficulty labels of the offline profile, and which labels GRPO trains on."""

import pytest

from training.difficulty import DIFFICULTY_LABELS, difficulty_label, in_grpo_set, rollouts_by_task, solved_counts


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
