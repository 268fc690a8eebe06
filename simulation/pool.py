"""The traffic pool: requests the stand-in app serves, made from the seeds but never a seed or a split's task.

The pool is the programmatic variants of the seeds under a random seed of its own (`POOL_RANDOM_SEED`, not the
variant plan's), minus every task already known (the seeds, their variants, the splits), and minus what a
traffic log cannot carry (`failures.failure_fields` is None: episodes, multi-answer texts). A fixed share of it,
chosen by task id alone, is held out (`is_held_out`): never served, so it never becomes a failure task and stays
a fair yardstick for comparing two nights' models on the same requests (`bench/flywheel_nights.py`).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from failures import failure_fields
from generators.programmatic import generate_variants

POOL_RANDOM_SEED = 20_261_206  # the pool's own draw of numbers and entities, apart from any variant plan's
HELD_OUT_SHARE = 0.3


def build_pool(
    seeds: Iterable[Mapping[str, Any]], *, per_seed: int, known: Collection[str], random_seed: int = POOL_RANDOM_SEED
) -> list[dict[str, Any]]:
    """Requests for the stand-in app: programmatic variants of `seeds` that are not `known` and can be logged.

    Args:
        seeds: the seed tasks.
        per_seed: variants to make of each seed.
        known: task ids the pool must not hold (seeds, variants, every split).
        random_seed: the pool's generation seed.

    Returns:
        Task records, in seed order, each id once.

    Example:
        >>> seed = {"task_id": "a" * 16, "family": "cooking", "lineage": {"seed_id": "s1"},
        ...         "verifier": {"name": "text_answer", "params": {"answers": ["braise"]}}}
        >>> build_pool([seed], per_seed=2, known=set())  # no generator for the family or its verifier: nothing
        []
    """
    pool: dict[str, dict[str, Any]] = {}
    for task in generate_variants(seeds, per_seed=per_seed, random_seed=random_seed).tasks:
        if task["task_id"] not in known and failure_fields(task) is not None:
            pool.setdefault(task["task_id"], dict(task))
    return list(pool.values())


def is_held_out(task_id: str, share: float = HELD_OUT_SHARE) -> bool:
    """Whether a pool task is held out of the nights' traffic: by a hash of its id alone, so on every machine and
    night the same tasks are held out, whatever any model answers.

    Example:
        >>> is_held_out("a" * 16, share=0.0), is_held_out("a" * 16, share=1.0)
        (False, True)
    """
    digest = int.from_bytes(hashlib.sha256(f"held-out:{task_id}".encode()).digest()[:8], "big")
    return digest / 2**64 < share


def draw(
    pool: Sequence[Mapping[str, Any]], *, night: int, requests: int, exclude: Collection[str]
) -> list[Mapping[str, Any]]:
    """A night's requests: `requests` served pool tasks (not held out, not in `exclude`), drawn for `night`.

    The draw depends on the night's number and the eligible tasks only, so a rerun of a night serves the same
    requests.

    Example:
        >>> pool = [{"task_id": f"{i:016x}"} for i in range(100)]
        >>> first = draw(pool, night=1, requests=5, exclude=set())
        >>> first == draw(pool, night=1, requests=5, exclude=set()), len(first)
        (True, 5)
    """
    eligible = [t for t in pool if not is_held_out(t["task_id"]) and t["task_id"] not in exclude]
    return random.Random(f"night:{night}").sample(eligible, min(requests, len(eligible)))
