"""Export a split in the shape TRL's GRPOTrainer loads directly: Parquet and JSON Lines, written atomically.

```python
from datasets import load_dataset
from validators.rewards import VerifierReward

train = load_dataset("parquet", data_files="train.parquet", split="train")
trainer = GRPOTrainer(model=..., reward_funcs=[VerifierReward()], train_dataset=train, ...)
```

Columns, one row per task:

| column | type | why |
| --- | --- | --- |
| `prompt` | list of `{role, content}` structs | TRL's conversational format; `datasets` yields message lists |
| `verifier` | JSON text | read by `VerifierReward` (it decodes text) |
| `task_id`, `family` | text | logs, per-family metrics |
| `reference`, `seed_id` | text or null | audits; the lineage root |

`prompt` is a native struct list because the task schema fixes its shape (exactly `role` and `content`, both
text), so Arrow stores it losslessly. `verifier` is not: its `params` differ in shape per family (`answer` is a
number for `numeric_answer`, `expected` an object of fields for `json_schema` and `{name, arguments}` for
`tool_call`, `tests` a string for `python_tests`). One struct column would have to be the union of every
family's keys, padding each row with nulls (an absent key and a null value become the same) and failing
outright where two families give a key different types. JSON text keeps each row's spec exactly. The JSONL file
carries the same text for the same reason: `load_dataset("json")` would otherwise infer that union struct.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from core import SeedwheelError
from core.tables import JSON_COLUMNS_KEY, atomic_write, records_from_frame, write_jsonl
from validators.tasks import canonical_json

MESSAGE_TYPE = pa.struct([("role", pa.string()), ("content", pa.string())])
# Fixed types, so an empty split or an all-null column still has the schema a trainer expects.
EXPORT_SCHEMA = pa.schema(
    [
        ("task_id", pa.string()),
        ("family", pa.string()),
        ("prompt", pa.list_(MESSAGE_TYPE)),
        ("verifier", pa.string()),
        ("reference", pa.string()),
        ("seed_id", pa.string()),
    ],
    # read_table decodes `verifier` back into a dict, like every other seedwheel table.
    metadata={JSON_COLUMNS_KEY: json.dumps(["verifier"]).encode()},
)


SUFFIXES = (".parquet", ".jsonl")


class ExportError(SeedwheelError, ValueError):
    """A task that cannot be exported (a missing field, a prompt that is not chat messages); names the row."""


@dataclass(frozen=True)
class ExportedSplit:
    """Where `export_split` wrote a split, and how many rows."""

    parquet: Path
    jsonl: Path
    rows: int


def export_rows(tasks: pd.DataFrame | Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Task records as export rows: the columns of `EXPORT_SCHEMA`, `verifier` as canonical JSON text.

    Args:
        tasks: task records (or a DataFrame of them, nested columns decoded).

    Returns:
        One dict per task, in input order.

    Raises:
        ExportError: a task lacks a field or its prompt is not a list of `{role, content}` messages.

    Example:
        >>> row = export_rows([{"task_id": "t1", "family": "arithmetic", "reference": "#### 4",
        ...     "prompt": [{"role": "user", "content": "2+2?"}], "lineage": {"seed_id": "t1"},
        ...     "verifier": {"name": "numeric_answer", "version": 1, "params": {"answer": 4}}}])[0]
        >>> row["verifier"]
        '{"name":"numeric_answer","params":{"answer":4},"version":1}'
    """
    records = records_from_frame(tasks) if isinstance(tasks, pd.DataFrame) else list(tasks)
    return [_row(task, index) for index, task in enumerate(records)]


