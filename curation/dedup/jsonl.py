"""Deduplicate a JSONL file: every row back, in order, labelled (the `seedwheel dedup` command).

`text_field` names the text of a row: a field name, a dotted path into nested objects (`meta.body`, list
items by number: `messages.0.content`), or for task records `prompt`, whose chat messages' contents are
joined with newlines (a string `prompt` is used as is). Lines must be UTF-8 JSON objects; a line that is not,
or lacks the text, stops the run with an error naming the file, the line (1-based, as editors count) and
the fix. Blank lines are errors too, since row numbers would otherwise drift from line numbers.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.tables import atomic_write
from curation.dedup.labels import DedupInputError, label_arrays
from curation.dedup.minhash import MinHashConfig


@dataclass(frozen=True)
class DedupSummary:
    """What `dedup_jsonl` did: counts, the config, where the output went, how long it took."""

    rows: int
    duplicates: int
    exact_duplicates: int
    near_duplicates: int
    clusters_with_duplicates: int
    config: str
    threshold: float
    output_path: str
    seconds: float


def _resolve(record: Any, text_field: str) -> Any:
    value = record
    for part in text_field.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise KeyError(part)
    return value


def row_text(record: Any, text_field: str) -> str:
    """The text of one JSONL record (see the module docstring for `text_field`).

    Raises:
        KeyError: the path does not exist.
        TypeError: the value is not text (or, for `prompt`, not a string or a list of messages).

    Example:
        >>> row_text({"prompt": [{"role": "user", "content": "Hi"}, {"role": "user", "content": "there"}]}, "prompt")
        'Hi\\nthere'
    """
    value = _resolve(record, text_field)
    if text_field == "prompt" and isinstance(value, list):
        if not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in value):
            raise TypeError("prompt must be a list of {role, content} messages with string content")
        return "\n".join(m["content"] for m in value)
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def read_rows(input_path: Path, text_field: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Parse a JSONL file into records and their texts, failing on the first bad line with its number."""
    records, texts = [], []
    with open(input_path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            where = f"{input_path}:{number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise DedupInputError(
                    f"{where}: not valid UTF-8 (byte 0x{raw[error.start]:02x} at column {error.start + 1}) - "
                    "re-encode the file as UTF-8"
                ) from None
            if not line.strip():
                raise DedupInputError(f"{where}: blank line - remove it (every line must be one JSON object)")
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise DedupInputError(
                    f"{where}: invalid JSON ({error.msg} at column {error.colno}) - fix the line"
                ) from None
            if not isinstance(record, dict):
                raise DedupInputError(
                    f"{where}: expected a JSON object, got {type(record).__name__} - one object per line"
                )
            try:
                texts.append(row_text(record, text_field))
            except KeyError:
                raise DedupInputError(
                    f"{where}: no field {text_field!r} (fields: {', '.join(sorted(record)) or 'none'}) - "
                    "pass --text-field with the field holding the text (a dotted path for nested fields)"
                ) from None
            except TypeError as error:
                raise DedupInputError(f"{where}: field {text_field!r}: {error} - point --text-field at text") from None
            records.append(record)
    return records, texts


def dedup_jsonl(
    input_path: Path, output_path: Path, *, text_field: str = "text", config: MinHashConfig | None = None
) -> DedupSummary:
    """Label exact and near duplicates in a JSONL file and write every row back with its label.

    Each output row is the input object plus `is_duplicate` (bool), `cluster_id` (the 0-based input line of
    the cluster's kept row, as a string) and `duplicate_of` (that line as an integer, or null for kept rows);
    existing fields of those names are overwritten. The kept row of a cluster is its earliest line. The
    output is written atomically, so it may be the input path itself.

    Args:
        input_path: JSON Lines, one object per line.
        output_path: where the labelled rows go.
        text_field: which text to compare (see the module docstring).
        config: dedup parameters (default `MinHashConfig()`).

    Returns:
        A `DedupSummary`.

    Raises:
        DedupInputError: a bad line (message names the file, the line and the fix).

    Example:
        >>> dedup_jsonl(Path("rows.jsonl"), Path("labelled.jsonl"), text_field="question")  # doctest: +SKIP
        DedupSummary(rows=1000, duplicates=12, ...)
    """
    config = config or MinHashConfig()
    started = time.perf_counter()
    records, texts = read_rows(Path(input_path), text_field)
    arrays = label_arrays(list(range(len(records))), texts, None, config)
    keeper, kind = arrays.keeper.tolist(), arrays.kind.tolist()
    with atomic_write(Path(output_path), "w") as handle:
        for record, kept, row_kind in zip(records, keeper, kind, strict=True):
            labelled = {**record, "is_duplicate": row_kind > 0, "cluster_id": str(kept)}
            labelled["duplicate_of"] = kept if row_kind > 0 else None
            handle.write(json.dumps(labelled, ensure_ascii=False) + "\n")
    duplicates = arrays.kind > 0
    return DedupSummary(
        rows=len(records),
        duplicates=int(duplicates.sum()),
        exact_duplicates=int((arrays.kind == 1).sum()),
        near_duplicates=int((arrays.kind == 2).sum()),
        clusters_with_duplicates=len(np.unique(arrays.keeper[duplicates])),
        config=config.name,
        threshold=float(config.threshold),
        output_path=str(output_path),
        seconds=round(time.perf_counter() - started, 3),
    )
