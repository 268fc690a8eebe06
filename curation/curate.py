"""Task-level curation rules on top of the generic dedup machinery: what text is compared, and what counts.

Two tasks are duplicates when their task text is (nearly) the same AND they share the same gold, i.e. the same
verifier name and params. The second half matters: a programmatic variant re-samples the numbers of its
seed (or swaps a SQL literal, renames a function) and so keeps most of the seed's wording while being a
different task with a different answer; MinHash alone would call most such variants near-duplicates of
their seed. A paraphrase, which keeps the gold, is a duplicate when its text stays close.

The compared text is the task's non-system messages: a family shares one long system prompt (tool schemas,
a database schema), which would make every task of a family look alike.

Limitation: clusters are formed on text alone (union-find), and the gold rule is applied to each row against
its cluster's kept row. A near-copy of a variant whose cluster is kept by the seed (a different gold) is
therefore kept, not labelled: the rule errs towards keeping tasks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from curation.dedup import DedupIndex, DedupLabel, MinHashConfig, label_duplicates, near_duplicate_pairs
from curation.splits import failure_roots, task_roots
from validators.tasks import canonical_json


def task_text(task: Mapping[str, Any]) -> str:
    """The text compared for duplicates: the contents of the prompt's non-system messages."""
    return "\n".join(m["content"] for m in task["prompt"] if m["role"] != "system")


def gold_key(task: Mapping[str, Any]) -> str:
    """A short hash of the task's verifier name and params: equal for tasks with the same gold answer."""
    verifier = task["verifier"]
    canonical = canonical_json({"name": verifier["name"], "params": verifier.get("params", {})})
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]


def dedup_key(task: Mapping[str, Any]) -> str:
    """`<gold key>:<task_id>`, the key rows are labelled and indexed under (so a match carries its gold)."""
    return f"{gold_key(task)}:{task['task_id']}"


def keep_priority(task: Mapping[str, Any]) -> tuple[int, int, str]:
    """Which member of a cluster is kept: seeds first, then the shallowest lineage, then the smallest id."""
    lineage = task["lineage"]
    return (lineage["source"] != "seed", lineage["parent_id"] is not None, task["task_id"])


def dedup_tasks(
    tasks: Sequence[Mapping[str, Any]], config: MinHashConfig, index: DedupIndex | None = None
) -> list[DedupLabel]:
    """Label each task as kept or as a duplicate (exact or near) of a kept task with the same gold.

    Args:
        tasks: task records.
        config: the MinHash parameters.
        index: tasks accepted by earlier runs (their keys are `dedup_key`s); this run's kept tasks are staged
            in it, to be committed by the caller once its output is saved.

    Returns:
        One label per task, in input order; `duplicate_of` and `cluster_id` name task ids.

    Example:
        >>> seed = {"task_id": "a", "prompt": [{"role": "user", "content": "What is 2 + 2?"}],
        ...         "verifier": {"name": "numeric_answer", "params": {"answer": 4}},
        ...         "lineage": {"source": "seed", "parent_id": None}}
        >>> copy = {**seed, "task_id": "b", "lineage": {"source": "generated", "parent_id": "a"}}
        >>> [label.duplicate_of for label in dedup_tasks([seed, copy], MinHashConfig())]
        [None, 'a']
    """
    keys = [dedup_key(t) for t in tasks]
    labels = label_duplicates(keys, [task_text(t) for t in tasks], [keep_priority(t) for t in tasks], config, index)
    result = []
    for key, label in zip(keys, labels, strict=True):
        own_id = key.split(":", 1)[1]
        if label.is_duplicate and str(label.duplicate_of).split(":", 1)[0] != key.split(":", 1)[0]:
            result.append(DedupLabel(False, own_id, None, None))  # same text, different gold: another task
            continue
        kept = str(label.duplicate_of).split(":", 1)[1] if label.is_duplicate else None
        result.append(DedupLabel(label.is_duplicate, label.cluster_id.split(":", 1)[-1], kept, label.kind))
    return result


