"""The IO manager: every asset is a Parquet file at `<root>/<asset>.parquet` (partitions: `<root>/<asset>/<key>`).

The outputs of the ops inside a graph-backed asset (the shards of `validated_tasks`) are scratch of one run, at
`<root>/steps/<run id>/<step key>/<output>[/<mapping key>].parquet`: on a shared file system or object store every
step process reads them, and the asset that made them removes them once its own tables are stored
(`StorageRoot.remove_step_outputs`; on an object store, give the `steps/` prefix a lifecycle
rule instead).

`StorageRoot` is the same root for the data assets keep beside their tables (indexes, exports, caches, training
runs).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from upath import UPath

from core.cache_store import CacheStore
from core.database import DATABASE_URL_ENV
from core.errors import SeedwheelError
from core.folders import committed_folders, is_remote, modified, read_only_copy, working_copy
from core.state import StateStore
from core.tables import from_arrow, read_table, to_arrow, write_table
from curation.split_ledger import SplitLedger
from resources.folders import CHECKPOINT_CACHE_FOLDER, SPLITS_FOLDER, STEP_OUTPUTS_FOLDER


class ParquetTableIOManager(dg.UPathIOManager):
    """DataFrames as Parquet, nested columns lossless (see `core.tables`); local writes are atomic."""

    extension = ".parquet"

    def dump_to_path(self, context: dg.OutputContext, obj: pd.DataFrame, path: UPath) -> None:
        if not isinstance(obj, pd.DataFrame):
            what = (
                f"asset {context.asset_key.to_user_string()}" if context.has_asset_key else f"step {context.step_key}"
            )
            raise TypeError(f"{what} returned {type(obj).__name__}; the table storage writes DataFrames")
        store_table(obj, path)

    def load_from_path(self, context: dg.InputContext, path: UPath) -> pd.DataFrame:
        return load_table(path)

    def get_op_output_relative_path(self, context: dg.InputContext | dg.OutputContext) -> UPath:
        return UPath(STEP_OUTPUTS_FOLDER, *context.get_identifier())  # run id, step key, output (, mapping key)

    def get_metadata(self, context: dg.OutputContext, obj: pd.DataFrame) -> dict[str, dg.MetadataValue]:
        return {"dagster/row_count": dg.MetadataValue.int(len(obj))}


def store_table(frame: pd.DataFrame, path: UPath) -> None:
    """Write `frame` as Parquet at `path` so that readers see the previous table or the whole new one, never part.

    Locally a temporary file renamed into place (`core.tables.write_table`). On an object store the file is
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


def load_table(path: UPath) -> pd.DataFrame:
    """Read a table `store_table` wrote (a local path or an object-store URL), nested columns decoded."""
    if is_local(path):
        return read_table(Path(path.path))
    with path.open("rb") as handle:
        return from_arrow(pq.read_table(handle))


def is_local(path: UPath) -> bool:
    """Whether `path` is on this machine's file system (not an object store)."""
    return path.protocol in ("", "file", "local")


class TableStorage(dg.ConfigurableIOManagerFactory):
    """Parquet storage under `root`: a local folder or any fsspec URL (`s3://bucket/seedwheel`)."""

    root: str

    def create_io_manager(self, context: dg.InitResourceContext) -> ParquetTableIOManager:
        return ParquetTableIOManager(base_path=UPath(self.root))


class StorageError(SeedwheelError, ValueError):
    """The storage root cannot hold what a step asks of it (an object store without the database)."""


