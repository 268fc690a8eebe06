"""Validation in shards (`core.shards`: a task's shard is fixed by the hash of its id): the checks split into steps
that run side by side, and their verdicts merge back in input order.

- **Lossless**: `merge_verdicts` puts every task's problems back at its input position and refuses a merge where
  a position is missing, repeated, or holds another task than the one checked (the inputs changed under the run).

The verdict cache (`validators.cache_store.CacheStore`) is shared by the shards: each commit adds a segment of its
own, so steps in separate processes (or working copies of an object-store folder) never lose entries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypedDict

from core import SeedwheelError
from core.shards import ShardConfigError, shard_count
from validators.tasks import Problem


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
