"""Programmatic generation in shards (`core.shards`: a parent's shard is fixed by the hash of its id): the steps run
side by side, and their variants and rejects merge back in parent order, followed by the LLM rewrites (a step of
their own), so the tables are byte for byte those one step would have made.

Each parent's output depends on that parent alone (`generators.programmatic.generate_variants`), and a parent is
in exactly one shard, so the order of the shards does not matter: only the parents' order does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

from generators.base import GenerationResult
from validators.records import TaskRecord


class ShardStats(TypedDict):
    """What one programmatic shard step did: its parents, those its cache held, and the seconds it took."""

    shard: int
    parents: int
    cache_hits: int
    cache_rebuilt: bool
    seconds: float


# The columns of the table this record travels in between steps (Parquet, through the IO manager).
SHARD_STATS_COLUMNS: tuple[str, ...] = tuple(ShardStats.__annotations__)


def merge_variants(
    parent_ids: Sequence[str],
    variants: Iterable[TaskRecord],
    rejects: Iterable[dict[str, Any]],
    rewrites: GenerationResult,
) -> GenerationResult:
    """The shards' variants and rejects back in parent order, then the rewrites' (what one step would have made).

    Args:
        parent_ids: the parents' task ids, in input order (seeds, then failure tasks); a parent listed twice
            takes its first position.
        variants: every shard's variants, shards in any order (each lists a parent's variants in their order).
        rejects: every shard's reject rows, likewise.
        rewrites: the LLM rewrites' variants and rejects, already in their order.

    Returns:
        The variants ordered by their `lineage.parent_id`, then the rewrites; the rejects by their `parent_id`,
        then the rewrites' rejects. A parent's rows keep their order (the sort is stable).

    Example:
        >>> def variant(parent_id, n):
        ...     return {"task_id": n, "lineage": {"parent_id": parent_id}}
        >>> merged = merge_variants(["p1", "p2"], [variant("p2", "c"), variant("p1", "a"), variant("p1", "b")], [],
        ...                         GenerationResult(tasks=[variant("p1", "r")]))
        >>> [task["task_id"] for task in merged.tasks]
        ['a', 'b', 'c', 'r']
    """
    # Reversed, so a parent listed twice keeps its first position. Keyed by `str | None` as `lineage.parent_id` is
    # typed (a seed has none); every variant has one.
    order: dict[str | None, int] = {parent_id: i for i, parent_id in reversed(list(enumerate(parent_ids)))}
    tasks = sorted(variants, key=lambda task: order[task["lineage"]["parent_id"]])
    rejected = sorted(rejects, key=lambda reject: order[reject["parent_id"]])
    return GenerationResult(tasks=[*tasks, *rewrites.tasks], rejects=[*rejected, *rewrites.rejects])
