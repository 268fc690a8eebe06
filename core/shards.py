"""Work in shards: each record belongs to a fixed shard by the hash of its id, so a stage's per-record work splits
into steps that run side by side (a multiprocess, Celery or Kubernetes executor) and merges back in input order.

- **Stable**: a record's shard is a function of its id and the shard count alone (`shard_of`: the first 32 bits
  of the id's SHA-256 scaled to `[0, shards)`, so each shard holds one range of the hash space), never of the
  batch it arrives in or its place there. The same task lands in the same shard every night, whatever was added
  or removed around it; only a new shard count moves records.
- **Balanced**: SHA-256 spreads ids evenly, so shards differ in size by about their square root.

Validation (`curation.validation_shards`), programmatic generation (`generators.shards`) and judging (its asset)
shard this way; `cache_totals` adds up the steps of the two whose steps share a cache.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.errors import SeedwheelError

HASH_BITS = 32  # the leading bits of SHA-256(id) that pick the shard: ranges of 2**32 / shards ids each


class ShardConfigError(SeedwheelError, ValueError):
    """An impossible shard setting; the message names the setting and the fix."""


def shard_count(value: object, setting: str) -> int:
    """`value` as a shard count, checked: a whole number of at least 1.

    Args:
        value: the configured count.
        setting: the setting's name, for the message (`validation_shards`).

    Raises:
        ShardConfigError: `value` is not a whole number of at least 1 (a bool is not a count).

    Example:
        >>> shard_count(8, "judge_shards")
        8
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ShardConfigError(
            f"{setting} must be a whole number of at least 1, got {value!r}; set it on its resource: 1 does the "
            "work in one step, 8 in eight steps that an executor with several workers runs side by side"
        )
    return value


def shard_of(key: str, shards: int) -> int:
    """The shard of `key` among `shards`: the first 32 bits of its SHA-256, scaled to `[0, shards)`.

    Args:
        key: the record's id (any string: an id that is not a content hash still gets a fixed shard).
        shards: the shard count, at least 1.

    Returns:
        The shard index; the same for the same id and count on every machine and night.

    Raises:
        ShardConfigError: `shards` is below 1.

    Example:
        >>> [shard_of(task_id, 3) for task_id in ("0000000000000002", "5c4f6470173c47e1", "0000000000000000")]
        [0, 1, 2]
        >>> shard_of("5c4f6470173c47e1", 1)
        0
    """
    shard_count(shards, "shards")
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
    return int(digest[: HASH_BITS // 4], 16) * shards >> HASH_BITS


def plan_shards(keys: Sequence[str | None], shards: int) -> list[list[int]]:
    """The input positions of each shard's records, ascending; a record without an id is sharded as the empty id.

    Args:
        keys: the records' ids, in input order.
        shards: the shard count, at least 1.

    Returns:
        One list per shard (index = shard), empty where no record falls in that range.

    Example:
        >>> plan_shards(["5c4f6470173c47e1", "0000000000000000", "0000000000000001", "0000000000000004"], 3)
        [[], [0, 2], [1, 3]]
    """
    shard_count(shards, "shards")
    planned: list[list[int]] = [[] for _ in range(shards)]
    for position, key in enumerate(keys):
        planned[shard_of(key or "", shards)].append(position)
    return planned


@dataclass(frozen=True)
class CacheTotals:
    """What the steps of a sharded stage with a shared cache did together: their stats rows added up.

    Attributes:
        records: the records the steps were given (parents to generate from, tasks to check).
        hits: the records whose output the cache held.
        rebuilt: whether a step found the cache partly unreadable and recomputed that part.
        seconds: the steps' working time added up (the work, not the wall clock: steps run side by side).
    """

    records: int
    hits: int
    rebuilt: bool
    seconds: float

    @property
    def misses(self) -> int:
        """The records worked on now: new, changed, or not cacheable."""
        return self.records - self.hits


def cache_totals(steps: Sequence[Mapping[str, Any]], count: str) -> CacheTotals:
    """The stats rows of a stage's steps added up: `count` (the column of the step's records), `cache_hits`,
    `cache_rebuilt` and `seconds` (rounded to the millisecond).

    Example:
        >>> steps = [{"tasks": 3, "cache_hits": 2, "cache_rebuilt": False, "seconds": 0.5},
        ...          {"tasks": 4, "cache_hits": 0, "cache_rebuilt": True, "seconds": 1.25}]
        >>> totals = cache_totals(steps, "tasks")
        >>> totals, totals.misses
        (CacheTotals(records=7, hits=2, rebuilt=True, seconds=1.75), 5)
    """
    return CacheTotals(
        records=sum(step[count] for step in steps),
        hits=sum(step["cache_hits"] for step in steps),
        rebuilt=any(step["cache_rebuilt"] for step in steps),
        seconds=round(sum((step["seconds"] for step in steps), 0.0), 3),
    )
