"""Lineage questions answered from the stored assets (not from logs): `seedwheel lineage CHECKPOINT_OR_TASK_ID`.

- A **task id**: its chain seed/failure -> parent -> task, which split it is in (train, eval, failure_eval), and
  which checkpoints trained on it.
- A **checkpoint** (its path, or the hash naming its training directory): what it was trained on, by family
  and by source, the production failures and seeds behind it, and which eval items guard each of those
  failures (held-out tasks of the same failure).

A checkpoint's training set is the `train.parquet` its job read (`<root>/training/grpo/<hash>/`), kept beside
its `job.json`, so older checkpoints stay answerable after newer runs replace the asset tables. Task lineage
comes from the current task tables (`seed_tasks`, `failure_tasks`, `task_variants`, the splits).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from validators.tables import read_table

TASK_TABLES = ("seed_tasks", "failure_tasks", "task_variants")
SPLITS = ("train_tasks", "eval_tasks", "failure_eval")
GRPO_RUNS = Path("training", "grpo")


class LineageError(LookupError):
    """The id is neither a known task nor a checkpoint; the message says where it looked."""


@dataclass
class Checkpoint:
    """A trained checkpoint: where it is, what it started from, and the task ids it trained on."""

    path: str
    run_dir: Path
    start_model: str
    task_ids: list[str]


@dataclass
class Corpus:
    """The stored task tables of one storage root, indexed by task id."""

    home: Path
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    splits: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def load(cls, home: Path) -> Corpus:
        corpus = cls(home)
        for name in TASK_TABLES:
            for row in _rows(home / f"{name}.parquet"):
                corpus.tasks.setdefault(row["task_id"], row)
        for name in SPLITS:
            corpus.splits[name] = {row["task_id"] for row in _rows(home / f"{name}.parquet")}
        return corpus

    def lineage(self, task_id: str) -> dict[str, Any]:
        return (self.tasks.get(task_id) or {}).get("lineage") or {}

    def chain(self, task_id: str) -> list[str]:
        """The task, its parent, the parent's parent, ... up to the seed or the failure task."""
        chain, seen = [task_id], {task_id}
        while (parent := self.lineage(chain[-1]).get("parent_id")) and parent not in seen:
            chain.append(parent)
            seen.add(parent)
        return chain

    def checkpoints(self) -> list[Checkpoint]:
        found = []
        for job_path in sorted((self.home / GRPO_RUNS).glob("*/job.json")):
            job = json.loads(job_path.read_text(encoding="utf-8"))
            trained = [row["task_id"] for row in _rows(job_path.parent / "train.parquet")]
            final = str(Path(job["output_dir"]) / "final")
            found.append(Checkpoint(final, job_path.parent, job["model_path"], trained))
        return found


def _rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return read_table(path).to_dict(orient="records")


def explain(home: Path, ident: str) -> str:
    """A readable answer for a task id or a checkpoint (path or run hash).

    Raises:
        LineageError: the id matches nothing stored under `home`.
    """
    corpus = Corpus.load(home)
    if ident in corpus.tasks:
        return _explain_task(corpus, ident)
    wanted = ident.rstrip("/")
    for checkpoint in corpus.checkpoints():
        if wanted in (checkpoint.path, str(checkpoint.run_dir), checkpoint.run_dir.name):
            return _explain_checkpoint(corpus, checkpoint)
    raise LineageError(
        f"{ident!r} is neither a task id in {', '.join(TASK_TABLES)} nor a checkpoint under "
        f"{home / GRPO_RUNS}; pass a task_id, a checkpoint path (.../final) or its run hash"
    )


def _explain_task(corpus: Corpus, task_id: str) -> str:
    lines = [f"task {task_id} ({corpus.tasks[task_id]['family']})"]
    for step in corpus.chain(task_id):
        lineage = corpus.lineage(step)
        generator = (lineage.get("generator") or {}).get("name")
        origin = generator or lineage.get("source") or "seed"
        known = "" if step in corpus.tasks else " (not in the stored tables)"
        lines.append(f"  <- {step}: {origin}{known}")
    root = corpus.lineage(task_id)
    if root.get("failure_id"):
        lines.append(f"  production failure {root['failure_id']}")
    if root.get("seed_id"):
        lines.append(f"  seed {root['seed_id']}")
    sides = [name for name in SPLITS if task_id in corpus.splits.get(name, set())]
    lines.append(f"  split: {', '.join(sides) or 'none (a duplicate, rejected or not judged in)'}")
    trained = [c.path for c in corpus.checkpoints() if task_id in set(c.task_ids)]
    lines.append(f"  trained on by: {', '.join(trained) or 'no checkpoint'}")
    return "\n".join(lines)


def _explain_checkpoint(corpus: Corpus, checkpoint: Checkpoint) -> str:
    families: Counter[str] = Counter()
    sources: Counter[str] = Counter()
    failures: set[str] = set()
    seeds: set[str] = set()
    for task_id in checkpoint.task_ids:
        task = corpus.tasks.get(task_id, {})
        lineage = corpus.lineage(task_id)
        families[task.get("family", "unknown")] += 1
        sources["production_failure" if lineage.get("failure_id") else lineage.get("source") or "unknown"] += 1
        if lineage.get("failure_id"):
            failures.add(lineage["failure_id"])
        if lineage.get("seed_id"):
            seeds.add(lineage["seed_id"])
    lines = [
        f"checkpoint {checkpoint.path}",
        f"  started from {checkpoint.start_model}; job {checkpoint.run_dir / 'job.json'}",
        f"  trained on {len(checkpoint.task_ids)} tasks from {len(seeds)} seeds and {len(failures)} production "
        "failures",
        "  by family: " + ", ".join(f"{k} {n}" for k, n in sorted(families.items())),
        "  by source: " + ", ".join(f"{k} {n}" for k, n in sorted(sources.items())),
    ]
    guarded = _guards(corpus)
    for failure_id in sorted(failures | set(guarded)):
        trained = "trained on" if failure_id in failures else "not trained on"
        guards = ", ".join(sorted(guarded.get(failure_id, []))) or "none held out"
        lines.append(f"  failure {failure_id} ({trained}): guarded by eval items {guards}")
    return "\n".join(lines)


def _guards(corpus: Corpus) -> dict[str, list[str]]:
    """failure_id -> the held-out eval tasks of that failure (its task and its variants in `failure_eval`)."""
    guards: dict[str, list[str]] = {}
    for task_id in corpus.splits.get("failure_eval", set()):
        failure_id = corpus.lineage(task_id).get("failure_id")
        if failure_id:
            guards.setdefault(failure_id, []).append(task_id)
    return guards
