"""Folders on an object store (`s3://bucket/prefix/...`), read and written through a local working copy and
committed back atomically by a manifest.

Object stores have no rename, so a folder's new files cannot be swapped in at once as on a file system, and a
reader listing a folder mid-upload would see half of a commit. A folder here is instead:

```
<url>/objects/<sha256>                 each file's bytes, stored once by content, never changed
<url>/manifests/000000000042.json      generation 42: {"generation": 42, "files": {"a/b.parquet": "<sha256>", ...}}
```

The manifest with the highest generation *is* the folder; readers see only the files it names. A commit uploads
the objects the store lacks, then creates the next generation's manifest with a create-only write (S3's
`If-None-Match: *`), which the store grants to exactly one of two concurrent commits. The other re-reads the new
manifest, applies its own changes on top (the files it added, changed or removed since its checkout) and tries
the next generation; a file both changed is a `FolderConflict`, never a silent loss. A run killed mid-commit
leaves objects no manifest names, which no reader sees.

`working_copy(location)` is the whole protocol for a step: for a local folder it is the folder itself (files are
renamed into place there: `validators.tables.atomic_write`); for an object store, a temporary folder holding the
committed files, committed back when the block succeeds and deleted either way.

Credentials and endpoints come from the store's usual environment (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`, ...),
never from seedwheel's configuration.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import SeedwheelError

OBJECTS = "objects"
MANIFESTS = "manifests"
# Commits that lose the race this many times in a row give up (each loss means another commit went through).
MAX_ATTEMPTS = 50


class StoreUnavailable(SeedwheelError, OSError):
    """The object store cannot be used as asked: a bucket that does not exist, a protocol without create-only
    writes, a missing driver."""


class FolderConflict(SeedwheelError, RuntimeError):
    """Two commits changed the same file of a folder since they checked it out; the later one is refused."""


def is_remote(location: str | os.PathLike[str]) -> bool:
    """Whether `location` is an object-store URL (`s3://...`) rather than a local path (or `file://` URL).

    Example:
        >>> is_remote("s3://bucket/seedwheel"), is_remote("/data/seedwheel"), is_remote("file:///data")
        (True, False, False)
    """
    text = str(location)
    return "://" in text and not text.startswith("file://")


@dataclass(frozen=True)
class Manifest:
    """One committed state of a folder.

    Attributes:
        generation: the commit's number (0: nothing committed yet).
        files: each file's path inside the folder (`/`-separated) -> the SHA-256 of its bytes.
    """

    generation: int = 0
    files: dict[str, str] = field(default_factory=dict)


class RemoteFolder:
    """A folder on an object store (see the module docstring).

    Args:
        url: e.g. `s3://bucket/seedwheel/dedup_index`.
        setting: what the URL came from, for messages (e.g. "SEEDWHEEL_HOME").
    """

    def __init__(self, url: str, *, setting: str = "SEEDWHEEL_HOME") -> None:
        self.url = url.rstrip("/")
        self.setting = setting
        try:
            from fsspec.core import url_to_fs

            self.fs, self.root = url_to_fs(self.url)
        except ImportError as exc:  # fsspec names the package a protocol needs (s3fs for s3://)
            raise StoreUnavailable(
                f"{self.setting}: {self.url} needs a driver that is not installed ({exc})",
                hint="pip install 'seedwheel[s3]' for s3:// URLs",
            ) from exc
        if self.fs.protocol[0] not in ("s3", "s3a"):
            raise StoreUnavailable(
                f"{self.setting}: {self.url}: folders commit by a create-only write, which seedwheel does for S3 and "
                "S3-compatible stores (s3://, with AWS_ENDPOINT_URL for MinIO, R2, Ceph) only",
                hint="use an s3:// URL or a local folder",
            )

    def latest(self) -> Manifest:
        """The folder's newest committed state (generation 0 and no files when nothing was committed)."""
        names = self._manifest_names()
        if not names:
            return Manifest()
        record = json.loads(self.fs.cat_file(f"{self.root}/{MANIFESTS}/{names[-1]}"))
        return Manifest(int(record["generation"]), dict(record["files"]))

    def checkout(self, dest: Path) -> Manifest:
        """Download the committed files into `dest` (an empty folder); the state they are."""
        manifest = self.latest()
        for relative, digest in manifest.files.items():
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(self._object(digest), str(target))
        return manifest

    def commit(self, source: Path, base: Manifest) -> Manifest:
        """Commit the files under `source`, a working copy checked out at `base`, as the next generation.

        Only what changed since `base` is applied, over whatever other commits added meanwhile.

        Raises:
            FolderConflict: a file this working copy changed was also changed by a commit since `base`.
        """
        files = {p.relative_to(source).as_posix(): _digest(p) for p in sorted(source.rglob("*")) if p.is_file()}
        changes: dict[str, str | None] = {k: v for k, v in files.items() if base.files.get(k) != v}
        changes.update({k: None for k in base.files if k not in files})
        if not changes:
            return base
        for relative, digest in changes.items():
            if digest is not None and not self.fs.exists(self._object(digest)):
                self.fs.put_file(str(source / relative), self._object(digest))
        latest = base
        for _ in range(MAX_ATTEMPTS):
            if latest.generation != base.generation:
                # Changed by both, to different contents (the same change twice is no conflict).
                clashes = sorted(k for k, v in changes.items() if latest.files.get(k) not in (base.files.get(k), v))
                if clashes:
                    raise FolderConflict(
                        f"{self.url}: {', '.join(clashes[:5])} changed in generation {latest.generation} by another "
                        "run since this one read the folder",
                        hint="run the step again; it reads the newer state",
                    )
            merged = {**latest.files, **{k: v for k, v in changes.items() if v is not None}}
            for relative in (k for k, v in changes.items() if v is None):
                merged.pop(relative, None)
            manifest = Manifest(latest.generation + 1, dict(sorted(merged.items())))
            record = json.dumps({"generation": manifest.generation, "files": manifest.files}, indent=0)
            try:
                self.fs.pipe_file(self._manifest(manifest.generation), record.encode(), IfNoneMatch="*")
            except FileExistsError:  # another commit took this generation: apply ours over it
                latest = self.latest()
                continue
            return manifest
        raise FolderConflict(f"{self.url}: {MAX_ATTEMPTS} commits in a row went through before this one")

    def _manifest_names(self) -> list[str]:
        bucket = self.root.split("/", 1)[0]
        try:
            entries = self.fs.ls(f"{self.root}/{MANIFESTS}", detail=False, refresh=True)
        except FileNotFoundError:
            if not self.fs.exists(bucket):
                raise StoreUnavailable(
                    f"{self.setting}: the bucket of {self.url} does not exist",
                    hint=f"create it (aws s3 mb s3://{bucket}) or fix {self.setting}",
                ) from None
            return []
        return sorted(name.rsplit("/", 1)[-1] for name in entries if name.endswith(".json"))

    def _manifest(self, generation: int) -> str:
        return f"{self.root}/{MANIFESTS}/{generation:012d}.json"

    def _object(self, digest: str) -> str:
        return f"{self.root}/{OBJECTS}/{digest}"


@contextmanager
def working_copy(location: str | os.PathLike[str], *, setting: str = "SEEDWHEEL_HOME") -> Iterator[Path]:
    """A local folder to read and write `location` through, for the block (see the module docstring).

    A local `location` is yielded as it is (created if missing). An object-store URL is checked out into a
    temporary folder, committed back when the block ends without an exception, and deleted either way: a failed
    or killed step changes nothing readers see.
    """
    if not is_remote(location):
        path = Path(str(location).removeprefix("file://"))
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    folder = RemoteFolder(str(location), setting=setting)
    with tempfile.TemporaryDirectory(prefix="seedwheel-folder-") as scratch:
        base = folder.checkout(Path(scratch))
        yield Path(scratch)
        folder.commit(Path(scratch), base)


def _digest(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
