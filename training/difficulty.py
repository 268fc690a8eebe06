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

`profile_table` is the asset's table: one row per training task with its count, label, GRPO membership and
scored samples (`ROLLOUT_FIELDS`, for `preference_pairs`); `grpo_set` is the part of the split GRPO trains on
(when it is empty, `grpo_checkpoint` passes the starting policy on untrained, `empty_grpo_set_reason` says why).
Episode tasks are scored from the `episodes` table (`check_played_episodes`, `score_profiled`).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import pandas as pd

from core.tables import records_from_frame
from training.episodes import PlayedEpisodesError, play_and_score
from training.evaluation import SampledVerdicts
from validators.registry import VerifyContext

DifficultyLabel = Literal["learnable", "never_solved", "always_solved", "not_profiled"]
DIFFICULTY_LABELS: tuple[DifficultyLabel, ...] = ("learnable", "never_solved", "always_solved", "not_profiled")
# What a profile keeps of each scored sample (its `rollouts` column); an episode's messages and end, for
# preference_pairs (None for a single-turn sample).
ROLLOUT_FIELDS = ("sample", "completion", "passed", "score", "reason", "turns", "end_reason")


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


def not_profiled(tasks: pd.DataFrame) -> pd.DataFrame:
    """The profile of a split that is not profiled: every task `not_profiled`, in the GRPO set, nothing sampled.

    Args:
        tasks: the training split (`task_id`, `family`).

    Returns:
        One row per task, in split order, with `profile_table`'s columns.
    """
    ids = tasks[["task_id", "family"]].reset_index(drop=True)
    return ids.assign(solved=None, samples=0, label="not_profiled", in_grpo_set=True, policy=None, rollouts=None)


def check_played_episodes(episodes: pd.DataFrame, *, policy: str, sampling: str) -> None:
    """Refuse an `episodes` table that another policy played, or that was played with other sampling settings.

    Episode tasks are scored by the episodes the `episodes` asset played: the same policy, k and selection. A table
    from another policy fails here rather than being played again: `episodes` is upstream in every run that
    materializes both, so a mismatch means it is stale (a new sft_checkpoint without it), and playing here would
    repeat the slowest sampling and leave two sets of rollouts for one policy. And as the profile samples: a table
    played with another length, temperature or turn cap measures another pass rate; a table from before its
    `sampling` column was written says nothing, so it is played again too. The k and the tasks are checked by
    `training.episodes.play_and_score`.

    Args:
        episodes: the `episodes` table (`model`, and `sampling` when it was written).
        policy: the starting policy the profile profiles, named as `sft_checkpoint` names it.
        sampling: how the profile samples (`TrainingPolicy.episode_sampling`).

    Raises:
        ValueError: the table was played by another model or with other settings; the message says to
            materialize `episodes` again.
    """
    strangers = sorted(set(episodes["model"]) - {policy})
    if strangers:
        raise ValueError(
            f"episodes were played by {strangers[:2]}, not by the starting policy {policy} that "
            "difficulty_profile profiles: materialize episodes again with this sft_checkpoint (select both, e.g. "
            "`key:episodes or key:difficulty_profile`)"
        )
    recorded = episodes["sampling"] if "sampling" in episodes else pd.Series(None, index=episodes.index, dtype=object)
    played_with = set(recorded.fillna("not recorded").astype(str))
    if played_with - {sampling}:
        raise ValueError(
            f"episodes were played with {sorted(played_with - {sampling})[0]}, not with this profile's {sampling}: "
            "materialize episodes again with these settings (select both, e.g. `key:episodes or "
            "key:difficulty_profile`)"
        )


def score_profiled(
    model_dir: str | os.PathLike[str],
    tasks: Sequence[Mapping[str, Any]],
    episodes: pd.DataFrame,
    *,
    k: int,
    max_new_tokens: int,
    temperature: float,
    batch_size: int,
    context: VerifyContext,
) -> SampledVerdicts:
    """The starting policy's verdicts on the profiled tasks: k samples of each single-turn task, and the episode
    tasks' k episodes read from the `episodes` table (`training.episodes.play_and_score`).

    Raises:
        ValueError: the table does not hold k episodes of each episode task; the message says to materialize
            `episodes` again.
    """
    try:
        return play_and_score(
            model_dir,
            tasks,
            k=k,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            batch_size=batch_size,
            context=context,
            played=records_from_frame(episodes),
        )
    except PlayedEpisodesError as exc:  # the message says it all, with the fix; no chain to read through
        raise ValueError(
            f"{exc}. The episodes table does not match this profile (another difficulty_k or "
            "difficulty_max_per_family, or another train_tasks): materialize episodes again with it"
        ) from None


