"""A persisted map from content keys to JSON values, for work a night need not redo (validation, generation).

One folder per cache (the pipeline uses `<storage root>/validation_cache/` and `<storage root>/generation_cache/`),
a set of append-only segments:

```
segments/20261204T031502123456Z-9f2c4e1a7b3d5f60.jsonl   one commit's new entries (UTC time, then random hex)
segments/compacted-<sha256>.jsonl                        earlier segments merged into one, named by its checksum
entries.jsonl         the single file of the format before segments (read as a segment, merged by the next commit)
.lock                 taken without waiting while a run compacts or deletes damaged segments (never to append)
```

Each segment is `line 1: {"format": 1, "entries": <n>, "sha256": <hex of the rest of the file>}`, then one JSON
line `[key, value]` per entry, sorted by key (the layout of the old single file, so that file reads as a segment).

- **Append-only**: `commit` writes the entries staged since the last commit as one new segment, under a name no
  other writer picks, renamed into place whole (`core.tables.atomic_write`); it never rewrites or waits on
  what others wrote. Overlapping runs, and the concurrent shard steps of one run, each add their own files. On an
  object store (a step's `core.folders.working_copy`) two steps therefore add files of different names, which
  merge without a `FolderConflict`.
- **Open reads the union** of the segments, oldest first (the old file, compacted segments, then commits in time
  order), a later segment winning for a key. The keys hash everything their value is computed from
  (`validators.tasks.verdict_key`, `generators.programmatic.variants_key`; what they leave out needs a version
  bump), so two segments holding one key hold the same value and the order only settles a tie that should not
  occur.
- **Damage is contained**: a segment whose header, checksum, entry count or lines do not check out (truncated,
  garbled, of another format) is dropped alone: its entries are recomputed, `rebuilt` is True, `rebuild_reason`
  names it and why, a warning is logged, and the next `commit` deletes it (only if its bytes are still the
  damaged ones it read).
- **Compaction**: when a run opened more than `COMPACT_AFTER` segments (or the old single file), its next `commit`
  merges the segments it read at open into one named by the SHA-256 of its content, then deletes exactly those
  segments: a segment added meanwhile is never deleted, and every deleted entry is in a file written before.
  Runs that read the same segments write the same bytes under the same name, so on an object store their
  compactions merge too (the same file added, the same files deleted). Compaction needs no lock to lose nothing:
  a file is deleted only by a run that wrote every entry of it into another file first, and a name that is a
  checksum holds the same entries whoever wrote it. On a local folder it still takes `.lock`, without waiting,
  so that when many shard steps pass the threshold together one compacts while the others go on appending (one
  that finds the lock held, or a segment it read already merged by another, leaves it to them), and so that a
  damaged segment is deleted only while no compaction can be rewriting that name. On an object store the lock
  reaches only the step's own working copy, and a step deleting a name another rewrote gets a `FolderConflict`.
- **Crash resume**: `put` commits every `COMMIT_EVERY` new entries, so a killed run loses at most that much work
  (callers also commit in a `finally`); a killed writer's temporary file is removed by a later commit once it is
  `STALE_TEMPORARY_S` old (a younger one may be a live writer's).

A commit costs its own new entries, whatever the cache holds (`bench/bench_cache_store.py`); an open reads the
whole cache (~70 bytes per verdict, ~12 KB per generated parent: 1,337 parents make 16 MB, measured by
`bench/bench_incremental_validation.py`). Entries are never evicted: keys of tasks that no longer exist stay.
Delete the folder to start over; the next run recomputes everything.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from core import SeedwheelError
from core.state import file_lock
from core.tables import atomic_write

logger = logging.getLogger(__name__)

FORMAT = 1
SEGMENTS = "segments"
COMPACTED = "compacted-"  # the name prefix of a merged segment, before its SHA-256
SUFFIX = ".jsonl"
ENTRIES = "entries.jsonl"  # the whole cache in one file, before segments: read as the oldest segment
LOCK = ".lock"
COMMIT_EVERY = 1000  # new entries between automatic commits: what a killed run can lose
COMPACT_AFTER = 64  # segments read at open past which the next commit merges them: bounds the files an open reads
STALE_TEMPORARY_S = 3600.0  # a temporary file untouched this long is a killed writer's, not a live one's
OPEN_LISTINGS = 20  # listings an open makes while compactions delete segments under it (each means one went through)
LOAD_ERRORS = (OSError, ValueError, TypeError, KeyError)  # what a damaged segment raises while it is read


class CacheCorruptError(SeedwheelError, ValueError):
    """A cache segment that is truncated, garbled or of another format."""


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """Which version of the file is on disk (inode, size, mtime): a rename by another run changes it."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _encode(entries: dict[str, Any]) -> tuple[bytes, str]:
    """A segment's bytes, and the SHA-256 of its body (what its header holds)."""
    body = b"".join(
        json.dumps([key, entries[key]], separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        for key in sorted(entries)
    )
    digest = hashlib.sha256(body).hexdigest()
    header = {"format": FORMAT, "entries": len(entries), "sha256": digest}
    return json.dumps(header).encode() + b"\n" + body, digest


def _decode(data: bytes) -> dict[str, Any]:
    head, newline, body = data.partition(b"\n")
    if not newline:
        raise CacheCorruptError("no header line")
    header = json.loads(head)
    if not isinstance(header, dict):
        raise CacheCorruptError(f"the header is {type(header).__name__}, not an object")
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


def _listing(folder: Path) -> tuple[list[str], list[Path]]:
    """The segments in `folder` (paths relative to it), oldest first, and the temporary files beside them."""
    names = [ENTRIES] if (folder / ENTRIES).is_file() else []
    temporary = list(folder.glob(f".{ENTRIES}.*.tmp"))
    directory = folder / SEGMENTS
    found = [path.name for path in directory.iterdir()] if directory.is_dir() else []
    temporary += [directory / name for name in found if name.startswith(".") and name.endswith(".tmp")]
    segments = [name for name in found if name.endswith(SUFFIX) and not name.startswith(".")]
    # Compacted segments hold what came before the commits still on their own; commits sort by their UTC time.
    segments.sort(key=lambda name: (not name.startswith(COMPACTED), name))
    return names + [f"{SEGMENTS}/{name}" for name in segments], temporary


def _commit_name() -> str:
    """A new segment's name: its UTC time (so names sort in commit order), then 64 random bits (so none repeats)."""
    return f"{SEGMENTS}/{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%fZ')}-{secrets.token_hex(8)}{SUFFIX}"


class CacheStore:
    """Key -> JSON value, persisted in append-only checksummed segments; see the module docstring.

    Attributes:
        folder: where the segments and the lock live.
        rebuilt: True when a stored segment was damaged and dropped (its entries are computed again).
        rebuild_reason: which segments and why, or None.
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
        self._loaded: dict[str, Any] = {}  # read at open: what a compaction writes
        self._committed: dict[str, Any] = {}  # this run's commits since
        self._staged: dict[str, Any] = {}
        self._read: list[str] = []  # the sound segments read at open: what a compaction may delete
        self._damaged: dict[str, str] = {}  # damaged segment -> SHA-256 of the bytes read: deleted at commit
        self._temporary: list[Path] = []  # temporary files seen at open
        self._tidied = False

    @classmethod
    def open(cls, folder: Path) -> CacheStore:
        """The cache in `folder` (empty when there is none yet; a damaged segment is dropped, see `rebuilt`)."""
        store = cls(folder)
        seen: set[str] = set()
        for _ in range(OPEN_LISTINGS):
            names, store._temporary = _listing(store.folder)
            vanished = False
            for name in (name for name in names if name not in seen):
                try:
                    data = (store.folder / name).read_bytes()
                except FileNotFoundError:
                    vanished = True  # a compaction merged it into a segment written before; the next listing has it
                    continue
                except OSError as error:  # unreadable, not known damaged: dropped for this run, never deleted
                    seen.add(name)
                    store._drop(name, error)
                    continue
                seen.add(name)
                try:
                    store._loaded.update(_decode(data))
                except LOAD_ERRORS as error:
                    store._damaged[name] = hashlib.sha256(data).hexdigest()
                    store._drop(name, error)
                else:
                    store._read.append(name)
            if not vanished:
                break
        else:  # each listing found segments deleted by yet another compaction: entries it missed are recomputed
            logger.warning(
                "cache %s changed under %d listings; opened with what was read", store.folder, OPEN_LISTINGS
            )
        return store

    def _drop(self, name: str, error: Exception) -> None:
        reason = f"{name}: {type(error).__name__}: {error}"
        self.rebuilt = True
        self.rebuild_reason = reason if self.rebuild_reason is None else f"{self.rebuild_reason}; {reason}"
        logger.warning("cache %s is damaged (%s): that segment is dropped, its entries rebuilt", self.folder, reason)

    def __len__(self) -> int:
        return len(self._loaded.keys() | self._committed.keys() | self._staged.keys())

    def get(self, key: str) -> Any | None:
        """The value stored under `key`, or None (counted in `hits` / `misses`)."""
        value = self._staged.get(key)
        if value is None:
            value = self._committed.get(key)
        if value is None:
            value = self._loaded.get(key)
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
        """Write the staged entries as one new segment (and tidy up, see the module docstring); returns how many.

        Raises:
            TypeError: a staged value JSON cannot hold (nothing is written; the entries stay staged).
        """
        written = len(self._staged)
        if self._staged:
            data, _ = _encode(self._staged)  # before any file exists: a value JSON cannot hold writes nothing
            with atomic_write(self.folder / _commit_name()) as handle:
                handle.write(data)
            self._committed.update(self._staged)
            self._staged = {}
        if not self._tidied and (self._damaged or self._temporary or self._compaction_due()):
            self._tidy()
        return written

    def _compaction_due(self) -> bool:
        return len(self._read) > COMPACT_AFTER or ENTRIES in self._read

    def _tidy(self) -> None:
        """Delete the damaged segments and stale temporary files seen at open, and compact when due; once per run."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with file_lock(self.folder / LOCK, wait=False) as held:
            if not held:  # another run is compacting: a later commit (this run's or another's) tidies up
                return
            self._tidied = True
            for name, digest in self._damaged.items():
                path = self.folder / name
                try:
                    if hashlib.sha256(path.read_bytes()).hexdigest() == digest:  # not rewritten since it was read
                        path.unlink()
                except FileNotFoundError:
                    pass
            for path in self._temporary:
                try:
                    if time.time() - path.stat().st_mtime > STALE_TEMPORARY_S:
                        path.unlink()
                except FileNotFoundError:
                    pass
            if self._compaction_due():
                self._compact()

    def _compact(self) -> None:
        """Merge the segments read at open into one named by its SHA-256, then delete them (and only them)."""
        if not all((self.folder / name).exists() for name in self._read):
            return  # another run compacted since this one opened: a merge here would only repeat its file
        merged = ""
        if self._loaded:
            data, digest = _encode(self._loaded)
            merged = f"{SEGMENTS}/{COMPACTED}{digest}{SUFFIX}"
            with atomic_write(self.folder / merged) as handle:
                handle.write(data)
        for name in self._read:
            if name != merged:  # the same segments merged again make the same file: it is the output, keep it
                (self.folder / name).unlink(missing_ok=True)
        logger.info("cache %s: %d segments compacted into %s", self.folder, len(self._read), merged or "none")


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
