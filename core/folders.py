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
leaves objects no manifest names, which no reader sees; `RemoteFolder.prune` (`seedwheel prune`) deletes them
and superseded manifests once no reader or commit can still need them.

`working_copy(location)` is the whole protocol for a step: for a local folder it is the folder itself (files are
renamed into place there: `core.tables.atomic_write`); for an object store, a temporary folder holding the
committed files, committed back when the block succeeds and deleted either way.

`read_only_copy(url, cache)` is the reader's side for large, write-once contents such as a trained model: the
committed files under `url` (a committed folder, or a folder inside one: `<run>/final`) downloaded once into
`<cache>/<digest of their manifest entries>`, which every later reader on the machine finds and reuses.

Credentials and endpoints come from the store's usual environment (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`, ...),
never from seedwheel's configuration.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class Pruned:
    """What `RemoteFolder.prune` deleted: manifests, objects, and the objects' bytes."""

    manifests: int = 0
    objects: int = 0
    bytes: int = 0


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
        self.download(manifest.files, dest)
        return manifest

    def download(self, files: Mapping[str, str], dest: Path) -> None:
        """Download `files` (path in `dest` -> the SHA-256 of a committed object) into `dest`."""
        for relative, digest in files.items():
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(self._object(digest), str(target))

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
        named = set(base.files.values())
        for relative, digest in changes.items():
            # An object `base` names stays while a reader may need it (`prune`); any other is uploaded again, even
            # if it is there: an unnamed one may be pruned before this commit names it, and the upload renews it.
            if digest is not None and digest not in named:
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

    def prune(self, *, keep: int = 2, min_age_s: float = 86_400.0, now: float | None = None) -> Pruned:
        """Delete what no reader can still need: old manifests, and objects no remaining manifest names.

        A reader reads the newest manifest, then downloads the objects it names; a commit uploads its objects,
        then writes its manifest. So:

        - the newest `keep` manifests stay, and an older one goes only once the one after it is older than
          `min_age_s` (anyone who read it as the newest did so that long ago);
        - an object no remaining manifest names goes only once it is older than `min_age_s` (a younger one may
          be an upload whose commit has not come yet).

        Args:
            keep: the newest manifests always kept, at least 1.
            min_age_s: seconds, longer than any step takes to check out or commit (default a day).
            now: the current time (seconds since the epoch; tests pass a later one to age the store).

        Returns:
            What was deleted, and the bytes it held.
        """
        if keep < 1:
            raise ValueError(f"keep ({keep}) must be at least 1: the newest manifest is the folder")
        now = time.time() if now is None else now
        names = self._manifest_names()
        paths = [f"{self.root}/{MANIFESTS}/{name}" for name in names]
        old = [
            path
            for path, successor in pairwise(paths[: max(len(paths) - keep + 1, 0)])  # each but the newest `keep`
            if now - modified(self.fs.info(successor)) >= min_age_s
        ]
        named = {
            digest
            for path in paths
            if path not in old
            for digest in json.loads(self.fs.cat_file(path))["files"].values()
        }
        try:
            objects = self.fs.ls(f"{self.root}/{OBJECTS}", detail=True, refresh=True)
        except FileNotFoundError:
            objects = []
        unnamed = [
            entry
            for entry in objects
            if entry["name"].rsplit("/", 1)[-1] not in named and now - modified(entry) >= min_age_s
        ]
        for path in old:
            self.fs.rm_file(path)
        if unnamed:
            self.fs.rm([entry["name"] for entry in unnamed])
        return Pruned(len(old), len(unnamed), sum(int(entry["size"]) for entry in unnamed))

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


def read_only_copy(url: str, cache: Path, *, setting: str = "SEEDWHEEL_HOME") -> Path:
    """A local, read-only copy of the committed files under `url`, kept in `cache` by their content.

    `url` is a committed folder or a folder inside one (`s3://bucket/root/training/sft/<digest>/final`): the
    nearest folder above it with a manifest holds it. The copy is `<cache>/<key>`, the key a digest of the files'
    paths and contents as that manifest names them, so a second reader (in this process or another) finds it and
    downloads nothing, and a newer commit of other contents gets a copy of its own. It is downloaded beside and
    renamed into place, so a copy in the cache is always whole; its files are made read-only.

    Raises:
        FileNotFoundError: no committed folder holds `url`, or it holds no file under it.

    Example:
        >>> read_only_copy("s3://bucket/root/training/sft/0a1b/final", Path("/tmp/models"))  # doctest: +SKIP
        PosixPath('/tmp/models/5d41402abc4b2a76b9719d911017c592')
    """
    folder, manifest, inside = _holder(url, setting)
    prefix = f"{inside}/" if inside else ""
    files = {name.removeprefix(prefix): digest for name, digest in manifest.files.items() if name.startswith(prefix)}
    if not files:
        raise FileNotFoundError(f"{url}: generation {manifest.generation} of {folder.url} has no file under it")
    key = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:32]
    copy = cache / key
    if copy.is_dir():
        return copy
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{key}-", dir=cache) as scratch:
        staging = Path(scratch, key)
        folder.download(files, staging)
        for path in staging.rglob("*"):
            if path.is_file():
                path.chmod(0o444)
        try:
            staging.rename(copy)
        except OSError:  # another reader renamed the same contents into place first
            if not copy.is_dir():
                raise
    return copy


def _holder(url: str, setting: str) -> tuple[RemoteFolder, Manifest, str]:
    """The committed folder that holds `url` (itself or the nearest above it, within the bucket), its newest
    manifest, and `url`'s path inside it."""
    scheme, _, path = url.rstrip("/").partition("://")
    parts = path.split("/")
    for cut in range(len(parts), 1, -1):
        folder = RemoteFolder(f"{scheme}://{'/'.join(parts[:cut])}", setting=setting)
        manifest = folder.latest()
        if manifest.generation:
            return folder, manifest, "/".join(parts[cut:])
    raise FileNotFoundError(
        f"{url}: no committed folder holds it (a folder is committed when the step that wrote it succeeds)"
    )


def committed_folders(url: str, *, setting: str = "SEEDWHEEL_HOME") -> list[RemoteFolder]:
    """Every committed folder under `url` (each folder with a `manifests/` of its own), for pruning them all."""
    top = RemoteFolder(url, setting=setting)
    scheme = top.url.partition("://")[0]
    marker = f"/{MANIFESTS}/"
    found = {path.rsplit(marker, 1)[0] for path in top.fs.find(top.root) if marker in path and path.endswith(".json")}
    return [RemoteFolder(f"{scheme}://{folder}", setting=setting) for folder in sorted(found)]


def modified(info: Mapping[str, Any]) -> float:
    """A file's last-modified time (seconds since the epoch), from an fsspec `info` / `ls` / `find` entry of an
    object store (`LastModified`) or a local file system (`mtime`)."""
    return float(info["LastModified"].timestamp() if "LastModified" in info else info["mtime"])


def _digest(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
