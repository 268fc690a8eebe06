"""MinHash signatures for near-duplicate detection: config, text normalisation, vectorized signatures.

**Normalisation** (`normalize_text`, version `NORMALIZATION_VERSION`): Unicode NFKC (full-width letters,
ligatures and compatibility digits fold to their plain forms), lowercase, every character that is neither a
letter, a digit nor whitespace (punctuation, symbols, underscores) becomes a space, and runs of whitespace
collapse to one space with none at the ends. So `"Janet\u2019s  $2!"` (a curly apostrophe) and
`"janet's 2"` both normalise to `"janet s 2"`. Exact duplicates are rows with equal normalised text (`exact_hash`).

**Signatures** are datasketch 2.x MinHash signatures (permutation scheme `"affine32"`, datasketch's default):
the same `(a, b)` permutation coefficients (drawn from `numpy.random.RandomState(seed)` exactly as datasketch
draws them), the same MurmurHash3 pre-mix and `a * h + b mod 2**32` arithmetic. What differs is how a shingle
becomes its 32-bit input hash: instead of SHA-1 of the shingle's bytes (one Python call per shingle), every
distinct token is hashed once (BLAKE2b, 64 bits) and a word n-gram's hash is combined from its tokens' hashes
with numpy. A signature is therefore exactly what `datasketch.MinHash(seed=seed, hashfunc=lambda h: h)` gives
after `update_batch(shingle_hashes(...))`, and `as_lean_minhash` turns it into a `datasketch.LeanMinHash`
that `datasketch.MinHashLSH` accepts.

**Shingles** are word n-grams of the normalised text (`shingle_size` words). A text with fewer words than
that has one shingle, all its words; an empty text (nothing left after normalisation) has none: its
signature is all `EMPTY_HASH` and it is never a duplicate of anything, not even of another empty text.

Example:
    >>> config = MinHashConfig()
    >>> sigs = compute_signatures(["the cat sat on the mat", "the cat sat on a mat"], config)
    >>> sigs.shape
    (2, 128)
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise
from typing import Any

import numpy as np

from core import SeedwheelError

# Bumped whenever normalisation, tokenisation or shingle hashing changes: a persisted index whose manifest
# names another version is rebuilt, because its signatures would not be comparable with new ones.
NORMALIZATION_VERSION = 1
SIGNATURE_SCHEME = "affine32"  # datasketch's default permutation scheme since 2.0.0
EMPTY_HASH = np.uint32(0xFFFFFFFF)  # datasketch's initial value of every hash slot

_NON_WORD = re.compile(r"[\W_]+")  # anything but letters and digits (Unicode-aware)
_U32 = np.uint32
_U64 = np.uint64
# Shingles per permutation batch: 128 x 8192 uint32 = 4 MiB, small enough to stay in cache while the
# permutations are applied, large enough that numpy's per-call overhead does not matter.
_CHUNK_SHINGLES = 8192
_BATCH_CHARS = 4_000_000
# Golden-ratio multiplier that makes the n-gram hash depend on token order ("a b" != "b a").
_NGRAM_MULT = _U64(0x9E3779B97F4A7C15)


class DedupConfigError(SeedwheelError, ValueError):
    """A `MinHashConfig` with an impossible value; the message gives the numbers and a fix."""


def _fmix32(h: np.ndarray) -> np.ndarray:
    # MurmurHash3's 32-bit finalizer, exactly as datasketch pre-mixes input hashes (scheme affine32).
    h = h ^ (h >> _U32(16))
    h = h * _U32(0x85EBCA6B)
    h = h ^ (h >> _U32(13))
    h = h * _U32(0xC2B2AE35)
    return h ^ (h >> _U32(16))


def _fmix64(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> _U64(33))
    h = h * _U64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> _U64(33))
    h = h * _U64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> _U64(33))


def _collision_probability(similarity: np.ndarray, bands: int, rows: int) -> np.ndarray:
    return 1.0 - (1.0 - similarity**rows) ** bands


def optimal_bands(threshold: float, num_perm: int, fn_weight: float = 0.8) -> tuple[int, int]:
    """The (bands, rows) with `bands * rows == num_perm` that best separate pairs below/above `threshold`.

    Minimises `(1 - fn_weight) * P(candidate | J < t) + fn_weight * P(missed | J >= t)`, each the area under
    the LSH S-curve `1 - (1 - J**r)**b` on its side of the threshold (as datasketch does, but only over exact
    factorisations, so every permutation is used). Candidates are verified afterwards, so a false candidate
    costs a comparison while a miss costs a duplicate, hence the default weight 0.8 on misses (at 0.5 the
    layout is 32x4 either way; at 0.6 it keeps 32x4 where an even weighting picks 16x8, which found only
    80% of the GSM8K labelled pairs in `bench/measure_dedup_recall.py`).

    Args:
        threshold: Jaccard similarity in (0, 1).
        num_perm: number of permutations.
        fn_weight: weight of missed pairs in [0, 1]; false candidates get `1 - fn_weight`.

    Returns:
        `(bands, rows)`.

    Example:
        >>> optimal_bands(0.5, 128)
        (32, 4)
    """
    grid = np.linspace(0.0, 1.0, 2001)
    below, above = grid[grid < threshold], grid[grid >= threshold]
    best, best_error = (num_perm, 1), math.inf
    for rows in range(1, num_perm + 1):
        if num_perm % rows:
            continue
        bands = num_perm // rows
        fp = float(np.trapezoid(_collision_probability(below, bands, rows), below)) if below.size > 1 else 0.0
        fn = float(np.trapezoid(1.0 - _collision_probability(above, bands, rows), above)) if above.size > 1 else 0.0
        error = (1.0 - fn_weight) * fp + fn_weight * fn
        if error < best_error - 1e-12:
            best, best_error = (bands, rows), error
    return best


@dataclass(frozen=True)
class MinHashConfig:
    """Everything that decides which rows are near-duplicates; its `name` names the persisted index.

    Defaults come from `bench/measure_dedup_recall.py` on GSM8K test vs test_socratic (2,638 documents,
    1,319 labelled near-duplicate pairs, word-3-gram Jaccard p10 0.69 / median 0.77): word 3-grams, 128
    permutations, 32 bands x 4 rows, threshold 0.5 found 99.77% of the pairs with 0 false pairs (the closest
    unrelated pair any layout surfaced estimated 0.36). 2-grams made false pairs below 0.5; 5-grams lost recall
    (92.9% at 0.5); threshold 0.6 fell to 97.7%, 0.7 (16x8 bands) to 74%.

    Args:
        shingle_size: words per shingle (word n-grams).
        num_perm: MinHash permutations (signature length).
        threshold: estimated Jaccard similarity at or above which two rows are near-duplicates; every LSH
            candidate pair is verified against it.
        bands: LSH bands; with `rows`, overrides the choice derived from `threshold` (`optimal_bands`).
        rows: rows per band; `bands * rows` must equal `num_perm`.
        seed: permutation seed (datasketch's `seed`).

    Example:
        >>> str(MinHashConfig())
        'w3_p128_b32r4_s1'
        >>> MinHashConfig(threshold=0.8).name
        'w3_p128_b16r8_s1'
    """

    shingle_size: int = 3
    num_perm: int = 128
    threshold: float = 0.5
    bands: int | None = None
    rows: int | None = None
    seed: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.shingle_size, int) or not 1 <= self.shingle_size <= 16:
            raise DedupConfigError(f"shingle_size must be an integer in 1..16, got {self.shingle_size!r} - use 3")
        if not isinstance(self.num_perm, int) or not 2 <= self.num_perm <= 1024:
            raise DedupConfigError(
                f"num_perm must be an integer in 2..1024, got {self.num_perm!r} - use 128 (64 halves memory)"
            )
        if not isinstance(self.threshold, (int, float)) or not 0.0 < self.threshold < 1.0:
            raise DedupConfigError(f"threshold must be in (0, 1), got {self.threshold!r} - use 0.5")
        if (self.bands is None) != (self.rows is None):
            raise DedupConfigError(
                f"give both bands and rows or neither, got bands={self.bands} rows={self.rows} - "
                f"e.g. bands={self.num_perm // 4}, rows=4, or leave both out to derive them from the threshold"
            )
        if self.bands is not None and self.rows is not None:
            if self.bands < 2 or self.rows < 1:
                raise DedupConfigError(
                    f"bands must be >= 2 and rows >= 1, got bands={self.bands} rows={self.rows} - "
                    "fewer than 2 bands is a plain signature comparison; lower rows instead"
                )
            if self.bands * self.rows != self.num_perm:
                raise DedupConfigError(
                    f"bands * rows must equal num_perm: {self.bands} * {self.rows} = {self.bands * self.rows} "
                    f"!= {self.num_perm} - choose rows dividing {self.num_perm} and bands = {self.num_perm} / rows"
                )
        if not isinstance(self.seed, int) or not 0 <= self.seed < 2**32:
            raise DedupConfigError(f"seed must be an integer in [0, 2**32), got {self.seed!r} - use 1")

    @cached_property
    def lsh_params(self) -> tuple[int, int]:
        """`(bands, rows)`: the explicit ones, else `optimal_bands(threshold, num_perm)`."""
        if self.bands is not None and self.rows is not None:
            return self.bands, self.rows
        return optimal_bands(float(self.threshold), self.num_perm)

    @property
    def name(self) -> str:
        """A short stable string naming every parameter that decides what the persisted index holds.

        The threshold is left out on purpose: it is applied when candidates are verified, never stored, so
        raising or lowering it keeps the accepted history (a different band layout, which the threshold
        usually implies, does change the name).
        """
        bands, rows = self.lsh_params
        return f"w{self.shingle_size}_p{self.num_perm}_b{bands}r{rows}_s{self.seed}"

    def __str__(self) -> str:
        return self.name

    @cached_property
    def permutations(self) -> tuple[np.ndarray, np.ndarray]:
        """datasketch's `(a, b)` coefficients for `seed` and scheme affine32, as two uint32 arrays."""
        gen = np.random.RandomState(self.seed)
        a = gen.randint(0, 1 << 31, self.num_perm, dtype=np.uint32) * _U32(2) + _U32(1)
        b = gen.randint(0, 1 << 32, self.num_perm, dtype=np.uint32)
        return a, b


def _ascii_table() -> bytes:
    table = bytearray(range(256))
    for code in range(128):
        char = chr(code)
        if char.isupper():
            table[code] = ord(char.lower())
        elif not (char.isalnum() or char.isspace()):
            table[code] = ord(" ")
    return bytes(table)


# ASCII fast path of normalisation (most texts): one C-level byte translation lowercases and blanks
# punctuation, the same result as NFKC + lower + `_NON_WORD` on ASCII input, at a fifth of the cost.
_ASCII_TABLE = _ascii_table()


def normalize_text(text: str) -> str:
    """The form texts are compared in: NFKC, lowercase, punctuation/symbols to spaces, whitespace collapsed.

    Args:
        text: any string (lone surrogates from `errors="surrogateescape"` decoding count as non-word characters).

    Returns:
        Words separated by single spaces; `""` when nothing but punctuation and whitespace was there.

    Example:
        >>> normalize_text("  Janet\\u2019s ducks\\tlay 16 EGGS!  ")
        'janet s ducks lay 16 eggs'
    """
    if text.isascii():
        return " ".join(text.encode("ascii").translate(_ASCII_TABLE).decode("ascii").split())
    return " ".join(_NON_WORD.sub(" ", unicodedata.normalize("NFKC", text).lower()).split())


def exact_hash(normalized: str) -> int:
    """A stable 64-bit hash of a normalised text (BLAKE2b): equal hashes mean exact duplicates.

    Example:
        >>> exact_hash("a b") == exact_hash(normalize_text("A,  b!"))
        True
    """
    return int.from_bytes(hashlib.blake2b(_utf8(normalized), digest_size=8).digest(), "little")


def _utf8(text: str) -> bytes:
    # surrogatepass: a lone surrogate (undecodable input kept by surrogateescape) must hash, not crash
    return text.encode("utf-8", "surrogatepass")


class _Powers:
    """Cached powers of the polynomial-hash base mod 2**64, as many as the longest token needs."""

    base = _U64(0x100000001B3)

    def __init__(self) -> None:
        self.values = np.ones(1, dtype=_U64)

    def upto(self, length: int) -> np.ndarray:
        if len(self.values) < length:
            size = max(length, 2 * len(self.values), 64)
            grown = np.empty(size, dtype=_U64)
            grown[0] = 1
            np.cumprod(np.full(size - 1, self.base, dtype=_U64), out=grown[1:])
            self.values = grown
        return self.values[:length]


_POWERS = _Powers()


def token_hashes(joined: bytes) -> np.ndarray:
    """Stable 64-bit hashes of the space-separated tokens of `joined`, computed with numpy over the bytes.

    A token's hash is a polynomial hash of its bytes mod 2**64 (byte k of the token weighted by base**k, summed
    per token with one `add.reduceat`), plus its length, through the MurmurHash3 64-bit finalizer. No Python
    object is made per token, and only as many powers as the longest token are needed.

    Args:
        joined: normalised texts joined by single spaces, UTF-8 encoded (no leading, trailing or double spaces).

    Returns:
        One uint64 per token, in order.

    Example:
        >>> h = token_hashes(b"cat sat cat")
        >>> bool(h[0] == h[2]), bool(h[0] == h[1])
        (True, False)
    """
    if not joined:
        return np.zeros(0, dtype=_U64)
    data = np.frombuffer(joined, dtype=np.uint8)
    is_space = data == ord(" ")
    spaces = np.flatnonzero(is_space)
    starts = np.r_[0, spaces + 1]
    lengths = np.r_[spaces, len(data)] - starts
    # Offset of each byte inside its token (a space's own offset is irrelevant: it is weighted 0).
    offsets = np.arange(len(data)) - starts[np.cumsum(is_space)]
    powers = _POWERS.upto(int(lengths.max()) + 1)
    weighted = data.astype(_U64) * powers[np.where(is_space, 0, offsets)]
    weighted[is_space] = 0
    raw = np.add.reduceat(weighted, starts)
    return _fmix64(raw + lengths.astype(_U64) * _NGRAM_MULT)


@dataclass(frozen=True)
class Shingles:
    """The shingle hashes of a batch of documents: `hashes[offsets[i]:offsets[i + 1]]` belong to document i."""

    hashes: np.ndarray  # uint32, datasketch's 32-bit input hash per shingle
    offsets: np.ndarray  # int64, len(documents) + 1


def shingle_hashes(normalized: Sequence[str], shingle_size: int) -> Shingles:
    """Word n-gram hashes of already-normalised texts, all documents at once.

    Tokenising is one `split` over the joined texts; each n-gram's hash combines its tokens' hashes in order
    (multiply-add in uint64), then a 64-bit finalizer, keeping the high 32 bits.

    Args:
        normalized: texts from `normalize_text`.
        shingle_size: words per shingle.

    Returns:
        The shingle hashes and per-document offsets.

    Example:
        >>> s = shingle_hashes(["a b c d", "", "a b"], 3)
        >>> s.offsets.tolist()
        [0, 2, 2, 3]
    """
    n_docs = len(normalized)
    token_counts = np.fromiter((t.count(" ") + 1 if t else 0 for t in normalized), dtype=np.int64, count=n_docs)
    hashes = token_hashes(_utf8(" ".join(t for t in normalized if t)))
    token_starts = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(token_counts, out=token_starts[1:])
    # A document of n >= 1 words has max(n - w + 1, 1) shingles: short texts keep one shingle of all words.
    shingle_counts = np.where(token_counts > 0, np.maximum(token_counts - shingle_size + 1, 1), 0)
    offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(shingle_counts, out=offsets[1:])
    if int(offsets[-1]) == 0:
        return Shingles(np.zeros(0, dtype=_U32), offsets)
    # The n-gram starting at every flat token position at once (contiguous arithmetic, no gathers); positions
    # whose n-gram would cross into the next document are masked out afterwards.
    short = np.flatnonzero((token_counts > 0) & (token_counts < shingle_size))
    short_values = np.zeros(len(short), dtype=_U64)
    combined = hashes.copy()
    total_tokens = len(hashes)
    short_values[token_counts[short] == 1] = hashes[token_starts[short[token_counts[short] == 1]]]
    for k in range(1, shingle_size):
        head = combined[: total_tokens - k]
        head *= _NGRAM_MULT
        head += hashes[k:]
        done = token_counts[short] == k + 1
        short_values[done] = combined[token_starts[short[done]]]
    keep = np.ones(total_tokens, dtype=bool)
    full_ends = token_starts[1:][token_counts >= shingle_size]
    keep[(full_ends[:, None] - np.arange(1, shingle_size)[None, :]).ravel()] = False
    short_starts = token_starts[short]
    keep[np.repeat(short_starts, token_counts[short]) + _ranges(token_counts[short])] = False
    keep[short_starts] = True
    combined[short_starts] = short_values
    combined = combined[keep]
    return Shingles((_fmix64(combined) >> _U64(32)).astype(_U32), offsets)


def _ranges(counts: np.ndarray) -> np.ndarray:
    # [0..c0-1, 0..c1-1, ...] without a Python loop
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    firsts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(total) - firsts


def signatures_from_shingles(shingles: Shingles, config: MinHashConfig) -> np.ndarray:
    """Apply the `num_perm` permutations to every shingle hash and keep each document's minimum.

    Args:
        shingles: from `shingle_hashes`.
        config: permutations and seed.

    Returns:
        `(documents, num_perm)` uint32; a document without shingles is all `EMPTY_HASH`.
    """
    a, b = config.permutations
    offsets = shingles.offsets
    n_docs = len(offsets) - 1
    signatures = np.full((n_docs, config.num_perm), EMPTY_HASH, dtype=_U32)
    total = len(shingles.hashes)
    if total == 0:
        return signatures
    mixed = _fmix32(shingles.hashes)
    counts = np.diff(offsets)
    doc_of_shingle = np.repeat(np.arange(n_docs), counts)
    # Permutations on rows, shingles on columns: the per-document minimum then reduces contiguous memory,
    # measured 4x faster than the (shingles, num_perm) layout.
    a_col, b_col = a[:, None], b[:, None]
    buffer = np.empty((config.num_perm, _CHUNK_SHINGLES), dtype=_U32)
    for lo in range(0, total, _CHUNK_SHINGLES):
        hi = min(lo + _CHUNK_SHINGLES, total)
        out = buffer[:, : hi - lo]
        np.multiply(a_col, mixed[None, lo:hi], out=out)
        np.add(out, b_col, out=out)
        docs = doc_of_shingle[lo:hi]
        # Segment starts inside this chunk: a document may straddle chunks, so its minimum is merged below.
        seg_starts = np.flatnonzero(np.r_[True, docs[1:] != docs[:-1]])
        mins = np.minimum.reduceat(out, seg_starts, axis=1).T
        seg_docs = docs[seg_starts]
        signatures[seg_docs] = np.minimum(signatures[seg_docs], mins)
    return signatures


def compute_signatures(texts: Sequence[str], config: MinHashConfig, *, normalized: bool = False) -> np.ndarray:
    """MinHash signatures of many texts at once, datasketch-compatible (see the module docstring).

    Args:
        texts: raw texts, or already normalised ones with `normalized=True`.
        config: shingle size, permutations, seed.
        normalized: skip `normalize_text`.

    Returns:
        `(len(texts), num_perm)` uint32 array.

    Example:
        >>> sig = compute_signatures(["one two three four"], MinHashConfig(num_perm=16))
        >>> sig.dtype, sig.shape
        (dtype('uint32'), (1, 16))
    """
    norms = list(texts) if normalized else [normalize_text(t) for t in texts]
    signatures = np.empty((len(norms), config.num_perm), dtype=_U32)
    # Batches of about _BATCH_CHARS characters: the byte-level token hashing needs ~40 bytes of temporaries
    # per character, so a million short tasks at once would need gigabytes.
    lengths = np.fromiter((len(t) + 1 for t in norms), dtype=np.int64, count=len(norms))
    cuts = np.searchsorted(np.cumsum(lengths), np.arange(_BATCH_CHARS, int(lengths.sum()), _BATCH_CHARS))
    bounds = [0, *sorted(set(cuts.tolist()) - {0, len(norms)}), len(norms)]
    for lo, hi in pairwise(bounds):
        shingles = shingle_hashes(norms[lo:hi], config.shingle_size)
        signatures[lo:hi] = signatures_from_shingles(shingles, config)
    return signatures


def estimated_jaccard(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Row-wise estimated Jaccard: the fraction of equal slots of two `(n, num_perm)` signature arrays.

    Pairs where either side is empty (all `EMPTY_HASH`) get 0.0: empty documents never match.
    """
    equal = (left == right).mean(axis=1)
    empty = (left == EMPTY_HASH).all(axis=1) | (right == EMPTY_HASH).all(axis=1)
    return np.where(empty, 0.0, equal)


def as_lean_minhash(signature: np.ndarray, config: MinHashConfig) -> Any:
    """A `datasketch.LeanMinHash` holding `signature`, for `datasketch.MinHashLSH` or `jaccard`.

    Example:
        >>> lean = as_lean_minhash(compute_signatures(["a b c"], MinHashConfig())[0], MinHashConfig())
        >>> lean.scheme
        'affine32'
    """
    from datasketch import LeanMinHash

    return LeanMinHash(seed=config.seed, hashvalues=signature, scheme=SIGNATURE_SCHEME)
