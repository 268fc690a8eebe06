"""Offline dynamic sampling: a label per training task from the starting policy's passes, and which go to GRPO.

GRPO learns from the spread of rewards within a group of completions: a task the policy always solves, or never
does, gives every completion the same reward and so no gradient. `difficulty_profile` samples k completions per
task; `difficulty_label` names what they show, and `in_grpo_set` says whether the task is trained on.

| label | meaning | in the GRPO set |
| --- | --- | --- |
| `learnable` | solved by some of the k samples, not all | yes |
| `never_solved` | solved by none | no |
| `always_solved` | solved by all | no |
| `not_profiled` | not sampled (over the per-family cap, or profiling off) | unless `grpo_unprofiled` is False |
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

DifficultyLabel = Literal["learnable", "never_solved", "always_solved", "not_profiled"]
DIFFICULTY_LABELS: tuple[DifficultyLabel, ...] = ("learnable", "never_solved", "always_solved", "not_profiled")


def solved_counts(passed: Mapping[str, Sequence[bool]], task_ids: Iterable[str]) -> list[int | None]:
    """How many samples of each task passed, in `task_ids` order; None for a task that was not sampled.

    Example:
        >>> solved_counts({"a": [True, False, True]}, ["a", "b"])
        [2, None]
    """
    return [sum(passed[task_id]) if task_id in passed else None for task_id in task_ids]


def difficulty_label(solved: int | None, k: int) -> DifficultyLabel:
    """What `solved` passes out of `k` samples say about a task's GRPO signal.

    Args:
        solved: samples that passed, or None when the task was not sampled.
        k: samples drawn per task.

    Returns:
        `not_profiled`, `never_solved` (0 of k), `always_solved` (k of k) or `learnable`.

    Example:
        >>> [difficulty_label(n, 4) for n in (None, 0, 2, 4)]
        ['not_profiled', 'never_solved', 'learnable', 'always_solved']
    """
    if solved is None:
        return "not_profiled"
    if solved == 0:
        return "never_solved"
    if solved == k:
        return "always_solved"
    return "learnable"


def in_grpo_set(label: str, *, grpo_unprofiled: bool) -> bool:
    """Whether GRPO trains on a task with this label.

    Only a profiled task that is always or never solved is known to carry no signal; a task left out of the
    profile (over the per-family cap) stays in unless the policy keeps GRPO to learnable tasks
    (`grpo_unprofiled=False`).

    Example:
        >>> in_grpo_set("learnable", grpo_unprofiled=False), in_grpo_set("not_profiled", grpo_unprofiled=False)
        (True, False)
    """
    return label == "learnable" or (label == "not_profiled" and grpo_unprofiled)


def rollouts_by_task(rows: Iterable[Mapping[str, Any]], fields: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """The scored samples of each task (`fields` of each row), in row order: what `preference_pairs` pairs.

    Example:
        >>> rollouts_by_task([{"task_id": "a", "sample": 0, "passed": True, "extra": 1}], ["sample", "passed"])
        {'a': [{'sample': 0, 'passed': True}]}
    """
    rollouts: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        rollouts.setdefault(row["task_id"], []).append({name: row[name] for name in fields})
    return rollouts
