"""The IO manager: every asset is a Parquet file at `<root>/<asset>.parquet` (partitions: `<root>/<asset>/<key>`).

The outputs of the ops inside a graph-backed asset (the shards of `validated_tasks`) are scratch of one run, at
`<root>/steps/<run id>/<step key>/<output>[/<mapping key>].parquet`: on a shared file system or object store every
step process reads them, and the asset that made them removes them once its own tables are stored
(`pipeline.resources.StorageRoot.remove_step_outputs`; on an object store, give the `steps/` prefix a lifecycle
rule instead).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from upath import UPath

from validators.tables import from_arrow, read_table, to_arrow, write_table

STEP_OUTPUTS_FOLDER = "steps"  # op outputs inside graph-backed assets, per run (see the module docstring)


class ParquetTableIOManager(dg.UPathIOManager):
    """DataFrames as Parquet, nested columns lossless (see `validators.tables`); local writes are atomic."""

    extension = ".parquet"

    def dump_to_path(self, context: dg.OutputContext, obj: pd.DataFrame, path: UPath) -> None:
        if not isinstance(obj, pd.DataFrame):
            what = (
                f"asset {context.asset_key.to_user_string()}" if context.has_asset_key else f"step {context.step_key}"
            )
            raise TypeError(f"{what} returned {type(obj).__name__}; the table storage writes DataFrames")
        store_table(obj, path)

    def load_from_path(self, context: dg.InputContext, path: UPath) -> pd.DataFrame:
        if is_local(path):
            return read_table(Path(path.path))
        with path.open("rb") as handle:
            return from_arrow(pq.read_table(handle))

    def get_op_output_relative_path(self, context: dg.InputContext | dg.OutputContext) -> UPath:
        return UPath(STEP_OUTPUTS_FOLDER, *context.get_identifier())  # run id, step key, output (, mapping key)

    def get_metadata(self, context: dg.OutputContext, obj: pd.DataFrame) -> dict[str, dg.MetadataValue]:
        return {"dagster/row_count": dg.MetadataValue.int(len(obj))}


def store_table(frame: pd.DataFrame, path: UPath) -> None:
    """Write `frame` as Parquet at `path` so that readers see the previous table or the whole new one, never part.

    Locally a temporary file renamed into place (`validators.tables.write_table`). On an object store the file is
    built in memory and sent in one request (a multipart upload above 100 MB, which the store makes visible only
    once complete): a write that fails or is killed leaves the previous object. Not a streamed write: fsspec's
    file objects upload what they hold when closed, also when closed by an exception.
    """
    if is_local(path):
        write_table(frame, Path(path.path))
        return
    sink = pa.BufferOutputStream()
    pq.write_table(to_arrow(frame), sink)
    path.fs.pipe_file(path.path, sink.getvalue().to_pybytes())


def is_local(path: UPath) -> bool:
    """Whether `path` is on this machine's file system (not an object store)."""
    return path.protocol in ("", "file", "local")


class TableStorage(dg.ConfigurableIOManagerFactory):
    """Parquet storage under `root`: a local folder or any fsspec URL (`s3://bucket/seedwheel`)."""

    root: str

    def create_io_manager(self, context: dg.InitResourceContext) -> ParquetTableIOManager:
        return ParquetTableIOManager(base_path=UPath(self.root))
