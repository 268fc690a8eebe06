"""Where the flywheel's inputs come from: the curated seed sets, and the inbox production logs arrive in."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import IO

import dagster as dg
from upath import UPath

from core.cache_store import CacheStore
from resources.storage import is_local
from validators.registry import VerifyContext
from validators.seeds import SeedSet, load_seeds


class SeedRepository(dg.ConfigurableResource):
    """The curated seed sets under version control: `<path>/<family>/*.jsonl|yaml`."""

    path: str

    @property
    def folder(self) -> Path:
        return Path(self.path)

    def verify_context(self) -> VerifyContext:
        """Verifier fixture paths (SQLite files) in seeds resolve against the seeds folder."""
        return VerifyContext(seeds_dir=self.folder)

    def load(self, cache: CacheStore | None = None) -> SeedSet:
        """Load and check every seed file (an unchanged seed's verdict comes from `cache`, when given); origins
        are shown relative to the seeds folder's parent."""
        if not self.folder.is_dir():
            raise FileNotFoundError(f"seeds folder {self.folder} does not exist: set SEEDWHEEL_SEEDS or `path`")
        return load_seeds([self.folder], root=self.folder.parent, context=self.verify_context(), cache=cache)


class FailureInbox(dg.ConfigurableResource):
    """Where production failure logs arrive (`*.jsonl`): a local folder, or any fsspec URL (`s3://bucket/inbox`).

    A raw log leaves the inbox once its redacted records are stored (`retire`): deleted, or moved under
    `quarantine` when one is set (`SEEDWHEEL_FAILURE_QUARANTINE`, a folder or URL outside the project's folders).
    """

    path: str
    quarantine: str = ""  # empty: delete raw logs once redacted

    def _folder(self) -> UPath:
        return UPath(self.path)

    def files(self) -> list[tuple[str, str]]:
        """`(file name, "size:mtime")` of every log in the inbox, by name; the stamp changes when a file does."""
        folder = self._folder()
        if not folder.exists():
            return []
        return [(entry.name, _stamp(entry)) for entry in sorted(folder.glob("*.jsonl"), key=lambda p: p.name)]

    def stamp(self, name: str) -> str:
        """One log's `"size:mtime"`, as `files` gives it."""
        return _stamp(self._log(name))

    def open(self, name: str) -> IO[bytes]:
        """One log, opened for reading in binary (an iterable of lines: long lines are not read whole into memory,
        non-UTF-8 bytes reach the parser, which rejects those lines with their number)."""
        return self._log(name).open("rb")

    def deliver(self, name: str, data: bytes) -> UPath:
        """Put a whole log into the inbox as `name`, as an app should: written beside it under a name the sensor
        ignores, then renamed in (one request on an object store), so no tick sees half a file."""
        folder = self._folder()
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / name
        if not is_local(target):
            target.fs.pipe_file(target.path, data)
            return target
        partial = folder / f".{name}.partial"
        partial.write_bytes(data)
        os.replace(partial.path, target.path)
        return target

    def retire(self, name: str, stamp: str, run_id: str) -> str | None:
        """Take a log whose redacted records are stored out of the inbox: delete it, or move it to
        `<quarantine>/<run_id>/<name>`.

        Returns:
            What became of it (`deleted`, or `moved to <path>`); None when its stamp is no longer `stamp` (it grew
            or was replaced since it was read): it is left for the run its new stamp gets from the sensor.
        """
        log = self._log(name)
        if _stamp(log) != stamp:
            return None
        if not self.quarantine:
            log.unlink()
            return "deleted"
        target = UPath(self.quarantine) / run_id / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if is_local(log) and is_local(target):
            shutil.move(log.path, target.path)  # a rename on one file system
        else:
            with log.open("rb") as source, target.open("wb") as copy:
                shutil.copyfileobj(source, copy)
            log.unlink()
        return f"moved to {target}"

    def _log(self, name: str) -> UPath:
        path = self._folder() / name
        if not path.exists():
            raise FileNotFoundError(
                f"failure log {path} is not in the inbox: put it there, or `seedwheel failures ingest` it. A log "
                "leaves the inbox once its redacted records are stored (deleted, or moved to "
                "SEEDWHEEL_FAILURE_QUARANTINE), so its failure_logs partition already holds them"
            )
        return path


def _stamp(path: UPath) -> str:
    stat = path.stat()
    return f"{stat.st_size}:{int(stat.st_mtime)}"
