"""Leak-free train/eval splits: every task goes to the side of its seed lineage, decided by a stable hash.

**Lineage roots.** A paraphrase or programmatic variant of an eval item must never be trained on, so splits are
made per lineage, not per task. A task's root is `lineage.seed_id`; a production failure that no seed explains
(`seed_id` null) is rooted at its `lineage.failure_id`. Tasks that share either id are one lineage group (a
union of both kinds of ids), so a failure whose tasks disagree on `seed_id` still lands on one side. A group
is named by its smallest `seed_id` (else its smallest `failure_id`); for ordinary data that is just the seed.

**Bulk rule (stable).** A root goes to eval when `root_hash(root, salt) < eval_fraction`, where `root_hash` is
SHA-256 of the salt and the root id as a number in [0, 1). The side depends on nothing but the root and the
salt, so it never changes as the corpus grows, on any machine; changing the salt reshuffles on purpose. The
hash does not depend on the stratum, so every stratum holds `eval_fraction` of its roots in expectation.

**Guarantee rule (small strata).** A stratum (the root's `stratify_by` values, e.g. family and difficulty) of
`n >= min_eval_per_stratum + min_train_per_stratum` roots where the bulk rule leaves fewer than
`min_eval_per_stratum` eval roots gets its lowest-hashed train roots promoted to eval; one left with fewer than
`min_train_per_stratum` train roots gets its highest-hashed eval roots demoted to train. Only then does a root's
side depend on other roots, and only within its stratum. Adding roots to such a stratum can move an existing
root (eval_fraction 0.2, `min_*_per_stratum` 1, 2,000 strata per row; `move_stats` in the tests):

| stratum before | + new roots | strata where a root moves | of which train -> eval | ranking design |
| --- | --- | --- | --- | --- |
| 1 root | 1 | 35% | 33% (the stratum reaches 2 roots and now needs an eval root) | - |
| 2 roots | 5 | 62% | 4.0% | 72% |
| 5 roots | 5 | 29% | 0 | 44% |
| 10 roots | 5 | 8.1% | 0 | 50% |
| 20 roots | 5 | 0.7% | 0 | 54% |
| 30 roots | 5 | 0.2% | 0 | 55% |

At most one root moves per stratum (in general at most the larger `min_*_per_stratum`). Mostly a promoted root
returns to train (eval -> train) when a newcomer hashes into eval: harmless as long as checkpoints are compared on
the current eval set, which drops it, and no earlier checkpoint trained on it. The harmful direction, train -> eval
(an older checkpoint was trained on what it is now evaluated on), needs either a demoted root (every root of the
stratum hashed into eval: `0.2 ** n`) or a stratum that grows past the guarantee threshold. The ranking design
(each stratum's lowest-hashed `max(1, round(f * n))` roots in eval) is exact per stratum but moves roots at every
size, because its cut-off moves (its column comes from the same experiment). The bundled seed sets (27-33 roots per
family) make the guarantee fire with probability `0.8 ** 27` = 0.2% per family; by family and difficulty, strata of
1-16 roots, it fires often.

**Production failures.** Roots that are production failures no seed explains (their lineage has a `failure_id`
and no `seed_id`) go to eval when their hash is below `failure_eval_fraction` (0.5 by default: failures are few,
and the promotion gate's question "which production failures does the candidate now fix?" needs held-out ones),
and they form one stratum of their own (`source` "failure" in the summary, apart from the seed strata), so the
guarantee rule holds out at least `min_eval_per_stratum` of them, and trains on `min_train_per_stratum`, as soon
as there are enough. A failure traced to a seed is that seed's lineage and follows it.

**Sticky mode.** `plan_splits(..., previous=plan.sides)` keeps every root of an earlier split on its side and
lets the guarantee rule move only new roots: then no root ever moves (a stratum whose guarantee only old roots
could meet stays short and says so in the summary). Recompute without `previous` when changing the salt.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from core import SeedwheelError
from core.tables import records_from_frame

logger = logging.getLogger(__name__)

TRAIN = "train"
EVAL = "eval"
SEED, FAILURE = "seed", "failure"  # a root's source: a curated seed, or a production failure no seed explains
LINEAGE_KINDS = ("seed_id", "failure_id")
# Fields that cannot define a stratum: nested values, or one value per task (every root its own stratum).
UNSTRATIFIABLE = frozenset({"task_id", "prompt", "verifier", "reference", "lineage", "tags"})


class SplitConfigError(SeedwheelError, ValueError):
    """A `SplitConfig` with an impossible value; the message gives the value and a fix."""


class LineageError(SeedwheelError, ValueError):
    """A task without a lineage root (no `seed_id` and no `failure_id`), or with a malformed lineage."""


@dataclass(frozen=True)
class SplitConfig:
    """How tasks are split into train and eval by lineage root.

    Args:
        eval_fraction: share of seed lineage roots held out for evaluation, in (0, 1).
        failure_eval_fraction: share of production-failure roots held out, in (0, 1) (module docstring).
        salt: mixed into the hash; the same salt gives the same split everywhere, a new salt reshuffles.
        stratify_by: task fields whose values form a stratum, read from the root's own record.
        min_eval_per_stratum: eval roots guaranteed in every stratum large enough (see the module docstring).
        min_train_per_stratum: train roots guaranteed likewise.

    Example:
        >>> SplitConfig(eval_fraction=0.2, salt="v1", stratify_by=["family", "difficulty"]).stratify_by
        ('family', 'difficulty')
    """

    eval_fraction: float = 0.2
    failure_eval_fraction: float = 0.5
    salt: str = "seedwheel-split-v1"
    stratify_by: tuple[str, ...] = ("family",)
    min_eval_per_stratum: int = 1
    min_train_per_stratum: int = 1

    def __post_init__(self) -> None:
        for name, example in (("eval_fraction", "the seed lineages"), ("failure_eval_fraction", "the failures")):
            fraction = getattr(self, name)
            if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction < 1:
                raise SplitConfigError(
                    f"{name} must be a number strictly between 0 and 1, got {fraction!r}; "
                    f"e.g. 0.2 holds out a fifth of {example}"
                )
        if not isinstance(self.salt, str) or not self.salt:
            raise SplitConfigError(f"salt must be a non-empty string, got {self.salt!r}; e.g. 'seedwheel-split-v1'")
        if isinstance(self.stratify_by, str):
            raise SplitConfigError(
                f"stratify_by must be a tuple of field names, got the string {self.stratify_by!r}; "
                f"write ({self.stratify_by!r},)"
            )
        fields = tuple(self.stratify_by)
        object.__setattr__(self, "stratify_by", fields)  # a list is accepted but stored as a hashable tuple
        bad = [f for f in fields if not isinstance(f, str) or not f or f in UNSTRATIFIABLE]
        if bad:
            raise SplitConfigError(
                f"stratify_by cannot use {bad!r}: nested or per-task fields make no strata; "
                "use scalar fields such as ('family',) or ('family', 'difficulty')"
            )
        if len(set(fields)) != len(fields):
            raise SplitConfigError(f"stratify_by repeats a field: {fields!r}; list each field once")
        for name in ("min_eval_per_stratum", "min_train_per_stratum"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SplitConfigError(f"{name} must be an integer >= 0, got {value!r}; 1 is the usual choice")


def root_hash(root: str, salt: str) -> float:
    """The root's position in [0, 1): SHA-256 of `salt`, a unit separator and `root`, first 8 bytes.

    Args:
        root: a lineage root id (a seed's task_id or a failure id).
        salt: `SplitConfig.salt`.

    Returns:
        A float in [0, 1), the same on every machine and in every run.

    Example:
        >>> 0 <= root_hash("5c4f6470173c47e1", "v1") < 1
        True
    """
    digest = hashlib.sha256(f"{salt}\x1f{root}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass
class SplitPlan:
    """The outcome of `plan_splits`.

    Attributes:
        splits: `"train"` or `"eval"` per task, in input order.
        roots: the lineage root per task, in input order.
        sides: root -> side.
        guaranteed: root -> `"promoted"` / `"demoted"` for roots placed by the guarantee rule, not the hash.
        summary: one row per stratum: its `source` (seed or failure), its field values (None for the failure
            stratum), `roots`, `train_roots`, `eval_roots`, `train_tasks`, `eval_tasks`, `guaranteed_roots`,
            `previous_roots`; sorted by stratum.
        followed: new root -> the root whose side it took (`follows`).
    """

    splits: list[str]
    roots: list[str]
    sides: dict[str, str]
    guaranteed: dict[str, str] = field(default_factory=dict)
    summary: list[dict[str, Any]] = field(default_factory=list)
    followed: dict[str, str] = field(default_factory=dict)

    def root_count(self, side: str) -> int:
        """How many lineage roots of the tasks planned are on `side`."""
        return len({root for root, split in zip(self.roots, self.splits, strict=True) if split == side})

    def side_tasks(self, tasks: pd.DataFrame) -> dict[str, pd.DataFrame]:
        """The `tasks` of each side, `train` then `eval`, in input order and numbered from 0.

        Args:
            tasks: the tasks this plan split, in its order (one row per entry of `splits`).
        """
        sides = pd.Series(self.splits, index=tasks.index)
        return {name: tasks[sides == name].reset_index(drop=True) for name in (TRAIN, EVAL)}


def _as_records(tasks: pd.DataFrame | Iterable[Mapping[str, Any]]) -> Sequence[Mapping[str, Any]]:
    return records_from_frame(tasks) if isinstance(tasks, pd.DataFrame) else list(tasks)


def lineage_ids(task: Mapping[str, Any], row: int | None = None) -> dict[str, str]:
    """The non-null lineage ids of a task: `{"seed_id": ..., "failure_id": ...}` (either may be absent).

    Args:
        task: a task record with a `lineage` mapping.
        row: its position, only for the error message.

    Returns:
        The ids present, by kind.

    Raises:
        LineageError: `lineage` is not a mapping (e.g. JSON text read without `read_table`).

    Example:
        >>> lineage_ids({"lineage": {"seed_id": "a1", "failure_id": None}})
        {'seed_id': 'a1'}
    """
    lineage = task.get("lineage")
    if not isinstance(lineage, Mapping):
        where = f"task {task.get('task_id', '?')}" + ("" if row is None else f" (row {row})")
        raise LineageError(
            f"{where} has lineage {type(lineage).__name__} {str(lineage)[:60]!r}, not a mapping",
            hint="read tables with core.tables.read_table, which decodes nested columns",
        )
    return {kind: str(lineage[kind]) for kind in LINEAGE_KINDS if lineage.get(kind) is not None}


class _Groups:
    """Union-find over lineage ids, so tasks linked through a seed_id or a failure_id stay together."""

    def __init__(self) -> None:
        self.parent: dict[tuple[str, str], tuple[str, str]] = {}

    def find(self, node: tuple[str, str]) -> tuple[str, str]:
        self.parent.setdefault(node, node)
        while self.parent[node] != node:
            self.parent[node] = self.parent[self.parent[node]]  # path halving keeps chains short
            node = self.parent[node]
        return node

    def union(self, a: tuple[str, str], b: tuple[str, str]) -> None:
        self.parent[self.find(a)] = self.find(b)


def task_roots(tasks: pd.DataFrame | Iterable[Mapping[str, Any]]) -> list[str]:
    """The lineage root of each task: its group's smallest `seed_id`, else its smallest `failure_id`.

    Args:
        tasks: task records (or a DataFrame of them, nested columns decoded).

    Returns:
        One root id per task, in input order.

    Raises:
        LineageError: a task has neither a `seed_id` nor a `failure_id`; the message names it.

    Example:
        >>> task_roots([{"lineage": {"seed_id": None, "failure_id": "f9"}}])
        ['f9']
    """
    records = _as_records(tasks)
    groups = _Groups()
    per_task: list[dict[str, str]] = []
    for row, task in enumerate(records):
        ids = lineage_ids(task, row)
        if not ids:
            raise LineageError(
                f"task {task.get('task_id', '?')} (row {row}) has neither lineage.seed_id nor lineage.failure_id, "
                "so it cannot be kept on its lineage's side",
                hint="set seed_id to its seed's task_id (its own for a seed) or failure_id to the production failure "
                "it came from",
            )
        nodes = list(ids.items())
        groups.find(nodes[0])  # registers a lone id as its own group
        for node in nodes[1:]:
            groups.union(nodes[0], node)
        per_task.append(ids)
    # Seeds name a group before failures: a failure traced to a seed is that seed's lineage.
    names: dict[tuple[str, str], tuple[int, str]] = {}
    for node in list(groups.parent):
        rank = (LINEAGE_KINDS.index(node[0]), node[1])
        top = groups.find(node)
        names[top] = min(names.get(top, rank), rank)
    return [names[groups.find(next(iter(ids.items())))][1] for ids in per_task]


def _stratum_of(root: str, members: list[Mapping[str, Any]], fields: Sequence[str]) -> tuple[Any, ...]:
    # The root's own record (a seed) is stable as variants come and go; without one, the smallest task_id.
    own = [t for t in members if t.get("task_id") == root]
    anchor = own[0] if own else min(members, key=lambda t: str(t.get("task_id")))
    values = []
    for name in fields:
        value = anchor.get(name)
        if isinstance(value, float) and value != value:  # NaN from a DataFrame column means missing
            value = None
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # pandas turns an int column with gaps into floats
        values.append(value)
    return tuple(values)


def failure_roots(roots: Sequence[str], tasks: Sequence[Mapping[str, Any]]) -> set[str]:
    """The roots (`task_roots(tasks)`) that are production failures: seeds name a group first, so a root is a
    failure exactly when none of its tasks has a seed_id.

    Example:
        >>> tasks = [{"lineage": {"seed_id": "s"}}, {"lineage": {"failure_id": "f"}}]
        >>> failure_roots(task_roots(tasks), tasks)
        {'f'}
    """
    seeded = {root for root, task in zip(roots, tasks, strict=True) if "seed_id" in lineage_ids(task)}
    return set(roots) - seeded


def plan_splits(
    tasks: pd.DataFrame | Iterable[Mapping[str, Any]],
    config: SplitConfig,
    previous: Mapping[str, str] | None = None,
    follows: Mapping[str, str] | None = None,
) -> SplitPlan:
    """Assign every task to train or eval by its lineage root, stratified, with per-stratum counts.

    Args:
        tasks: task records (or a DataFrame of them, nested columns decoded).
        config: the split settings.
        previous: root -> side from an earlier split (`SplitPlan.sides`). Those roots keep their side and the
            guarantee rule only moves roots not in it, so no root ever changes side; leave it out to recompute
            from the hash alone (and after changing the salt).
        follows: new root -> the root whose side it takes (`curation.curate.near_copy_roots`: a production failure
            that is a near-copy of another root's task), before the guarantee rule, which never moves it. A root
            in `previous` keeps its own side; one whose leader is in neither `previous` nor `tasks` is hashed.

    Returns:
        A `SplitPlan` (sides per task and per root, which roots the guarantee rule placed, counts per stratum).

    Raises:
        LineageError: a task without a lineage root.

    Example:
        >>> tasks = [{"task_id": "a", "family": "sql", "lineage": {"seed_id": "a"}}]
        >>> plan_splits(tasks, SplitConfig()).summary[0]["roots"]
        1
    """
    records = _as_records(tasks)
    roots = task_roots(records)
    members: dict[str, list[Mapping[str, Any]]] = {}
    for root, task in zip(roots, records, strict=True):
        members.setdefault(root, []).append(task)
    failures = failure_roots(roots, records)
    strata: dict[tuple[Any, ...], list[str]] = {}
    for root, group in members.items():
        stratum = (FAILURE,) if root in failures else (SEED, *_stratum_of(root, group, config.stratify_by))
        strata.setdefault(stratum, []).append(root)

    previous = dict(previous or {})
    odd = {root: side for root, side in previous.items() if side not in (TRAIN, EVAL)}
    if odd:
        raise SplitConfigError(
            f"previous sides must be '{TRAIN}' or '{EVAL}'; got {len(odd)} others, e.g. {next(iter(odd.items()))}; "
            "pass SplitPlan.sides from an earlier run"
        )
    hashes = {root: root_hash(root, config.salt) for root in members}
    fractions = {SEED: config.eval_fraction, FAILURE: config.failure_eval_fraction}
    sides = {
        root: EVAL if hashes[root] < fractions[FAILURE if root in failures else SEED] else TRAIN for root in members
    }
    sides.update({root: side for root, side in previous.items() if root in sides})
    followed = {
        root: leader
        for root, leader in (follows or {}).items()
        if root in sides and root not in previous and leader in {**sides, **previous}
    }
    sides.update({root: previous.get(leader, sides.get(leader, TRAIN)) for root, leader in followed.items()})
    fixed = {**previous, **followed}  # roots the guarantee rule may not move
    guaranteed: dict[str, str] = {}
    for stratum_roots in strata.values():
        if len(stratum_roots) < config.min_eval_per_stratum + config.min_train_per_stratum:
            continue  # too small to hold both minimums: the hash alone decides
        by_hash = sorted(stratum_roots, key=lambda r: (hashes[r], r))
        evals = [r for r in by_hash if sides[r] == EVAL]
        trains = [r for r in by_hash if sides[r] == TRAIN]
        movable_trains = [r for r in trains if r not in fixed]
        for root in movable_trains[: max(0, config.min_eval_per_stratum - len(evals))]:
            sides[root], guaranteed[root] = EVAL, "promoted"
        missing_train = max(0, config.min_train_per_stratum - len(trains))
        movable_evals = [r for r in evals if r not in fixed]
        for root in movable_evals[max(0, len(movable_evals) - missing_train) :] if missing_train else []:
            sides[root], guaranteed[root] = TRAIN, "demoted"
    if guaranteed:
        logger.info("split guarantee rule placed %d of %d roots: %s", len(guaranteed), len(members), guaranteed)

    splits = [sides[root] for root in roots]
    summary = []
    for stratum, stratum_roots in sorted(strata.items(), key=lambda item: repr(item[0])):
        train_roots = [r for r in stratum_roots if sides[r] == TRAIN]
        eval_roots = [r for r in stratum_roots if sides[r] == EVAL]
        source, values = stratum[0], stratum[1:] or (None,) * len(config.stratify_by)
        summary.append(
            {
                "source": source,
                **dict(zip(config.stratify_by, values, strict=True)),
                "roots": len(stratum_roots),
                "train_roots": len(train_roots),
                "eval_roots": len(eval_roots),
                "train_tasks": sum(len(members[r]) for r in train_roots),
                "eval_tasks": sum(len(members[r]) for r in eval_roots),
                "guaranteed_roots": sum(r in guaranteed for r in stratum_roots),
                "previous_roots": sum(r in previous for r in stratum_roots),
            }
        )
    return SplitPlan(
        splits=splits, roots=roots, sides=sides, guaranteed=guaranteed, summary=summary, followed=followed
    )


def assign_splits(
    tasks: pd.DataFrame | Iterable[Mapping[str, Any]],
    config: SplitConfig,
    previous: Mapping[str, str] | None = None,
) -> list[str]:
    """`"train"` or `"eval"` for each task, by lineage root (see `plan_splits` for the counts per stratum).

    Args:
        tasks: task records (or a DataFrame of them, nested columns decoded).
        config: the split settings.
        previous: root -> side from an earlier split, kept as it was (see `plan_splits`).

    Returns:
        One side per task, in input order; every task of a lineage gets its root's side.

    Example:
        >>> seed = {"task_id": "a", "family": "sql", "lineage": {"seed_id": "a"}}
        >>> variant = {"task_id": "b", "family": "sql", "lineage": {"seed_id": "a"}}
        >>> len(set(assign_splits([seed, variant], SplitConfig())))
        1
    """
    return plan_splits(tasks, config, previous).splits


def lineage_leaks(
    train_tasks: pd.DataFrame | Iterable[Mapping[str, Any]], eval_tasks: pd.DataFrame | Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Train tasks that share a lineage id (`seed_id` or `failure_id`) with any eval task.

    The lineage half of the decontamination check; near-duplicates without shared lineage are found by MinHash.

    Args:
        train_tasks: the train split's task records.
        eval_tasks: the eval split's task records.

    Returns:
        One row per train task and shared id: `train_task_id`, `eval_task_id` (the smallest one sharing it),
        `shared_root`, `root_kind` (`seed_id` / `failure_id`), `eval_tasks_sharing`. Empty when clean.

    Example:
        >>> train = [{"task_id": "v1", "lineage": {"seed_id": "s1"}}]
        >>> eval_ = [{"task_id": "s1", "lineage": {"seed_id": "s1"}}]
        >>> lineage_leaks(train, eval_)[0]["shared_root"]
        's1'
    """
    eval_index: dict[tuple[str, str], list[str]] = {}
    for row, task in enumerate(_as_records(eval_tasks)):
        for kind, value in lineage_ids(task, row).items():
            eval_index.setdefault((kind, value), []).append(str(task.get("task_id")))
    leaks = []
    for row, task in enumerate(_as_records(train_tasks)):
        for kind, value in lineage_ids(task, row).items():
            sharing = eval_index.get((kind, value))
            if sharing:
                leaks.append(
                    {
                        "train_task_id": task.get("task_id"),
                        "eval_task_id": min(sharing),
                        "shared_root": value,
                        "root_kind": kind,
                        "eval_tasks_sharing": len(sharing),
                    }
                )
    return leaks


def failure_tasks(tasks: pd.DataFrame) -> pd.DataFrame:
    """The tasks that come from production failures (their lineage has a `failure_id`), in order, numbered from 0.

    Example:
        >>> tasks = pd.DataFrame({"task_id": ["s", "f"], "lineage": [{"seed_id": "s"}, {"failure_id": "f1"}]})
        >>> failure_tasks(tasks)["task_id"].tolist()
        ['f']
    """
    # A boolean Series, not a list: an empty list would select no columns instead of no rows.
    chosen = [bool((lineage or {}).get("failure_id")) for lineage in tasks["lineage"]]
    return tasks[pd.Series(chosen, index=tasks.index, dtype=bool)].reset_index(drop=True)


def failure_count(failures: pd.DataFrame) -> int:
    """How many production failures `failure_tasks`' rows come from (a failure's variants share its id)."""
    return len({lineage["failure_id"] for lineage in failures["lineage"]})


def hash_sample(tasks: Sequence[Mapping[str, Any]], limit: int | None, salt: str) -> list[int]:
    """Indexes of a uniform sample of `limit` tasks: those whose task_id hashes lowest under `salt`, in order.

    Nothing about a model enters the choice, so an evaluation on it is an unbiased estimate over `tasks`; the same
    tasks come back on every machine and run, and a task added later displaces one only if it hashes lower.

    Example:
        >>> tasks = [{"task_id": str(i)} for i in range(10)]
        >>> hash_sample(tasks, 3, "gate")
        [0, 8, 9]
        >>> [tasks[::-1][i]["task_id"] for i in hash_sample(tasks[::-1], 3, "gate")]  # the same tasks, any order
        ['9', '8', '0']
        >>> hash_sample(tasks, None, "gate") == list(range(10))
        True
    """
    if limit is None:
        return list(range(len(tasks)))
    ranked = sorted(range(len(tasks)), key=lambda i: (root_hash(tasks[i]["task_id"], salt), tasks[i]["task_id"]))
    return sorted(ranked[:limit])


def first_per_family(tasks: Sequence[Mapping[str, Any]], limit: int | None) -> list[int]:
    """Indexes of a stable per-family sample: all tasks, or the `limit` easiest of each family.

    Easiest by the task's difficulty (1-5, inherited from its seed; none counts as hardest), then task_id. A
    small budget so goes where a small policy's profile and gate find signal: tasks it solves sometimes.

    Example:
        >>> tasks = [
        ...     {"family": "a", "task_id": "2", "difficulty": 1},
        ...     {"family": "a", "task_id": "1", "difficulty": 3},
        ...     {"family": "a", "task_id": "3", "difficulty": 1},
        ...     {"family": "b", "task_id": "4"},
        ... ]
        >>> first_per_family(tasks, 1), first_per_family(tasks, 2)
        ([0, 3], [0, 2, 3])
    """
    if limit is None:
        return list(range(len(tasks)))

    def level(i: int) -> float:
        difficulty = tasks[i].get("difficulty")
        return math.inf if difficulty is None or pd.isna(difficulty) else float(difficulty)

    order = sorted(range(len(tasks)), key=lambda i: (tasks[i]["family"], level(i), tasks[i]["task_id"]))
    taken: dict[str, int] = {}
    chosen = []
    for i in order:
        family = tasks[i]["family"]
        if taken.get(family, 0) < limit:
            taken[family] = taken.get(family, 0) + 1
            chosen.append(i)
    return sorted(chosen)