class StorageRoot(dg.ConfigurableResource):
    """The storage root, for the data assets keep beside their tables (indexes, exports, caches, training runs):
    the table storage's root (`TableStorage`), a local folder or an object-store URL
    (`s3://bucket/prefix`).

    Side-state folders and training run folders are read and written through `folder()`: the folder itself when
    local, a working copy committed back by manifest on an object store (`core.folders`). A checkpoint is named by
    its `location()`, a path or a URL, and loaded through `model_dir()`.
    """

    root: str
    # The production database (core.database): when the variable is set, the split ledger, the promotion record
    # and the run-level locks live there (`state()`); its URL holds a password, so only the name is configuration.
    database_url_env: str = DATABASE_URL_ENV

    @property
    def remote(self) -> bool:
        """Whether the root is an object store."""
        return is_remote(self.root)

    def folder(self, *parts: str) -> AbstractContextManager[Path]:
        """The folder `<root>/<parts>` as a local folder for the block: itself on a local root; on an object store
        a working copy, committed (by manifest) when the block succeeds (`core.folders`)."""
        return working_copy(self.location(*parts))

    @contextmanager
    def cache(self, *parts: str) -> Iterator[CacheStore]:
        """The content-keyed cache in folder `<root>/<parts>` (`core.cache_store`), through `folder()`."""
        with self.folder(*parts) as folder:
            yield CacheStore.open(folder)

    def location(self, *parts: str) -> str:
        """Where `<root>/<parts>` is, as a person reads it: a path, or a URL on an object store."""
        if self.remote:
            return "/".join([self.root.rstrip("/"), *parts])
        return str(Path(self.root, *parts))

    def model_dir(self, checkpoint: str) -> str:
        """A model to load `checkpoint` from: a local directory or hub id as it is; a checkpoint on an object store
        (a URL inside a committed run folder) as a read-only local copy under `<temp dir>/seedwheel-checkpoints/`,
        downloaded once per content and reused by every later caller on the machine (`core.folders`)."""
        if not is_remote(checkpoint):
            return checkpoint
        return str(read_only_copy(checkpoint, Path(tempfile.gettempdir(), CHECKPOINT_CACHE_FOLDER)))

    def state(self) -> StateStore:
        """Where the records overlapping runs share live and how they take turns (`core.state`): the database the
        variable names when it is set (read now, never at import), else files under the root and `flock`.

        Raises:
            StorageError: the root is an object store and no database is set (it has no locks to take turns by).
        """
        store = StateStore.from_env(variable=self.database_url_env)
        if self.remote and not store.in_database:
            raise StorageError(
                f"the storage root {self.root} is an object store, which cannot hold the split ledger, the promotion "
                "record or run-level locks",
                hint=f"set {self.database_url_env}=postgresql://user:password@host/db (they live there then)",
            )
        return store

    def split_ledger(self) -> SplitLedger:
        """The split ledger: `<root>/splits/`, or its tables in the database (`state()`)."""
        store = self.state()  # on an object store always the database, whose tables leave the folder unused
        return SplitLedger(Path(self.root, SPLITS_FOLDER), store)

    def remove_step_outputs(self, run_id: str, graph: str) -> None:
        """Delete the outputs the ops of graph-backed asset `graph` stored in run `run_id`, once the asset's own
        tables are stored: they are that run's scratch, and would otherwise pile up night after night. A run
        that fails before keeps them, for a re-execution from the failed step."""
        prefix = f"{graph}."  # step keys are `<graph>.<op>` or `<graph>.<op>[<mapping key>]`
        if self.remote:  # objects, no folders: delete the step outputs' files
            run = UPath(self.location(STEP_OUTPUTS_FOLDER, run_id))
            files = [f for f in run.fs.find(run.path) if f[len(run.path) :].lstrip("/").startswith(prefix)]
            if files:
                run.fs.rm(files)
            return
        folder = Path(self.location(STEP_OUTPUTS_FOLDER, run_id))
        for step in folder.glob(f"{prefix}*"):
            shutil.rmtree(step)
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()

    def prune(self, *, keep: int = 2, min_age_s: float = 86_400.0, now: float | None = None) -> list[dict[str, Any]]:
        """Delete the root's garbage once it is older than `min_age_s`, and say what went.

        - On an object store, each committed folder's superseded manifests (all but the newest `keep`) and the
          objects no remaining manifest names: uploads of killed commits, files of old generations
          (`core.folders.RemoteFolder.prune`, which says why the age makes it safe).
        - On either kind of root, the step outputs of runs that failed before their merge (`steps/<run id>/`,
          kept until then for a re-execution from the failed step).

        Returns:
            A row per place that had garbage: `what` (its location), `manifests`, `objects` (files), `bytes`.
        """
        now = time.time() if now is None else now
        rows = []
        if self.remote:
            for folder in committed_folders(self.root):
                pruned = folder.prune(keep=keep, min_age_s=min_age_s, now=now)
                if pruned.manifests or pruned.objects:
                    rows.append({"what": folder.url, **asdict(pruned)})
        steps = UPath(self.location(STEP_OUTPUTS_FOLDER))
        runs: dict[str, list[dict[str, Any]]] = {}
        for name, info in (steps.fs.find(steps.path, detail=True) if steps.exists() else {}).items():
            runs.setdefault(name[len(steps.path) :].lstrip("/").split("/", 1)[0], []).append(info)
        for run, files in sorted(runs.items()):
            if now - max(modified(info) for info in files) >= min_age_s:
                steps.fs.rm(str(steps / run), recursive=True)
                size = sum(int(info["size"]) for info in files)
                rows.append(
                    {
                        "what": self.location(STEP_OUTPUTS_FOLDER, run),
                        "manifests": 0,
                        "objects": len(files),
                        "bytes": size,
                    }
                )
        return rows
