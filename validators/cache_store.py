"""A persisted map from content keys to JSON values, for work a night need not redo (validation, generation).

One folder per cache (the pipeline uses `<storage root>/validation_cache/` and `<storage root>/generation_cache/`):

```
entries.jsonl   line 1: {"format": 1, "entries": <n>, "sha256": <hex of the rest of the file>}
                then one JSON line `[key, value]` per entry, sorted by key
.lock           held while a run writes (core.state.file_lock)
```

- **Atomic**: the file is replaced whole (`validators.tables.atomic_write`: a temporary file, then a rename), so a
  run killed mid-write leaves the previous file, never a half-written one.
- **Never trusted when damaged**: a file whose header, checksum, entry count or lines do not check out (truncated,
  garbled, written by another format) is discarded when it is read: the cache starts empty, `rebuilt` is True,
  `rebuild_reason` says why and a warning is logged; the next `commit` writes a sound file.
- **Overlapping runs**: `commit` holds the lock, reads the entries another run committed since this one read the
  file, and writes the union. Values are deterministic for their key, so which run wrote an entry does not matter.
- **Crash resume**: `put` commits every `COMMIT_EVERY` new entries, so a killed run loses at most that much work
  (callers also commit in a `finally`); the temporary file a killed writer leaves is removed by the next commit.

The whole file is read when a cache opens and rewritten at each commit, which suits the sizes measured by
`bench/bench_incremental_validation.py` (~70 bytes per verdict, ~12 KB per generated parent: 1,337 parents make
16 MB). Entries are never evicted: keys of tasks that no longer exist stay. Delete the folder to start over; the
next run recomputes everything.
"""

from __future__ import annotations

import hashlib
import json
import logging
from functools import lru_cache
from pathlib import Path
from typing import Any

from core import SeedwheelError
from core.state import file_lock
from validators.tables import atomic_write

logger = logging.getLogger(__name__)

FORMAT = 1
ENTRIES = "entries.jsonl"
LOCK = ".lock"
COMMIT_EVERY = 1000  # new entries between automatic commits: what a killed run can lose
LOAD_ERRORS = (OSError, ValueError, TypeError, KeyError)  # what a damaged file raises while it is read


class CacheCorruptError(SeedwheelError, ValueError):
    """A cache file that is truncated, garbled or of another format."""


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """Which version of the file is on disk (inode, size, mtime): a rename by another run changes it."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _encode(entries: dict[str, Any]) -> bytes:
    body = b"".join(
        json.dumps([key, entries[key]], separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        for key in sorted(entries)
    )
    header = {"format": FORMAT, "entries": len(entries), "sha256": hashlib.sha256(body).hexdigest()}
    return json.dumps(header).encode() + b"\n" + body


def _decode(data: bytes) -> dict[str, Any]:
    head, newline, body = data.partition(b"\n")
    if not newline:
        raise CacheCorruptError("no header line")
    header = json.loads(head)
    if header.get("format") != FORMAT:
        raise CacheCorruptError(f"format is {header.get('format')!r}, expected {FORMAT}")
    if hashlib.sha256(body).hexdigest() != header.get("sha256"):
        raise CacheCorruptError("checksum mismatch: the file is truncated or was altered")
    entries = {}
    for line in body.splitlines():
        key, value = json.loads(line)
        entries[str(key)] = value
    if len(entries) != header.get("entries"):
        raise CacheCorruptError(f"{len(entries)} entries, the header says {header.get('entries')}")
    return entries


class CacheStore:
    """Key -> JSON value, persisted in one checksummed file; see the module docstring.

    Attributes:
        folder: where the file and its lock live.
        rebuilt: True when the stored file was damaged and discarded.
        rebuild_reason: why, or None.
        hits: `get` calls that found their key.
        misses: `get` calls that did not.

    Example:
        >>> import tempfile
        >>> store = CacheStore.open(Path(tempfile.mkdtemp()))
        >>> store.put("k", {"problems": []})
        >>> store.commit(), CacheStore.open(store.folder).get("k")
        (1, {'problems': []})
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.rebuilt = False
        self.rebuild_reason: str | None = None
        self.hits = 0
        self.misses = 0
        self._entries: dict[str, Any] = {}
        self._staged: dict[str, Any] = {}
        self._stamp: tuple[int, int, int] | None = None

    @property
    def path(self) -> Path:
        return self.folder / ENTRIES

    @classmethod
    def open(cls, folder: Path) -> CacheStore:
        """The cache in `folder` (empty when there is none yet; a damaged file is discarded, see `rebuilt`)."""
        store = cls(folder)
        store._stamp = _stamp(store.path)
        if store._stamp is not None:
            try:
                store._entries = _decode(store.path.read_bytes())
            except LOAD_ERRORS as error:
                store._discard(f"{type(error).__name__}: {error}")
        return store

    def _discard(self, reason: str) -> None:
        self.rebuilt, self.rebuild_reason = True, reason
        self._entries = {}
        logger.warning("cache %s is damaged (%s): not trusted, rebuilt from scratch", self.path, reason)

    def __len__(self) -> int:
        return len(self._entries.keys() | self._staged.keys())

    def get(self, key: str) -> Any | None:
        """The value stored under `key`, or None (counted in `hits` / `misses`)."""
        value = self._staged.get(key, self._entries.get(key))
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def put(self, key: str, value: Any) -> None:
        """Stage a JSON-serialisable value (not None) under `key`; committed by `commit`, or every `COMMIT_EVERY`."""
        self._staged[key] = value
        if len(self._staged) >= COMMIT_EVERY:
            self.commit()

    def commit(self) -> int:
        """Write the staged entries, merged with any another run committed meanwhile; returns how many were staged."""
        if not self._staged and not self.rebuilt:
            return 0
        with file_lock(self.folder / LOCK):
            # Writes happen only under the lock, so a temporary file seen now is a killed writer's: remove it.
            for stale in self.folder.glob(f".{ENTRIES}.*.tmp"):
                stale.unlink(missing_ok=True)
            stamp = _stamp(self.path)
            if stamp is not None and stamp != self._stamp:  # another run committed since this one read the file
                try:
                    self._entries = {**_decode(self.path.read_bytes()), **self._entries}
                except LOAD_ERRORS as error:
                    self._discard(f"{type(error).__name__}: {error}")
            self._entries.update(self._staged)
            with atomic_write(self.path) as handle:
                handle.write(_encode(self._entries))
            self._stamp = _stamp(self.path)
        written, self._staged = len(self._staged), {}
        return written


def file_digest(path: Path) -> str | None:
    """SHA-256 of a file's bytes, or None when it does not exist; remembered per (path, inode, size, mtime).

    Example:
        >>> file_digest(Path("/nonexistent")) is None
        True
    """
    stamp = _stamp(path)
    return None if stamp is None else _digest(str(path), *stamp)


@lru_cache(maxsize=1024)
def _digest(path: str, inode: int, size: int, mtime_ns: int) -> str:
    # inode, size and mtime are in the key only so that a changed file is read again.
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()
