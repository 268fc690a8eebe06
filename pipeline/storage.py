"""The IO manager: every asset is a Parquet file at `<root>/<asset>.parquet` (partitions: `<root>/<asset>/<key>`)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pandas as pd
import pyarrow.parquet as pq
from upath import UPath

from validators.tables import from_arrow, read_table, to_arrow, write_table


class ParquetTableIOManager(dg.UPathIOManager):
    """DataFrames as Parquet, nested columns lossless (see `validators.tables`); local writes are atomic."""

    extension = ".parquet"

    def dump_to_path(self, context: dg.OutputContext, obj: pd.DataFrame, path: UPath) -> None:
        if not isinstance(obj, pd.DataFrame):
            asset = context.asset_key.to_user_string()
            raise TypeError(f"asset {asset} returned {type(obj).__name__}; the table storage writes DataFrames")
        if is_local(path):
            write_table(obj, Path(path.path))
        else:  # object stores replace an object in one PUT, so a plain write is already atomic
            with path.open("wb") as handle:
                pq.write_table(to_arrow(obj), handle)

    def load_from_path(self, context: dg.InputContext, path: UPath) -> pd.DataFrame:
        if is_local(path):
            return read_table(Path(path.path))
        with path.open("rb") as handle:
            return from_arrow(pq.read_table(handle))

    def get_metadata(self, context: dg.OutputContext, obj: pd.DataFrame) -> dict[str, dg.MetadataValue]:
        return {"dagster/row_count": dg.MetadataValue.int(len(obj))}


def is_local(path: UPath) -> bool:
    """Whether `path` is on this machine's file system (not an object store)."""
    return path.protocol in ("", "file", "local")


class TableStorage(dg.ConfigurableIOManagerFactory):
    """Parquet storage under `root`: a local folder or any fsspec URL (`s3://bucket/seedwheel`)."""

    root: str

    def create_io_manager(self, context: dg.InitResourceContext) -> ParquetTableIOManager:
        return ParquetTableIOManager(base_path=UPath(self.root))
