"""The persisted dedup index: signatures, exact hashes and keys of every row accepted by earlier runs.

Layout under the folder the caller gives (the pipeline passes `<storage root>/dedup_index/<config.name>/`, so
a changed config opens a different, empty index instead of comparing incompatible signatures):

```
manifest.json            config name and fields, normalisation version, row count, the segments with checksums
seg-00000.sig.npy        (rows, num_perm) uint32 MinHash signatures of the accepted rows
seg-00000.exact.npy      (rows,) uint64 hashes of their normalised texts (exact duplicates)
seg-00000.keys.json      their keys (strings or integers), in the same order
seg-00000.keyhash.npy    (rows,) uint64 hashes of the keys (finding known keys without parsing every key)
seg-00001.*              the next run's accepted rows, ...
```

Each run appends one segment, so a nightly run writes only its new rows and never recomputes old signatures.
Every file is written atomically (temporary file, then rename) and the manifest last: it is the commit
point, so a run killed mid-write leaves the previous index intact (a segment file the manifest does not list
is ignored). On open, shapes and CRC-32 checksums are checked; a missing, truncated, garbled or mismatched
file makes the index *rebuilt* (`rebuilt` is True and `rebuild_reason` says why, for the asset to report):
the files are discarded and the index restarts empty, or from `rebuild_from` (the accepted rows' keys and
texts, re-signed) when the caller can provide them. A damaged index is never trusted.

**Overlapping runs** (two regenerations forced side by side) share the folder safely: opening, rebuilding and
committing hold the index's run-level lock (`core.state.StateStore.lock`: `flock` on `.lock`, dropped by the kernel
if the holder dies; or, with the production database, the advisory lock `dedup_index/<config.name>`, which needs no
file system that honours `flock`), and a commit first takes in the segments another run committed since this one
opened the index, so each commit appends the next segment and no run's rows are lost or indexed twice. Every opener
of one index must pass the same store: an opener on `flock` and one on the database would not exclude each other.

**Candidate search** against the index is in memory: LSH band keys are recomputed from the stored signatures
(`bench/bench_dedup.py` measures it: ~1 s per million rows, cheaper than storing the band tables, which would
double the index). **Scale-out**: `storage_config` (datasketch's, e.g. `{"type": "redis", "redis": {"host":
"...", "port": 6379}}`) moves the band tables into a `datasketch.MinHashLSH` on that storage, keyed by the
rows' ordinals under the basename `seedwheel_<config.name>`; it is filled from the stored signatures when its
key count differs from the index, so several workers can query one shared table. The signatures stay in the
folder (they verify every candidate).

Example:
    >>> index = DedupIndex.open(Path("/tmp/idx"), MinHashConfig())  # doctest: +SKIP
    >>> labels = label_duplicates(keys, texts, None, MinHashConfig(), index=index)  # doctest: +SKIP
    >>> index.commit()  # after the labelled rows are saved  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import time
import zlib
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from core import SeedwheelError
from core.state import StateStore
from core.tables import atomic_write
from curation.dedup.lsh import MAX_BUCKET_ALL_PAIRS, band_keys
from curation.dedup.minhash import (
    NORMALIZATION_VERSION,
    SIGNATURE_SCHEME,
    MinHashConfig,
    as_lean_minhash,
    compute_signatures,
    exact_hash,
    normalize_text,
)

logger = logging.getLogger(__name__)

MANIFEST = "manifest.json"
LOCK = ".lock"  # held while a run opens, commits or rebuilds the index (core.state.file_lock, without a database)
FORMAT_VERSION = 1
RebuildSource = Callable[[], tuple[Sequence[Hashable], Sequence[str]]]


class IndexCorruptError(SeedwheelError, ValueError):
    """An index file that is missing, truncated, garbled or written for another config."""


LOAD_ERRORS = (OSError, ValueError, KeyError, TypeError, EOFError)  # what a damaged file raises while loading


def _crc(data: bytes | memoryview | np.ndarray) -> str:
    buffer = np.ascontiguousarray(data).data.cast("B") if isinstance(data, np.ndarray) else data
    return f"{zlib.crc32(buffer) & 0xFFFFFFFF:08x}"


def _key_hashes(keys: Sequence[Hashable]) -> np.ndarray:
    # 64-bit BLAKE2b of each key's JSON form, so "1" and 1 differ as they do in the keys file
    return np.fromiter(
        (int.from_bytes(hashlib.blake2b(json.dumps(k).encode(), digest_size=8).digest(), "little") for k in keys),
        dtype=np.uint64,
        count=len(keys),
    )


def _first_positions(values: pd.Index, queries: pd.Index) -> np.ndarray:
    # Position of each query's first occurrence in `values`, -1 where absent; hash-based, linear.
    if len(values) == 0 or len(queries) == 0:
        return np.full(len(queries), -1, dtype=np.int64)
    first = ~values.duplicated(keep="first")
    found = values[first].get_indexer(queries)
    return np.where(found >= 0, np.flatnonzero(first)[np.maximum(found, 0)], -1).astype(np.int64)


class DedupIndex:
    """Signatures, exact hashes and keys of accepted rows, persisted in segments; see the module docstring.

    Rows are added in two steps so that a failed run adds nothing: `label_duplicates(..., index=index)`
    *stages* the rows it accepts, and `commit()` writes them once the caller has saved its output.

    Attributes:
        folder: where the files live.
        config: the config whose `name` the manifest must carry.
        store: whose run-level lock guards the folder (`core.state.StateStore`; files and `flock` by default).
        rebuilt: True when the stored index was damaged or mismatched and was discarded on open.
        rebuild_reason: why, or None.
    """

    def __init__(
        self,
        folder: Path,
        config: MinHashConfig,
        storage_config: dict[str, Any] | None = None,
        store: StateStore | None = None,
    ) -> None:
        self.folder = Path(folder)
        self.config = config
        self.storage_config = storage_config
        self.store = store or StateStore()
        self._reset()

    def _lock(self) -> AbstractContextManager[object]:
        """The index's run-level lock: `.lock` in its folder, or its advisory lock in the store's database."""
        return self.store.lock(f"dedup_index/{self.config.name}", self.folder / LOCK)

    def _reset(self) -> None:
        """Empty in memory, as a fresh `DedupIndex(folder, config, storage_config, store)` (the files are left
        alone)."""
        self.rebuilt = False
        self.rebuild_reason: str | None = None
        self.load_seconds = 0.0
        self._segments: list[dict[str, Any]] = []
        self._key_chunks: list[bytes | list[Hashable]] = []  # JSON parsed on first use of `keys`
        self._key_hashes = np.zeros(0, dtype=np.uint64)
        self._rows = 0
        self._signatures = np.zeros((0, self.config.num_perm), dtype=np.uint32)
        self._exact = np.zeros(0, dtype=np.uint64)
        self._band_keys: np.ndarray | None = None
        self._staged: list[tuple[list[Hashable], np.ndarray, np.ndarray]] = []
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []  # committed, not yet appended in memory
        self._lsh: Any = None

    # -- opening -------------------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        folder: Path,
        config: MinHashConfig,
        *,
        storage_config: dict[str, Any] | None = None,
        rebuild_from: RebuildSource | None = None,
        store: StateStore | None = None,
    ) -> DedupIndex:
        """Load the index in `folder` (empty when there is none), verifying every file against the manifest.

        Args:
            folder: the index folder, e.g. `<storage root>/dedup_index/<config.name>/`.
            config: must be the config the index was written with (its name is checked).
            storage_config: optional datasketch storage for the LSH tables (see the module docstring).
            rebuild_from: called only when the stored index is damaged: returns the accepted rows' keys and
                texts so the index is rebuilt from them rather than restarted empty.
            store: whose run-level lock guards the folder (`core.state.StateStore`); every opener of one index
                passes the same one. None: `flock` on `.lock`.

        Returns:
            The index; `rebuilt` and `rebuild_reason` say whether a damaged index was discarded.

        Example:
            >>> index = DedupIndex.open(tmp / "dedup_index" / MinHashConfig().name, MinHashConfig())  # doctest: +SKIP
            >>> len(index), index.rebuilt  # doctest: +SKIP
            (0, False)
        """
        index = cls(folder, config, storage_config, store)
        started = time.perf_counter()
        with index._lock():  # a run committing or rebuilding now finishes first
            if (index.folder / MANIFEST).exists() or any(index.folder.glob("seg-*")):
                try:
                    index._load()
                except LOAD_ERRORS as error:
                    index._discard(f"{type(error).__name__}: {error}")
                    if rebuild_from is not None:
                        keys, texts = rebuild_from()
                        index.stage_texts(keys, texts)
                        index._write_segment()
        index.load_seconds = time.perf_counter() - started
        return index

    def _read_manifest(self) -> dict[str, Any]:
        manifest_path = self.folder / MANIFEST
        if not manifest_path.exists():
            raise IndexCorruptError(f"{manifest_path} is missing but segment files exist")
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        expected = {
            "format": FORMAT_VERSION,
            "config": self.config.name,
            "normalization_version": NORMALIZATION_VERSION,
            "scheme": SIGNATURE_SCHEME,
        }
        for field, value in expected.items():
            if manifest.get(field) != value:
                raise IndexCorruptError(f"manifest {field} is {manifest.get(field)!r}, expected {value!r}")
        return manifest

    def _read_segment(self, segment: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, bytes]:
        """A segment's signatures, exact hashes, key hashes and keys file, verified against its manifest entry."""
        rows = int(segment["rows"])
        sig = np.load(self.folder / segment["signatures"], allow_pickle=False)
        hashes = np.load(self.folder / segment["exact"], allow_pickle=False)
        key_hash = np.load(self.folder / segment["keyhash"], allow_pickle=False)
        key_bytes = (self.folder / segment["keys"]).read_bytes()
        if sig.shape != (rows, self.config.num_perm) or sig.dtype != np.uint32:
            raise IndexCorruptError(f"{segment['signatures']} has shape {sig.shape} {sig.dtype}, expected {rows}")
        if hashes.shape != (rows,) or hashes.dtype != np.uint64:
            raise IndexCorruptError(f"{segment['exact']} has shape {hashes.shape}, expected ({rows},)")
        if key_hash.shape != (rows,) or key_hash.dtype != np.uint64:
            raise IndexCorruptError(f"{segment['keyhash']} has shape {key_hash.shape}, expected ({rows},)")
        checksum = {"signatures": _crc(sig), "exact": _crc(hashes), "keyhash": _crc(key_hash), "keys": _crc(key_bytes)}
        if checksum != segment["checksum"]:
            raise IndexCorruptError(f"segment {segment['id']} checksum {checksum} != {segment['checksum']}")
        return sig, hashes, key_hash, key_bytes

    def _load(self) -> None:
        manifest = self._read_manifest()
        signatures, exact, key_hashes = [], [], []
        key_chunks: list[bytes | list[Hashable]] = []
        for segment in manifest["segments"]:
            sig, hashes, key_hash, key_bytes = self._read_segment(segment)
            signatures.append(sig)
            exact.append(hashes)
            key_hashes.append(key_hash)
            key_chunks.append(key_bytes)
        total = sum(len(h) for h in key_hashes)
        if total != manifest["rows"]:
            raise IndexCorruptError(f"segments hold {total} rows, manifest says {manifest['rows']}")
        self._segments = list(manifest["segments"])
        self._key_chunks = key_chunks
        self._rows = total
        if signatures:
            self._key_hashes = np.concatenate(key_hashes)
            self._signatures = signatures[0] if len(signatures) == 1 else np.concatenate(signatures)
            self._exact = exact[0] if len(exact) == 1 else np.concatenate(exact)

    def _discard(self, reason: str) -> None:
        self.rebuilt = True
        self.rebuild_reason = reason
        logger.warning("dedup index %s is damaged (%s): rebuilt from scratch", self.folder, reason)
        for path in [self.folder / MANIFEST, *self.folder.glob("seg-*")]:
            path.unlink(missing_ok=True)
        self._reset()
        self.rebuilt, self.rebuild_reason = True, reason

    # -- reading -------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._rows

    @property
    def keys(self) -> list[Hashable]:
        """Accepted keys, in the order they were committed (their ordinals); parsed on first use."""
        if not self._key_chunks:
            return []
        first = self._key_chunks[0]
        if len(self._key_chunks) == 1 and not isinstance(first, bytes):
            return first
        keys: list[Hashable] = []
        for chunk in self._key_chunks:
            keys.extend(json.loads(chunk) if isinstance(chunk, bytes) else chunk)
        if len(keys) != self._rows:
            raise IndexCorruptError(f"{self.folder} key files hold {len(keys)} keys, expected {self._rows}")
        self._key_chunks = [keys]
        return keys

    def _merge_pending(self) -> None:
        if self._pending:
            self._signatures = np.concatenate([self._signatures, *(s for s, _ in self._pending)])
            self._exact = np.concatenate([self._exact, *(e for _, e in self._pending)])
            self._pending = []

    @property
    def signatures(self) -> np.ndarray:
        """`(len(self), num_perm)` uint32 signatures of the committed rows."""
        self._merge_pending()
        return self._signatures

    @property
    def exact_hashes(self) -> np.ndarray:
        """`(len(self),)` uint64 hashes of the committed rows' normalised texts."""
        self._merge_pending()
        return self._exact

    def ordinals_of(self, keys: Sequence[Hashable]) -> np.ndarray:
        """The ordinal of each key in the index, -1 where absent.

        Compares 64-bit key hashes (stored per segment), so the stored keys need not be parsed; two keys
        sharing a hash (chance ~n**2 / 2**65) would be taken for one.
        """
        return _first_positions(pd.Index(self._key_hashes), pd.Index(_key_hashes(keys)))

    def exact_matches(self, hashes: np.ndarray) -> np.ndarray:
        """The ordinal of the first committed row with each exact hash, -1 where none."""
        return _first_positions(pd.Index(self.exact_hashes), pd.Index(np.asarray(hashes, dtype=np.uint64)))

    def band_keys(self) -> np.ndarray:
        """`(len(self), bands)` LSH band keys of the committed rows, computed once per open."""
        if self._band_keys is None or len(self._band_keys) != len(self):
            self._band_keys = band_keys(self.signatures, self.config)
        return self._band_keys

    def candidates(self, signatures: np.ndarray, new_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pairs (new row, committed ordinal) that share an LSH bucket; not yet verified.

        Args:
            signatures: `(m, num_perm)` signatures of new rows (used with `storage_config`).
            new_keys: `(m, bands)` band keys of the same rows (used in memory).

        Returns:
            Two int64 arrays of equal length: new-row positions and index ordinals.
        """
        if len(self) == 0 or len(new_keys) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        if self.storage_config is not None:
            return self._candidates_datasketch(signatures)
        bands = new_keys.shape[1]
        old_flat = self.band_keys().ravel()  # row-major: position p is ordinal p // bands
        new_flat = new_keys.ravel()
        # One hash probe of every stored band key against the new rows' distinct keys (linear), then a join
        # of the few hits; band keys carry their band in their seed, so bands need no separate tables.
        hit = np.flatnonzero(pd.Index(np.unique(new_flat)).get_indexer(old_flat) >= 0)
        if len(hit) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        old = pd.DataFrame({"key": old_flat[hit], "ordinal": hit // bands})
        # A bucket shared by thousands of stored rows (templated texts) would make every new row in it a
        # candidate of each: keep its earliest MAX_BUCKET_ALL_PAIRS rows, as candidate_pairs bounds buckets.
        old = old.groupby("key", sort=False).head(MAX_BUCKET_ALL_PAIRS)
        new = pd.DataFrame({"key": new_flat, "row": np.arange(len(new_flat)) // bands})
        pairs = np.unique(new.merge(old, on="key")[["row", "ordinal"]].to_numpy(dtype=np.int64), axis=0)
        return pairs[:, 0], pairs[:, 1]

    def lsh(self) -> Any:
        """A `datasketch.MinHashLSH` over the committed rows (keys: ordinals), on `storage_config` if given.

        Filled through an insertion session from the stored signatures unless the storage already holds
        exactly `len(self)` keys (a shared Redis table kept by an earlier run).
        """
        from datasketch import MinHashLSH

        if self._lsh is None:
            storage = dict(self.storage_config or {"type": "dict"})
            storage.setdefault("basename", f"seedwheel_{self.config.name}".encode())
            self._lsh = MinHashLSH(
                threshold=self.config.threshold,
                num_perm=self.config.num_perm,
                params=self.config.lsh_params,
                storage_config=storage,
            )
        if len(self._lsh.keys) != len(self):
            stored = self._lsh.keys.keys() if len(self._lsh.keys) else []
            # Redis storage pickles keys (datasketch's prepickle); the dict storage keeps them as given.
            known = {pickle.loads(k) for k in stored} if self._lsh.prepickle else set(stored)
            with self._lsh.insertion_session() as session:
                for ordinal in range(len(self)):
                    if ordinal not in known:
                        session.insert(ordinal, as_lean_minhash(self.signatures[ordinal], self.config))
        return self._lsh

    def _candidates_datasketch(self, signatures: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lsh = self.lsh()
        rows, ordinals = [], []
        for row, signature in enumerate(signatures):
            for ordinal in lsh.query(as_lean_minhash(signature, self.config)):
                rows.append(row)
                ordinals.append(int(ordinal))
        return np.asarray(rows, dtype=np.int64), np.asarray(ordinals, dtype=np.int64)

    # -- writing -------------------------------------------------------------------------------------------

    def stage(self, keys: Sequence[Hashable], signatures: np.ndarray, exact: np.ndarray) -> None:
        """Queue accepted rows (already signed) for the next `commit`.

        Args:
            keys: their keys (strings or integers, JSON-serialisable).
            signatures: `(len(keys), num_perm)` uint32.
            exact: `(len(keys),)` uint64 exact hashes.
        """
        if len(keys) != len(signatures) or len(keys) != len(exact):
            raise ValueError(f"stage got {len(keys)} keys, {len(signatures)} signatures, {len(exact)} hashes")
        if len(keys):
            self._staged.append((list(keys), np.asarray(signatures, np.uint32), np.asarray(exact, np.uint64)))

    def stage_texts(self, keys: Sequence[Hashable], texts: Sequence[str]) -> None:
        """Sign texts and stage them (used to rebuild an index from accepted rows); empty texts are skipped."""
        norms = [normalize_text(t) for t in texts]
        keep = [i for i, n in enumerate(norms) if n]
        signatures = compute_signatures([norms[i] for i in keep], self.config, normalized=True)
        exact = np.fromiter((exact_hash(norms[i]) for i in keep), dtype=np.uint64, count=len(keep))
        self.stage([keys[i] for i in keep], signatures, exact)

    @property
    def staged_rows(self) -> int:
        """Rows waiting for `commit`."""
        return sum(len(k) for k, _, _ in self._staged)

    def commit(self) -> int:
        """Write the staged rows as one new segment, then the manifest (atomically, manifest last).

        Safe when runs overlap: under the index's lock, segments that another run committed since this one
        opened the index are loaded first (they keep their ordinals; this run's rows come after them), and
        staged rows whose keys that run already committed are dropped, so no key is indexed twice. Rows the two
        runs accepted as new, near-duplicates of each other, both stay; the next run labels against both.

        Returns:
            The number of rows written (0 writes nothing).
        """
        if not self._staged:
            return 0
        with self._lock():
            self._catch_up()
            return self._write_segment()

    def _catch_up(self) -> None:
        """Bring the in-memory index up to the manifest on disk (called under the lock, staged rows kept)."""
        if not (self.folder / MANIFEST).exists() and not self._segments:
            return
        try:
            manifest = self._read_manifest()
            ours = [(s["id"], s["checksum"]) for s in self._segments]
            theirs = [(s["id"], s["checksum"]) for s in manifest["segments"]]
            if theirs[: len(ours)] != ours:  # another run discarded and rebuilt the index: take it whole
                staged = self._staged
                self._reset()
                self._staged = staged
                self._load()
            else:
                for segment in manifest["segments"][len(ours) :]:
                    sig, hashes, key_hash, key_bytes = self._read_segment(segment)
                    self._segments.append(segment)
                    self._key_chunks.append(key_bytes)
                    self._key_hashes = np.concatenate([self._key_hashes, key_hash])
                    self._rows += len(key_hash)
                    self._pending.append((sig, hashes))
                    self._band_keys = None
                if len(theirs) == len(ours):
                    return
        except LOAD_ERRORS as error:  # damaged since this run opened it: restart it with this run's rows
            staged = self._staged
            self._discard(f"{type(error).__name__}: {error}")
            self._staged = staged
            return
        known = self.ordinals_of([k for batch, _, _ in self._staged for k in batch]) >= 0
        if known.any():
            batches, start = [], 0
            for keys, signatures, exact in self._staged:
                keep = ~known[start : start + len(keys)]
                start += len(keys)
                kept_keys = [k for k, kept in zip(keys, keep, strict=True) if kept]
                batches.append((kept_keys, signatures[keep], exact[keep]))
            self._staged = [batch for batch in batches if batch[0]]

    def _write_segment(self) -> int:
        if not self._staged:
            return 0
        keys = [k for batch, _, _ in self._staged for k in batch]
        signatures = np.concatenate([s for _, s, _ in self._staged])
        exact = np.concatenate([e for _, _, e in self._staged])
        segment_id = max((int(s["id"]) for s in self._segments), default=-1) + 1
        stem = f"seg-{segment_id:05d}"
        key_bytes = json.dumps(keys, ensure_ascii=False).encode("utf-8")
        key_hash = _key_hashes(keys)
        segment: dict[str, Any] = {
            "id": segment_id,
            "rows": len(keys),
            "signatures": f"{stem}.sig.npy",
            "exact": f"{stem}.exact.npy",
            "keys": f"{stem}.keys.json",
            "keyhash": f"{stem}.keyhash.npy",
            "checksum": {
                "signatures": _crc(signatures),
                "exact": _crc(exact),
                "keyhash": _crc(key_hash),
                "keys": _crc(key_bytes),
            },
        }
        with atomic_write(self.folder / segment["signatures"]) as handle:
            np.save(handle, signatures, allow_pickle=False)
        with atomic_write(self.folder / segment["exact"]) as handle:
            np.save(handle, exact, allow_pickle=False)
        with atomic_write(self.folder / segment["keyhash"]) as handle:
            np.save(handle, key_hash, allow_pickle=False)
        with atomic_write(self.folder / segment["keys"]) as handle:
            handle.write(key_bytes)
        segments = [*self._segments, segment]
        manifest = {
            "format": FORMAT_VERSION,
            "config": self.config.name,
            "config_fields": asdict(self.config),
            "normalization_version": NORMALIZATION_VERSION,
            "scheme": SIGNATURE_SCHEME,
            "rows": self._rows + len(keys),
            "segments": segments,
        }
        with atomic_write(self.folder / MANIFEST, "w") as handle:
            json.dump(manifest, handle, indent=1)
        self._segments = segments
        self._key_chunks.append(keys)
        self._key_hashes = np.concatenate([self._key_hashes, key_hash])
        self._rows += len(keys)
        # Appended lazily: a nightly run commits last, and copying every stored signature would cost more
        # than the commit itself.
        self._pending.append((signatures, exact))
        self._band_keys = None
        self._staged = []
        return len(keys)