def _row(task: Mapping[str, Any], index: int) -> dict[str, Any]:
    where = f"task {task.get('task_id', '?')} (row {index})"
    missing = [name for name in ("task_id", "family", "prompt", "verifier") if task.get(name) is None]
    if missing:
        raise ExportError(f"{where} lacks {', '.join(missing)}; export validated task records only")
    prompt = task["prompt"]
    messages = prompt if isinstance(prompt, list | tuple) and prompt else [None]  # [None] fails the check
    if not all(
        isinstance(m, Mapping) and all(isinstance(m.get(k), str) for k in ("role", "content")) for m in messages
    ):
        raise ExportError(
            f"{where}: prompt must be a list of {{role, content}} messages with text values, got "
            f"{str(prompt)[:60]!r}; read tables with core.tables.read_table, which decodes nested columns"
        )
    verifier = task["verifier"]
    if isinstance(verifier, str):
        try:
            verifier = json.loads(verifier)
        except json.JSONDecodeError as exc:
            raise ExportError(f"{where}: verifier is text but not JSON ({exc}); give the verifier spec") from None
    lineage = task.get("lineage")
    seed_id = lineage.get("seed_id") if isinstance(lineage, Mapping) else None
    return {
        "task_id": str(task["task_id"]),
        "family": str(task["family"]),
        "prompt": [{"role": m["role"], "content": m["content"]} for m in prompt],
        "verifier": canonical_json(verifier),
        "reference": task.get("reference"),
        "seed_id": seed_id,
    }


def export_split(tasks: pd.DataFrame | Iterable[Mapping[str, Any]], out_dir: Path, name: str) -> ExportedSplit:
    """Write `<out_dir>/<name>.parquet` and `<out_dir>/<name>.jsonl`, each atomically.

    Args:
        tasks: the split's task records (or a DataFrame of them, nested columns decoded).
        out_dir: the folder; created when missing.
        name: the file stem, e.g. `train` or `eval`.

    Returns:
        The two paths and the row count.

    Raises:
        ExportError: a task cannot be exported, or `name` is not a plain file stem.

    Example:
        >>> exported = export_split(eval_tasks, Path("export"), "eval")  # doctest: +SKIP
        >>> load_dataset("parquet", data_files=str(exported.parquet), split="train")[0]["prompt"]  # doctest: +SKIP
        [{'role': 'system', 'content': '...'}, {'role': 'user', 'content': '...'}]
    """
    if not name or Path(name).name != name or name.startswith("."):
        raise ExportError(f"export name must be a plain file stem such as 'train', got {name!r}")
    rows = export_rows(tasks)
    out_dir = Path(out_dir)
    parquet_path, jsonl_path = out_dir / f"{name}.parquet", out_dir / f"{name}.jsonl"
    # Each file is replaced whole; a crash between the two can leave a new Parquet beside an older JSONL.
    _write(rows, parquet_path)
    _write(rows, jsonl_path)
    return ExportedSplit(parquet=parquet_path, jsonl=jsonl_path, rows=len(rows))


def export_file(tasks: pd.DataFrame | Iterable[Mapping[str, Any]], path: Path) -> int:
    """Write a split for TRL as one file, Parquet or JSON Lines by `path`'s suffix, atomically (`seedwheel export`).

    Args:
        tasks: the split's task records (or a DataFrame of them, nested columns decoded).
        path: a `.parquet` or `.jsonl` file; its folder is created when missing.

    Returns:
        The number of rows written.

    Raises:
        ExportError: a task cannot be exported, or `path` has another suffix.

    Example:
        >>> export_file(train_tasks, Path("trl/train.parquet"))  # doctest: +SKIP
        412
    """
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise ExportError(
            f"{path}: TRL's export is Parquet or JSON Lines", hint=f"name the file *{' or *'.join(SUFFIXES)}"
        )
    rows = export_rows(tasks)
    _write(rows, path)
    return len(rows)


def _write(rows: list[dict[str, Any]], path: Path) -> None:
    """Export rows as `path`'s suffix says, the file replaced whole (`core.tables.atomic_write`)."""
    if path.suffix == ".jsonl":
        write_jsonl(rows, path)
        return
    with atomic_write(path) as handle:
        pq.write_table(pa.Table.from_pylist(rows, schema=EXPORT_SCHEMA), handle)
