"""Lineage questions answered from stored data (not from logs): `seedwheel lineage ID`.

- A **task id**: its chain seed/failure -> parent -> task, its lineage root and the side the split ledger gave
  it (since which plan), which split tables hold it now, and which checkpoints trained on it, each with the split
  plan in force when it trained and the root's side then.
- A **failure id**: the failure's tasks (its task and its variants) and their sides, which checkpoints trained
  on any of them (and under which split), and which eval items guard it.
- A **checkpoint** (its model path, its manifest name `<stage>-<digest>`, or the digest): what it trained on,
  by family and by source, the seeds and production failures behind it, the split plan and run it came from,
  and which eval items guard each failure.

Checkpoints are read from their manifests (`<root>/checkpoints/*/`, `curation.manifests`), sides from the split
ledger (`<root>/splits/` or the production database, `curation.split_ledger`); both are kept for good, so an old
checkpoint stays answerable after newer runs replace the asset tables, and after a re-split. Task chains come from
the current task tables (`seed_tasks`, `failure_tasks`, `task_variants`, the splits).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from core import SeedwheelError
from core.tables import read_table
from curation.manifests import TASKS, CheckpointManifest, load_manifests
from curation.split_ledger import SplitLedger
from curation.splits import task_roots
from resources import CHECKPOINTS_FOLDER, StorageRoot

TASK_TABLES = ("seed_tasks", "failure_tasks", "task_variants")
SPLITS = ("train_tasks", "eval_tasks", "failure_eval")


class LineageNotFoundError(SeedwheelError, LookupError):
    """The id is neither a known task, a failure nor a checkpoint; the message says where it looked."""


@dataclass
class Corpus:
    """The stored task tables, checkpoint manifests and split ledger of one storage root."""

    home: Path
    ledger: SplitLedger
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    splits: dict[str, set[str]] = field(default_factory=dict)
    manifests: list[CheckpointManifest] = field(default_factory=list)
    trained: dict[str, pd.DataFrame] = field(default_factory=dict)  # manifest name -> its tasks.parquet

    @classmethod
    def load(cls, home: Path) -> Corpus:
        corpus = cls(home, StorageRoot(root=str(home)).split_ledger())
        for name in TASK_TABLES:
            for row in _rows(home / f"{name}.parquet"):
                corpus.tasks.setdefault(row["task_id"], row)
        for name in SPLITS:
            corpus.splits[name] = {row["task_id"] for row in _rows(home / f"{name}.parquet")}
        corpus.manifests = load_manifests(home / CHECKPOINTS_FOLDER)
        for manifest in corpus.manifests:
            corpus.trained[manifest.name] = read_table(home / CHECKPOINTS_FOLDER / manifest.name / TASKS)
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

    def root(self, task_id: str) -> str:
        """The task's lineage root (as the splits compute it), from its stored record or a manifest's row."""
        if task_id in self.tasks:
            return task_roots([self.tasks[task_id]])[0]
        for rows in self.trained.values():
            match = rows[rows["task_id"] == task_id]
            if len(match):
                return str(match["root"].iloc[0])
        raise LineageNotFoundError(f"task {task_id} is in no stored table")

    def split_then(self, manifest: CheckpointManifest, root: str) -> str:
        """The split plan in force when `manifest` trained, and `root`'s side under it."""
        side = self.ledger.state(manifest.split_seq).sides.get(root, "unassigned") if manifest.split_seq else "-"
        return f"split plan {manifest.split_seq} (epoch {manifest.split_epoch}), root {root} was {side}"

    def find_checkpoint(self, ident: str) -> CheckpointManifest | None:
        wanted = ident.rstrip("/")
        for manifest in self.manifests:
            if wanted in (manifest.name, manifest.name.split("-", 1)[1], manifest.checkpoint.rstrip("/")):
                return manifest
        return None

    def failure_tasks(self, failure_id: str) -> list[str]:
        """Every stored task of the failure: in the task tables, or in a checkpoint's manifest."""
        ids = {t for t in self.tasks if self.lineage(t).get("failure_id") == failure_id}
        for rows in self.trained.values():
            ids |= set(rows.loc[rows["failure_id"] == failure_id, "task_id"])
        return sorted(ids)


def _rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return read_table(path).to_dict(orient="records")


