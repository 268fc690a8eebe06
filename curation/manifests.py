"""Checkpoint manifests: what every trained checkpoint trained on, kept for as long as the storage root lives.

Each trained checkpoint (SFT and GRPO alike) gets a folder `<storage root>/checkpoints/<stage>-<digest>/` (the
digest names its training directory too):

```
tasks.parquet    the tasks it trained on, after every filter: task_id, family, lineage ids (seed_id, failure_id),
                 root, and the compared text (for near-duplicate checks against later eval sets)
manifest.json    stage, checkpoint path, start and base model, task ids, the split plan in force (seq, epoch,
                 plan_id), the run id, the data versions of its inputs, verifier versions, its training config
```

`manifest.json` is written last (atomically): it is the commit point, so a folder without one is ignored. The
asset tables are replaced every night; these folders are not, so a question about an old checkpoint ("what did
it train on, which split was in force") is answered from them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from core.tables import atomic_write, read_table, write_table
from curation.curate import task_text
from curation.dedup import MinHashConfig, near_duplicate_pairs
from curation.splits import lineage_leaks, task_roots

MANIFEST = "manifest.json"
TASKS = "tasks.parquet"
TASK_COLUMNS = ("task_id", "family", "seed_id", "failure_id", "root", "text")


@dataclass(frozen=True)
class CheckpointManifest:
    """One trained checkpoint's record (see the module docstring).

    Attributes:
        name: `<stage>-<digest>`, the folder name.
        stage: `sft` or `grpo`.
        checkpoint: the model directory it produced.
        start_model: the model it started from.
        base_model: the base model of the chain (before SFT).
        task_ids: the task ids it trained on, after filtering (sorted).
        split_seq: the split plan in force when it trained (`curation.split_ledger`).
        split_epoch: that plan's epoch (re-splits before it).
        split_plan_id: that plan's content id.
        run_id: the Dagster run that trained it.
        data_versions: asset -> the data version (or run id) of each input it read.
        verifier_versions: verifier name -> versions its tasks were scored with.
        config: its training settings.
    """

    name: str
    stage: str
    checkpoint: str
    start_model: str
    base_model: str
    task_ids: list[str]
    split_seq: int
    split_epoch: int
    split_plan_id: str
    run_id: str
    data_versions: dict[str, str] = field(default_factory=dict)
    verifier_versions: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)


def trained_rows(tasks: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """The `tasks.parquet` rows for task records: ids, lineage ids, root and compared text."""
    records = list(tasks)
    roots = task_roots(records) if records else []
    rows = [
        {
            "task_id": task["task_id"],
            "family": task["family"],
            "seed_id": task["lineage"].get("seed_id"),
            "failure_id": task["lineage"].get("failure_id"),
            "root": root,
            "text": task_text(task),
        }
        for task, root in zip(records, roots, strict=True)
    ]
    return pd.DataFrame(rows, columns=TASK_COLUMNS)


def write_manifest(folder: Path, manifest: CheckpointManifest, tasks: Iterable[Mapping[str, Any]]) -> Path:
    """Store a checkpoint's manifest and trained tasks under `folder/<name>/`; returns the manifest's path.

    Args:
        folder: the manifests folder (`<storage root>/checkpoints`).
        manifest: the record; its `task_ids` must be the ids of `tasks`.
        tasks: the task records it trained on.

    Raises:
        ValueError: `task_ids` and the tasks disagree.
    """
    rows = trained_rows(tasks)
    if sorted(rows["task_id"]) != sorted(manifest.task_ids):
        raise ValueError(f"manifest {manifest.name}: task_ids and the trained tasks differ; pass the same tasks")
    target = folder / manifest.name
    write_table(rows, target / TASKS)
    with atomic_write(target / MANIFEST, "w") as handle:  # the commit point
        handle.write(json.dumps(asdict(manifest), indent=2, sort_keys=True) + "\n")
    return target / MANIFEST


def load_manifests(folder: Path) -> list[CheckpointManifest]:
    """Every committed manifest under `folder`, by name."""
    found = []
    for path in sorted(Path(folder).glob(f"*/{MANIFEST}")):
        found.append(CheckpointManifest(**json.loads(path.read_text(encoding="utf-8"))))
    return found


def find_manifest(folder: Path, checkpoint: str) -> CheckpointManifest | None:
    """The manifest of the checkpoint at `checkpoint` (a model directory), or None (e.g. a base model)."""
    wanted = str(checkpoint).rstrip("/")
    return next((m for m in load_manifests(folder) if m.checkpoint.rstrip("/") == wanted), None)


def split_epochs(folder: Path, models: Mapping[str, str]) -> dict[str, int | None]:
    """The split epoch each of `models` (e.g. role -> model) was trained under, by the same keys: its manifest's, or
    None for a model without one (a base model). The promotion gate compares only models of one epoch."""
    manifests = {key: find_manifest(folder, model) for key, model in models.items()}
    return {key: None if manifest is None else manifest.split_epoch for key, manifest in manifests.items()}


def trained_tasks(folder: Path) -> pd.DataFrame:
    """The trained tasks of every checkpoint under `folder`, one row per (checkpoint, task), with `checkpoint`."""
    frames = [
        read_table(folder / manifest.name / TASKS).assign(checkpoint=manifest.name)
        for manifest in load_manifests(folder)
    ]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*TASK_COLUMNS, "checkpoint"])


def checkpoint_leaks(
    eval_tasks: Iterable[Mapping[str, Any]], trained: pd.DataFrame, config: MinHashConfig
) -> list[dict[str, Any]]:
    """Eval tasks that some checkpoint trained on: by a shared lineage id, or as a near-duplicate of its text.

    Args:
        eval_tasks: the eval split's task records.
        trained: `trained_tasks(folder)`.
        config: the MinHash settings near-duplicates are found with.

    Returns:
        One row per offending pair: `checkpoint`, `trained` and `eval` task ids, `why`. Empty when clean.
    """
    evaluation = list(eval_tasks)
    if not evaluation or trained.empty:
        return []
    records = [
        {"task_id": row.task_id, "lineage": {"seed_id": row.seed_id, "failure_id": row.failure_id}}
        for row in trained.itertuples()
    ]
    checkpoint_of = dict(zip(trained["task_id"], trained["checkpoint"], strict=False))
    offenders = [
        {"checkpoint": checkpoint_of[leak["train_task_id"]], "trained": leak["train_task_id"],
         "eval": leak["eval_task_id"], "why": f"shared {leak['root_kind']} {leak['shared_root']}"}
        for leak in lineage_leaks(records, evaluation)
    ]  # fmt: skip
    texts = list(trained["text"]), [task_text(t) for t in evaluation]
    for i, j, score in near_duplicate_pairs(*texts, config):
        offenders.append(
            {
                "checkpoint": trained["checkpoint"].iloc[i],
                "trained": trained["task_id"].iloc[i],
                "eval": evaluation[j]["task_id"],
                "why": f"near-duplicate ({score:.2f})",
            }
        )
    return offenders
