"""Metadata helpers shared by assets: counts and previews as Markdown a person can read in the UI."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import dagster as dg
import pandas as pd

from core.tables import records_from_frame
from training.tracking import TrackedRun

PREVIEW_ROWS = 10
PROGRESS_STEPS = 10
CELL_CHARS = 80


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A GitHub-flavoured Markdown table; cells are shortened and pipes escaped so one row stays one line."""
    head = "| " + " | ".join(columns) + " |\n| " + " | ".join("---" for _ in columns) + " |\n"
    body = "".join("| " + " | ".join(_cell(row.get(c)) for c in columns) + " |\n" for row in rows)
    return head + body


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = text.replace("\n", " ").replace("|", "\\|")
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"


def count_table(values: Iterable[Any], label: str) -> dg.MetadataValue:
    """Counts of each value, most common first, as a Markdown table."""
    counts = Counter(values).most_common()
    return dg.MetadataValue.md(markdown_table([{label: k, "count": n} for k, n in counts], [label, "count"]))


def preview(frame: pd.DataFrame, columns: Sequence[str], rows: int = PREVIEW_ROWS) -> dg.MetadataValue:
    """The first rows of a table, selected columns, as Markdown."""
    present = [c for c in columns if c in frame.columns]
    return dg.MetadataValue.md(markdown_table(frame[present].head(rows).to_dict(orient="records"), present))


TASK_PREVIEW_COLUMNS = ("task_id", "family", "prompt_text")


def task_preview(tasks: pd.DataFrame, columns: Sequence[str] = TASK_PREVIEW_COLUMNS) -> dg.MetadataValue:
    """A preview of task records; `prompt_text` is the last user message, the part a reviewer wants to see."""
    texts = [next((m["content"] for m in reversed(p) if m["role"] == "user"), "") for p in tasks["prompt"]]
    return preview(tasks.assign(prompt_text=texts), columns)


def progress_logger(context: dg.OpExecutionContext, what: str) -> Callable[[int, int], None]:
    """A `progress(done, total)` callback that logs about every tenth of a batch, so the run page shows it move."""
    last = [-1]

    def progress(done: int, total: int) -> None:
        step = done * PROGRESS_STEPS // max(total, 1)
        if step != last[0] or done == total:
            last[0] = step
            context.log.info(f"{what}: {done}/{total}")

    return progress


def shard_steps(stats: Iterable[pd.DataFrame]) -> list[dict[str, Any]]:
    """The stats rows of a sharded stage's steps (a one-row table each, collected by its merge), in shard order."""
    return sorted((row for frame in stats for row in records_from_frame(frame)), key=lambda row: row["shard"])


def shard_metadata(shards: int, steps: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> dict[str, Any]:
    """A sharded stage's metadata: the configured shard count, the steps that ran (an empty hash range makes
    none), and each step's share of the work as a table of `columns`."""
    return {
        "shards": shards,
        "shard_steps": len(steps),
        "shard_balance": dg.MetadataValue.md(markdown_table(steps, columns)),
    }


def tracking_metadata(run: TrackedRun | None) -> dict[str, Any]:
    """Where a person finds a step's MLflow run and TensorBoard curves (`training.tracking`); nothing when the step
    was not tracked.

    On a tracking server `mlflow_run` is a link; on a local store it is the run's place in the UI that
    `mlflow_ui` (the command to start it) serves.
    """
    if run is None:
        return {}
    metadata: dict[str, Any] = {}
    if run.run_id is not None:
        url = run.ui_url or ""
        metadata |= {
            "mlflow_run_id": run.run_id,
            "mlflow_run": dg.MetadataValue.url(url) if url.startswith("http") else url,
            "mlflow_tracking_uri": run.tracking_uri,
        }
        if not url.startswith("http"):
            metadata["mlflow_ui"] = f"mlflow ui --backend-store-uri {run.tracking_uri}"
    if run.tensorboard_dir is not None:
        metadata["tensorboard_dir"] = dg.MetadataValue.path(run.tensorboard_dir)
    return metadata
