"""The table storage on an S3-compatible server (moto on loopback): real materializations, nested columns kept,
and a write that fails leaves the previous table whole."""

import dagster as dg
import pandas as pd
import pytest
from upath import UPath

from core.signals import dispositions_kept
from resources.storage import ParquetTableIOManager, TableStorage, store_table


@dg.asset
def nested() -> pd.DataFrame:
    return pd.DataFrame({"task_id": ["a", "b"], "lineage": [{"root": "a"}, {"root": "a", "depth": [1, 2]}]})


@dg.asset
def depth(nested: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"task_id": nested["task_id"], "depth": [len(v.get("depth", [])) for v in nested["lineage"]]})


def test_assets_on_s3_round_trip_nested_columns_through_a_real_materialization(s3_bucket):
    root = f"s3://{s3_bucket}/seedwheel"
    with dispositions_kept():  # as pipeline.runs.materialize: a run rewrites the stop signals' handlers
        result = dg.materialize([nested, depth], resources={"io_manager": TableStorage(root=root)})
    assert result.success
    stored = ParquetTableIOManager(base_path=UPath(root)).load_from_path(None, UPath(root) / "nested.parquet")
    assert stored["lineage"].tolist() == [{"root": "a"}, {"root": "a", "depth": [1, 2]}]
    assert result.output_for_node("depth")["depth"].tolist() == [0, 2]


def test_a_write_that_fails_leaves_the_previous_table_whole(s3_bucket):
    path = UPath(f"s3://{s3_bucket}/seedwheel/train_tasks.parquet")
    store_table(pd.DataFrame({"task_id": ["a"]}), path)
    with pytest.raises(Exception, match="int"):  # pyarrow cannot put an int and a string in one column
        store_table(pd.DataFrame({"task_id": [1, "b"]}), path)
    reader = ParquetTableIOManager(base_path=path.parent)
    assert reader.load_from_path(None, path)["task_id"].tolist() == ["a"]