def profile_table(
    tasks: pd.DataFrame, sampled: SampledVerdicts, k: int, *, policy: str, grpo_unprofiled: bool
) -> pd.DataFrame:
    """The difficulty profile: each training task's passes out of `k`, its label, whether GRPO trains on it, and
    its scored samples (`ROLLOUT_FIELDS`).

    Args:
        tasks: the training split (`task_id`, `family`); tasks `sampled` lacks are `not_profiled`.
        sampled: the policy's verdicts on the profiled tasks (`score_profiled`).
        k: samples drawn per profiled task.
        policy: the profiled policy, named as `sft_checkpoint` names it.
        grpo_unprofiled: whether tasks left out of the profile join the GRPO set (`in_grpo_set`).

    Returns:
        One row per task, in split order: `task_id`, `family`, `solved` (None when not sampled), `samples`,
        `label`, `in_grpo_set`, `policy` and `rollouts` (the task's scored samples, or None).
    """
    ids = tasks[["task_id", "family"]].reset_index(drop=True)
    solved = solved_counts(sampled.passed, ids["task_id"])
    labels = [difficulty_label(n, k) for n in solved]
    rollouts = rollouts_by_task(sampled.rows, ROLLOUT_FIELDS)
    return ids.assign(
        solved=pd.Series(solved, dtype=object),
        samples=[0 if n is None else k for n in solved],
        label=labels,
        in_grpo_set=[in_grpo_set(label, grpo_unprofiled=grpo_unprofiled) for label in labels],
        policy=policy,
        rollouts=pd.Series([rollouts.get(task_id) for task_id in ids["task_id"]], dtype=object),
    )


def grpo_set(tasks: pd.DataFrame, profile: pd.DataFrame) -> pd.DataFrame:
    """The training tasks GRPO trains on: those the profile keeps (`in_grpo_set`), in split order.

    Example:
        >>> tasks = pd.DataFrame({"task_id": ["a", "b", "c"]})
        >>> profile = pd.DataFrame({"task_id": ["a", "b", "c"], "in_grpo_set": [True, False, True]})
        >>> grpo_set(tasks, profile)["task_id"].tolist()
        ['a', 'c']
    """
    chosen = set(profile.loc[profile["in_grpo_set"].astype(bool), "task_id"])
    return tasks[tasks["task_id"].isin(chosen)].reset_index(drop=True)


def empty_grpo_set_reason(tasks: pd.DataFrame, profile: pd.DataFrame) -> str:
    """Why `grpo_set` is empty: the profile's labels of the training tasks, each with how many had it.

    Example:
        >>> tasks = pd.DataFrame({"task_id": ["a", "b", "c"]})
        >>> profile = tasks.assign(label=["never_solved", "always_solved", "never_solved"])
        >>> empty_grpo_set_reason(tasks, profile)
        'no training task is in the GRPO set: difficulty_profile kept none of 3 (always_solved: 1, never_solved: 2)'
    """
    labels = Counter(profile.loc[profile["task_id"].isin(tasks["task_id"]), "label"])
    counts = ", ".join(f"{label}: {n}" for label, n in sorted(labels.items())) or "none profiled"
    return f"no training task is in the GRPO set: difficulty_profile kept none of {len(tasks)} ({counts})"


def solved_histogram(solved: Iterable[int | None], k: int) -> dict[str, int]:
    """How many profiled tasks solved 0, 1, ... k of their k samples (tasks not sampled are not counted).

    Example:
        >>> solved_histogram([0, 2, 0, None], 2)
        {'0': 2, '1': 0, '2': 1}
    """
    counts = Counter(solved)
    return {str(n): counts.get(n, 0) for n in range(k + 1)}


def labels_by_family(profile: pd.DataFrame) -> pd.DataFrame:
    """Tasks per family (rows, sorted) and label (columns, sorted, only those that occur), from a profile."""
    return pd.crosstab(profile["family"], profile["label"]).reset_index()