def explain(home: Path, ident: str) -> str:
    """A readable answer for a task id, a failure id or a checkpoint (path, manifest name or digest).

    Raises:
        LineageNotFoundError: the id matches nothing stored under `home`.
    """
    corpus = Corpus.load(home)
    if ident in corpus.tasks or any(ident in set(rows["task_id"]) for rows in corpus.trained.values()):
        return _explain_task(corpus, ident)
    manifest = corpus.find_checkpoint(ident)
    if manifest is not None:
        return _explain_checkpoint(corpus, manifest)
    if corpus.failure_tasks(ident):
        return _explain_failure(corpus, ident)
    raise LineageNotFoundError(
        f"{ident!r} is neither a task id in {', '.join(TASK_TABLES)}, a failure id, nor a checkpoint under "
        f"{home / CHECKPOINTS_FOLDER}",
        hint="pass a task_id, a failure_id, a checkpoint path (.../final), or its manifest name (grpo-<digest>)",
    )


def _side(corpus: Corpus, root: str) -> str:
    sides = corpus.ledger.state().sides
    if root not in sides:
        return "no side yet (never in a split)"
    rows = corpus.ledger.rows()
    since = rows.loc[rows["root"] == root, ["seq", "epoch"]].iloc[-1]
    return f"{sides[root]} (since split plan {since['seq']}, epoch {since['epoch']})"


def _trained_by(corpus: Corpus, task_ids: set[str]) -> list[str]:
    lines = []
    for manifest in corpus.manifests:
        hit = sorted(task_ids & set(manifest.task_ids))
        if hit:
            root = corpus.root(hit[0])
            lines.append(f"    {manifest.name} ({manifest.checkpoint}): {corpus.split_then(manifest, root)}")
    return lines or ["    no checkpoint"]


def _explain_task(corpus: Corpus, task_id: str) -> str:
    family = (corpus.tasks.get(task_id) or {}).get("family", "not in the current tables")
    lines = [f"task {task_id} ({family})"]
    for step in corpus.chain(task_id):
        lineage = corpus.lineage(step)
        generator = (lineage.get("generator") or {}).get("name")
        origin = generator or lineage.get("source") or "seed"
        known = "" if step in corpus.tasks else " (not in the stored tables)"
        lines.append(f"  <- {step}: {origin}{known}")
    lineage = corpus.lineage(task_id)
    if lineage.get("failure_id"):
        lines.append(f"  production failure {lineage['failure_id']}")
    if lineage.get("seed_id"):
        lines.append(f"  seed {lineage['seed_id']}")
    root = corpus.root(task_id)
    lines.append(f"  root {root}: {_side(corpus, root)}")
    tables = [name for name in SPLITS if task_id in corpus.splits.get(name, set())]
    lines.append(f"  split: {', '.join(tables) or 'none (a duplicate, rejected or not judged in)'}")
    lines.append("  trained on by:")
    lines.extend(_trained_by(corpus, {task_id}))
    return "\n".join(lines)


def _explain_failure(corpus: Corpus, failure_id: str) -> str:
    task_ids = corpus.failure_tasks(failure_id)
    lines = [f"production failure {failure_id}: {len(task_ids)} tasks"]
    for task_id in task_ids:
        tables = [name for name in SPLITS if task_id in corpus.splits.get(name, set())]
        lines.append(f"  {task_id}: root {corpus.root(task_id)}, now in {', '.join(tables) or 'no split'}")
    lines.append("  checkpoints that trained on its tasks:")
    lines.extend(_trained_by(corpus, set(task_ids)))
    guards = sorted(_guards(corpus).get(failure_id, []))
    lines.append(f"  guarded by eval items: {', '.join(guards) or 'none held out'}")
    return "\n".join(lines)


def _explain_checkpoint(corpus: Corpus, manifest: CheckpointManifest) -> str:
    rows = corpus.trained[manifest.name]
    failures = {str(f) for f in rows["failure_id"].dropna()}
    seeds = {str(s) for s in rows["seed_id"].dropna()}
    sources = Counter("production_failure" if f is not None else "seed lineage" for f in rows["failure_id"])
    families = Counter(rows["family"])
    lines = [
        f"checkpoint {manifest.checkpoint} ({manifest.name})",
        f"  started from {manifest.start_model}; base {manifest.base_model}; run {manifest.run_id}",
        f"  split plan {manifest.split_seq} in force (epoch {manifest.split_epoch}, id {manifest.split_plan_id})",
        f"  trained on {len(manifest.task_ids)} tasks from {len(seeds)} seeds and {len(failures)} production failures",
        "  by family: " + ", ".join(f"{k} {n}" for k, n in sorted(families.items())),
        "  by source: " + ", ".join(f"{k} {n}" for k, n in sorted(sources.items())),
        "  inputs: " + ", ".join(f"{k} (run {v['run_id']})" for k, v in sorted(manifest.data_versions.items())),
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