def index_tasks(tasks: Sequence[Mapping[str, Any]], index: DedupIndex) -> int:
    """Add the tasks the index does not hold yet (by `dedup_key`) and commit them; returns the rows written.

    The pipeline indexes the tasks its splits keep, so later runs label near-copies of anything trained or
    evaluated on as duplicates, and a task the judge rejected blocks nothing.
    """
    keys = [dedup_key(t) for t in tasks]
    known = index.ordinals_of(keys) >= 0 if len(index) else [False] * len(keys)
    fresh = [i for i, seen in enumerate(known) if not seen]
    index.stage_texts([keys[i] for i in fresh], [task_text(tasks[i]) for i in fresh])
    return index.commit()


@dataclass(frozen=True)
class NearCopies:
    """What `near_copy_roots` found: failure roots that take another root's side, and those that cannot."""

    follows: dict[str, str] = field(default_factory=dict)  # failure root -> the root whose side it takes
    torn: frozenset[str] = frozenset()  # failure roots near-copying roots on both sides: no side is clean


def near_copy_roots(
    tasks: Sequence[Mapping[str, Any]], config: MinHashConfig, known: Mapping[str, str] | None = None
) -> NearCopies:
    """Production-failure roots that are near-copies of another root's task, and the root whose side they take.

    A failure no seed explains is its own lineage root, so a user asking a seed's question with other numbers
    would be split on its own and could land in training while the seed's variants are held out (the contamination
    check then stops the run). Roots joined by near-duplicate texts (MinHash at `config`, gold ignored: a near-copy
    with another answer still teaches the eval item) form groups; each failure root follows its group's leader:
    a root with a side already (`known`), else a seed root, else the smallest root id. A group whose known roots
    sit on both sides has no clean side for its new failure roots: they are `torn` (hold them out of the split).

    Args:
        tasks: task records of one split (any mix of seeds, variants, failures).
        config: the MinHash settings (the dedup and contamination check's own).
        known: root -> side from earlier splits; such roots lead, and never follow.

    Returns:
        `follows`: failure root -> leader, for failure roots in a group with another root and not in `known`;
        `torn`: the new failure roots of groups whose known roots disagree.

    Example:
        >>> def task(task_id, apples, lineage):
        ...     text = f"Ann has {apples} apples and buys 4 more at the market. How many apples does she have now?"
        ...     return {"task_id": task_id, "prompt": [{"role": "user", "content": text}], "lineage": lineage}
        >>> seed, failure = task("s", 3, {"seed_id": "s"}), task("f", 5, {"failure_id": "f1"})
        >>> near_copy_roots([seed, failure], MinHashConfig(threshold=0.5)).follows
        {'f1': 's'}
    """
    known = known or {}
    roots = task_roots(tasks)
    failures = failure_roots(roots, tasks)
    candidates = [i for i, root in enumerate(roots) if root in failures and root not in known]
    if not candidates:
        return NearCopies()
    texts = [task_text(t) for t in tasks]
    parent = {root: root for root in roots}

    def find(root: str) -> str:
        while parent[root] != root:
            parent[root] = parent[parent[root]]
            root = parent[root]
        return root

    for i, j, _ in near_duplicate_pairs([texts[i] for i in candidates], texts, config):
        a, b = find(roots[candidates[i]]), find(roots[j])
        if a != b:
            parent[max(a, b)] = min(a, b)
    groups: dict[str, list[str]] = {}
    for root in dict.fromkeys(roots):
        groups.setdefault(find(root), []).append(root)
    follows: dict[str, str] = {}
    torn: set[str] = set()
    for members in groups.values():
        if len(members) < 2:
            continue
        new = [r for r in members if r in failures and r not in known]
        if len({known[r] for r in members if r in known}) > 1:
            torn.update(new)
            continue
        leader = min(members, key=lambda r: (r not in known, r in failures, r))
        follows.update({r: leader for r in new if r != leader})
    return NearCopies(follows, frozenset(torn))


def torn_row(task: Mapping[str, Any]) -> dict[str, Any]:
    """A held-back row (`curation.vouching.HELD_BACK_COLUMNS`) for a task of a `NearCopies.torn` root.

    Example:
        >>> torn_row({"task_id": "t", "family": "sql", "lineage": {"generator": None}})["reason"][:30]
        'a production failure that near'
    """
    generator = (task.get("lineage") or {}).get("generator") or {}
    return {
        "task_id": task["task_id"],
        "family": task["family"],
        "generator": generator.get("name"),
        "checks": None,
        "judge_verdict": None,
        "reason": "a production failure that near-copies tasks on both sides of the split: held out of both",
    }
