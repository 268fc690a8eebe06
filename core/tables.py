"""Tables on disk: pandas <-> Parquet, lossless for nested fields, written atomically.

Nested values (chat messages, verifier params, lineage) have a different shape per family, so Parquet's
struct inference would merge their keys and pad them with nulls. Instead every column holding dicts or
lists is stored as JSON text, and the file's schema metadata lists those columns (`seedwheel.json_columns`)
so `read_table` decodes them back exactly. Other tools read the JSON text as is (DuckDB: `col::JSON`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

JSON_COLUMNS_KEY = b"seedwheel.json_columns"


def frame_from_records(records: Iterable[Mapping[str, Any]], columns: Iterable[str] = ()) -> pd.DataFrame:
    """Records -> DataFrame of object columns (no dtype guessing: an int with a None stays an int).

    `columns` fixes the columns and their order (kept even when there are no records); by default the keys
    of all records, in first-seen order.
    """
    records = list(records)
    names = list(columns) or list(dict.fromkeys(k for r in records for k in r))
    return pd.DataFrame({c: pd.Series([r.get(c) for r in records], dtype=object) for c in names}, columns=names)


def records_from_frame(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """DataFrame -> plain Python records (NaN/NA -> None), e.g. task records for a verifier."""
    return [{k: _plain(v) for k, v in row.items()} for row in frame.astype(object).to_dict(orient="records")]


def _plain(value: Any) -> Any:
    if isinstance(value, float) and value != value:  # NaN
        return None
    return None if value is pd.NA else value


def _is_nested(series: pd.Series) -> bool:
    return series.dtype == object and any(isinstance(v, (dict, list, tuple)) for v in series)


def to_arrow(frame: pd.DataFrame) -> pa.Table:
    """A DataFrame as an Arrow table, nested columns as JSON text named in the schema metadata."""
    frame = frame.reset_index(drop=True)
    json_columns = [str(c) for c in frame.columns if _is_nested(frame[c])]
    encoded = frame.copy()
    for column in json_columns:
        encoded[column] = [None if _plain(v) is None else json.dumps(v, ensure_ascii=False) for v in frame[column]]
    table = pa.Table.from_pandas(encoded, preserve_index=False)
    metadata = dict(table.schema.metadata or {})
    metadata[JSON_COLUMNS_KEY] = json.dumps(json_columns).encode()
    return table.replace_schema_metadata(metadata)


def from_arrow(table: pa.Table) -> pd.DataFrame:
    """The inverse of `to_arrow`."""
    json_columns = json.loads((table.schema.metadata or {}).get(JSON_COLUMNS_KEY, b"[]"))
    frame = table.to_pandas(integer_object_nulls=True)  # an int column with nulls stays ints, not floats
    for column in json_columns:
        frame[column] = pd.Series([None if _plain(v) is None else json.loads(v) for v in frame[column]], dtype=object)
    return frame


@contextmanager
def atomic_write(path: Path, mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary file beside `path`; on success it replaces `path` in one rename.

    A run killed mid-write leaves the previous file (or none), never a truncated one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def write_table(frame: pd.DataFrame, path: Path) -> None:
    """Write a DataFrame as Parquet atomically (see `atomic_write`)."""
    with atomic_write(path) as handle:
        pq.write_table(to_arrow(frame), handle)


def write_jsonl(records: Iterable[Mapping[str, Any]], path: Path) -> None:
    """Write records as JSON Lines atomically (see `atomic_write`)."""
    with atomic_write(path, "w") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def read_table(path: Path) -> pd.DataFrame:
    """Read a table written by `write_table`, nested columns decoded.

    Example:
        >>> frame = read_table(Path(".seedwheel/seed_tasks.parquet"))  # doctest: +SKIP
        >>> frame.loc[0, "prompt"][0]["role"]  # doctest: +SKIP
        'system'
    """
    return from_arrow(pq.read_table(path))
