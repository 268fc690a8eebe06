"""LSH banding with numpy: band keys, candidate pairs within buckets, verification, union-find.

datasketch's `MinHashLSH` keeps one Python dict entry per (band, key) and is queried one document at a
time; for a batch known in advance the same buckets come from sorting: each band of `rows` signature values
is folded into one 64-bit key, rows sharing a key in any band are candidates, and every candidate pair is
verified by its estimated Jaccard (LSH alone also returns pairs below the threshold).

Example:
    >>> from curation.dedup.minhash import MinHashConfig, compute_signatures
    >>> config = MinHashConfig()
    >>> sigs = compute_signatures(["a b c d e f", "a b c d e g", "x y z"], config)
    >>> verified_pairs(sigs, config).tolist()
    [[0, 1]]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from curation.dedup.minhash import EMPTY_HASH, MinHashConfig, estimated_jaccard

_U64 = np.uint64
# A bucket larger than this (many rows sharing one band) is not expanded into all its pairs: each member is
# paired with the bucket's first member and with its predecessor instead, which keeps the work linear while
# still connecting a bucket of true near-duplicates. Exact duplicates are merged before LSH, so large
# buckets are rare (templated texts).
MAX_BUCKET_ALL_PAIRS = 64
_VERIFY_CHUNK = 65536  # pairs verified per step: 65536 x 128 x 2 uint32 = 64 MiB of gathered signatures


def band_keys(signatures: np.ndarray, config: MinHashConfig) -> np.ndarray:
    """One 64-bit key per (row, band): the band's `rows` values folded by multiply-xor and a finalizer.

    Args:
        signatures: `(n, num_perm)` uint32.
        config: the band layout.

    Returns:
        `(n, bands)` uint64; equal keys mean (up to a 2**-64 chance) equal bands.
    """
    bands, rows = config.lsh_params
    n = len(signatures)
    salt = (np.arange(1, bands + 1, dtype=_U64) * _U64(0x9E3779B97F4A7C15))[None, :]
    if rows % 2 == 0:
        # Two uint32 slots read as one uint64: half the passes, each over all bands at once (no column loop).
        blocks = np.ascontiguousarray(signatures).view(_U64).reshape(n, bands, rows // 2)
    else:
        blocks = signatures.reshape(n, bands, rows).astype(_U64)
    keys = np.bitwise_xor(blocks[:, :, 0], salt)  # the band's own seed, so equal bands in two bands differ
    for column in range(blocks.shape[2]):
        if column:
            keys ^= blocks[:, :, column]
        keys *= _U64(0xFF51AFD7ED558CCD)
        keys ^= keys >> _U64(29)
    return keys


def _pairs_in_runs(members: np.ndarray, run_starts: np.ndarray, run_sizes: np.ndarray) -> np.ndarray:
    """All pairs inside each run of `members` (runs given by start and size), bounded for huge runs."""
    out = []
    small = run_sizes <= MAX_BUCKET_ALL_PAIRS
    for size in np.unique(run_sizes[small]):
        starts = run_starts[run_sizes == size]
        first, second = np.triu_indices(int(size), 1)
        out.append(np.stack([members[starts[:, None] + first].ravel(), members[starts[:, None] + second].ravel()], 1))
    for start, size in zip(run_starts[~small], run_sizes[~small], strict=True):
        run = members[start : start + size]
        out.append(np.stack([np.full(size - 1, run[0]), run[1:]], 1))  # star on the first member
        out.append(np.stack([run[:-1], run[1:]], 1))  # chain
    return np.concatenate(out) if out else np.zeros((0, 2), dtype=np.int64)


def candidate_pairs(
    keys: np.ndarray, allowed: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None
) -> np.ndarray:
    """Distinct `(i, j)` pairs, `i < j`, sharing a key in at least one band.

    Args:
        keys: `(n, bands)` from `band_keys`.
        allowed: optional filter `(i, j) -> bool mask` applied per band (e.g. drop pairs of two indexed rows).

    Returns:
        `(pairs, 2)` int64, sorted.
    """
    found = []
    for band in range(keys.shape[1]):
        column = keys[:, band]
        # Hash-based duplicate test first (linear): only rows in a shared bucket are sorted.
        shared = np.flatnonzero(pd.Series(column).duplicated(keep=False).to_numpy())
        if len(shared) == 0:
            continue
        members = shared[np.argsort(column[shared], kind="stable")]
        sorted_keys = column[members]
        boundaries = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1], True])
        pairs = _pairs_in_runs(members, boundaries[:-1], np.diff(boundaries))
        if allowed is not None and len(pairs):
            pairs = pairs[allowed(pairs[:, 0], pairs[:, 1])]
        found.append(pairs)
    if not found:
        return np.zeros((0, 2), dtype=np.int64)
    pairs = np.sort(np.concatenate(found), axis=1).astype(np.int64)
    return np.unique(pairs, axis=0) if len(pairs) else pairs


def verify(signatures: np.ndarray, pairs: np.ndarray, other: np.ndarray | None = None) -> np.ndarray:
    """Estimated Jaccard of each pair, in chunks to bound memory.

    Args:
        signatures: rows the first column of `pairs` points into.
        pairs: `(k, 2)` row indices.
        other: rows the second column points into (default: `signatures` too).

    Returns:
        `(k,)` float64.
    """
    right = signatures if other is None else other
    scores = np.empty(len(pairs), dtype=np.float64)
    for lo in range(0, len(pairs), _VERIFY_CHUNK):
        chunk = pairs[lo : lo + _VERIFY_CHUNK]
        scores[lo : lo + len(chunk)] = estimated_jaccard(signatures[chunk[:, 0]], right[chunk[:, 1]])
    return scores


def verified_pairs(
    signatures: np.ndarray,
    config: MinHashConfig,
    allowed: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
    *,
    with_scores: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """LSH candidates whose estimated Jaccard is at least `config.threshold`; empty rows never pair.

    Args:
        signatures: `(n, num_perm)` uint32.
        config: band layout and threshold.
        allowed: optional pair filter (see `candidate_pairs`).
        with_scores: also return each kept pair's estimated Jaccard.

    Returns:
        `(pairs, 2)` int64 (and the scores when asked).
    """
    # Empty rows (no shingles) are left out of the buckets altogether: they never pair.
    rows = np.flatnonzero(~(signatures == EMPTY_HASH).all(axis=1))
    restricted = None if allowed is None else (lambda i, j: allowed(rows[i], rows[j]))
    pairs = rows[candidate_pairs(band_keys(signatures[rows], config), restricted)]
    scores = verify(signatures, pairs)
    keep = scores >= config.threshold - 1e-12
    return (pairs[keep], scores[keep]) if with_scores else pairs[keep]


def connected_components(n: int, pairs: np.ndarray) -> np.ndarray:
    """Union-find over `n` nodes joined by `pairs`: a component id per node (its smallest member).

    Example:
        >>> connected_components(5, np.array([[0, 3], [3, 4]])).tolist()
        [0, 1, 2, 0, 0]
    """
    parent = np.arange(n)
    if len(pairs) == 0:
        return parent
    # Only nodes that appear in a pair need the Python union-find; the rest are their own component.
    lookup: dict[int, int] = {}

    def find(x: int) -> int:
        root = x
        while lookup.get(root, root) != root:
            root = lookup[root]
        while x != root:  # path compression
            lookup[x], x = root, lookup[x]
        return root

    for i, j in pairs.tolist():
        ri, rj = find(i), find(j)
        if ri != rj:
            if ri < rj:
                lookup[rj] = ri
            else:
                lookup[ri] = rj
    nodes = np.unique(pairs)
    parent[nodes] = [find(int(x)) for x in nodes]
    return parent
