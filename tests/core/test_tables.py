"""Tables on disk: nested fields round-trip exactly, and a crash mid-write never leaves a broken file."""

import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core import tables
from core.tables import frame_from_records, read_table, records_from_frame, write_table

RECORDS = [
    {
        "task_id": "a" * 16,
        "prompt": [{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": "Ünïcode ✓"}],
        # Params differ in shape per family: a struct column would merge and null-pad these keys.
        "verifier": {"name": "json_schema", "version": 1, "params": {"schema": {"type": "object"}, "expected": {}}},
        "reference": None,
        "difficulty": 3,
        "tags": [],
        "score": 0.5,
    },
    {
        "task_id": "b" * 16,
        "prompt": [{"role": "user", "content": "SELECT?"}],
        "verifier": {"name": "sql_result", "version": 2, "params": {"gold_query": "SELECT 1", "ordered": True}},
        "reference": "SELECT 1",
        "difficulty": None,
        "tags": ["sql", "easy"],
        "score": None,
    },
]


def test_nested_fields_round_trip_losslessly(tmp_path):
    path = tmp_path / "t.parquet"
    write_table(frame_from_records(RECORDS), path)
    back = records_from_frame(read_table(path))
    assert back == RECORDS
    assert json.dumps(back) == json.dumps(RECORDS)  # types too: 3 stays 3, not 3.0


def test_nested_columns_are_json_text_for_other_readers(tmp_path):
    # pandas/DuckDB users without seedwheel see JSON text they can parse, listed in the schema metadata.
    path = tmp_path / "t.parquet"
    write_table(frame_from_records(RECORDS), path)
    raw = pq.read_table(path)
    assert raw.schema.field("verifier").type in (pa.string(), pa.large_string())
    assert raw.schema.field("difficulty").type == pa.int64()  # an int column with a null stays int
    assert raw.schema.metadata[b"seedwheel.json_columns"] == b'["prompt", "verifier", "tags"]'


def test_empty_table_keeps_its_columns(tmp_path):
    path = tmp_path / "t.parquet"
    write_table(frame_from_records([], columns=["task_id", "reason"]), path)
    assert list(read_table(path).columns) == ["task_id", "reason"]


def test_crash_mid_write_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "t.parquet"
    write_table(frame_from_records(RECORDS[:1]), path)

    def crash(table, handle):
        handle.write(b"PAR1 half a file")
        raise KeyboardInterrupt  # as if the run were killed

    monkeypatch.setattr(tables.pq, "write_table", crash)
    with pytest.raises(KeyboardInterrupt):
        write_table(frame_from_records(RECORDS), path)
    monkeypatch.undo()
    assert len(read_table(path)) == 1  # the old, complete file
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]  # no temp file left behind


def test_plain_columns_stay_native(tmp_path):
    path = tmp_path / "t.parquet"
    write_table(pd.DataFrame({"n": [1, 2], "s": ["x", "y"]}), path)
    schema = pq.read_schema(path)
    assert str(schema.field("n").type) == "int64"
    assert read_table(path)["n"].tolist() == [1, 2]
