"""Validation in shards (`core.shards`: a task's shard is fixed by the hash of its id): the checks split into steps
that run side by side, and their verdicts merge back in input order.

- **Lossless**: `merge_verdicts` puts every task's problems back at its input position and refuses a merge where
  a position is missing, repeated, or holds another task than the one checked (the inputs changed under the run).
- **One table**: `merge_validation` turns the verdicts into what `validated_tasks` writes: the seeds and the valid
  tasks (each task once), a reject row for each other, and the validity rates.

The verdict cache (`core.cache_store.CacheStore`) is shared by the shards: each commit adds a segment of its
own, so steps in separate processes (or working copies of an object-store folder) never lose entries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypedDict

import pandas as pd

from core import SeedwheelError
from core.shards import ShardConfigError, shard_count
from core.tables import frame_from_records
from curation.validity import split_checked, task_generator, validity_rates
from validators.records import TaskReject
from validators.tasks import TASK_FIELDS, Problem


class ShardMergeError(SeedwheelError, ValueError):
    """Shard verdicts that do not cover the checked tasks exactly once each."""


@dataclass(frozen=True)
class ShardConfig:
    """How validation splits into steps (the pipeline's `CurationPolicy.validation_shards` / `validation_threads`).

    Args:
        shards: steps the checks split into, at least 1; each step checks the tasks of one hash range.
        threads: threads per step (`validators.tasks.check_tasks`' workers); None: one per CPU of the machine the
            step runs on. Set 1 for one-core workers (a Kubernetes pod with `cpu: 1`).

    Example:
        >>> ShardConfig(shards=8, threads=1)
        ShardConfig(shards=8, threads=1)
    """

    shards: int = 1
    threads: int | None = None

    def __post_init__(self) -> None:
        shard_count(self.shards, "validation_shards")
        if self.threads is not None and (
            isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1
        ):
            raise ShardConfigError(
                f"validation_threads must be a whole number of at least 1 or None, got {self.threads!r}; set it "
                "on the policy resource: 1 for one-core workers, None for one per CPU"
            )


class ShardVerdict(TypedDict):
    """One task's outcome in a shard: where it sits in the input, which task it was, what is wrong with it."""

    position: int
    task_id: str | None
    problems: list[dict[str, str]]  # `Problem`s as dicts (a row of a table that crosses processes)


class ShardStats(TypedDict):
    """What one shard step did: its tasks, the verdicts its cache held, and the seconds its checks took."""

    shard: int
    tasks: int
    cache_hits: int
    cache_rebuilt: bool
    seconds: float


# The columns of the tables these records travel in between steps (Parquet, through the IO manager).
SHARD_VERDICT_COLUMNS: tuple[str, ...] = tuple(ShardVerdict.__annotations__)
SHARD_STATS_COLUMNS: tuple[str, ...] = tuple(ShardStats.__annotations__)


def shard_verdicts(
    positions: Sequence[int], tasks: Sequence[Mapping[str, Any]], problems: Sequence[Sequence[Problem]]
) -> list[ShardVerdict]:
    """The verdict rows of a checked shard: each task's input position, id and problems.

    Args:
        positions: the tasks' input positions (`plan_shards`).
        tasks: the shard's task records, in the same order.
        problems: `check_tasks(tasks, ...)`.

    Returns:
        One `ShardVerdict` per task, for `merge_verdicts`.
    """
    return [
        {"position": position, "task_id": task.get("task_id"), "problems": [asdict(p) for p in found]}
        for position, task, found in zip(positions, tasks, problems, strict=True)
    ]


def merge_verdicts(task_ids: Sequence[str | None], verdicts: Iterable[ShardVerdict]) -> list[list[Problem]]:
    """The problems of every task in input order, from the verdicts of all shards (in any order).

    Args:
        task_ids: the checked tasks' ids, in input order (as `plan_shards` saw them).
        verdicts: every shard's `shard_verdicts`.

    Returns:
        One list of problems per task, as `check_tasks` on all of them at once returns them.

    Raises:
        ShardMergeError: a position is out of range, given twice, or missing, or holds another task id than the
            input's there (the input tables changed while the shards ran: run again).

    Example:
        >>> bad = {"code": "reference_failed", "pointer": "/reference", "message": "fails", "fix": "fix it"}
        >>> merged = merge_verdicts(
        ...     ["a", "b"],
        ...     [{"position": 1, "task_id": "b", "problems": [bad]}, {"position": 0, "task_id": "a", "problems": []}],
        ... )
        >>> [[p.code for p in found] for found in merged]
        [[], ['reference_failed']]
    """
    merged: list[list[Problem] | None] = [None] * len(task_ids)
    for verdict in verdicts:
        position = verdict["position"]
        if not 0 <= position < len(task_ids):
            raise ShardMergeError(f"a shard verdict is for position {position}, but {len(task_ids)} tasks were split")
        if merged[position] is not None:
            raise ShardMergeError(f"two shard verdicts for position {position} (task {verdict['task_id']})")
        if verdict["task_id"] != task_ids[position]:
            raise ShardMergeError(
                f"position {position} holds task {task_ids[position]} but its shard checked {verdict['task_id']}: "
                "the input tables changed while the shards ran; run validation again"
            )
        merged[position] = [Problem(**problem) for problem in verdict["problems"]]
    missing = [position for position, found in enumerate(merged) if found is None]
    if missing:
        raise ShardMergeError(f"no shard verdict for {len(missing)} task(s), e.g. position {missing[0]}")
    return [found for found in merged if found is not None]


@dataclass(frozen=True)
class Validation:
    """The validation shards' verdicts merged: the rows of `validated_tasks` and `task_rejects`, and their rates.

    Attributes:
        tasks: the seeds, then the checked tasks without problems (`TASK_FIELDS` columns), each task id once.
        rejects: a reject row for each checked task with a problem, in input order.
        repeated: the ids that reached validation again after their first row (kept once, the first).
        checked: how many tasks the shards checked (failure tasks and variants; seeds were checked on loading).
        valid: how many of them had no problem.
        by_family: (valid, checked) per family of the checked tasks, sorted by family.
        by_generator: (valid, checked) per generator (`task_generator`), sorted by generator.
    """

    tasks: pd.DataFrame
    rejects: list[TaskReject]
    repeated: list[str]
    checked: int
    valid: int
    by_family: dict[str, tuple[int, int]]
    by_generator: dict[str, tuple[int, int]]

    @property
    def validity_rate(self) -> float:
        """Valid over checked; 1.0 when nothing was checked."""
        return self.valid / self.checked if self.checked else 1.0


def merge_validation(
    seeds: pd.DataFrame, checked: Sequence[Mapping[str, Any]], verdicts: Iterable[ShardVerdict]
) -> Validation:
    """What `validated_tasks` makes of every shard's verdicts: the tables one step checking everything would make.

    Args:
        seeds: the seed tasks (`TASK_FIELDS` columns at least), valid already.
        checked: the records the shards checked, in input order (failure tasks, then variants).
        verdicts: every shard's `shard_verdicts`, shards in any order.

    Returns:
        The merged `Validation`.

    Raises:
        ShardMergeError: the verdicts do not cover the checked tasks exactly once each (`merge_verdicts`).
    """
    problems = merge_verdicts([task.get("task_id") for task in checked], verdicts)
    good, rejects = split_checked(checked, problems)
    tasks = pd.concat([seeds[list(TASK_FIELDS)], frame_from_records(good, TASK_FIELDS)], ignore_index=True)
    # The same task reached twice (a production failure asking a seed's exact question, a variant equal to a failure
    # task) is one task: the first kept, seeds before failure tasks before variants, so keys stay unique downstream.
    repeated = tasks["task_id"].duplicated()
    rejected = frame_from_records(rejects, ("family", "generator"))
    return Validation(
        tasks=tasks[~repeated].reset_index(drop=True),
        rejects=rejects,
        repeated=tasks.loc[repeated, "task_id"].tolist(),
        checked=len(checked),
        valid=len(good),
        by_family=validity_rates(pd.Series([task["family"] for task in checked]), rejected["family"]),
        by_generator=validity_rates(pd.Series([task_generator(task) for task in checked]), rejected["generator"]),
    )
