"""Exact and near-duplicate detection: MinHash + LSH, labelled not dropped, incremental across runs.

- `minhash`: `MinHashConfig`, `normalize_text`, vectorized datasketch-compatible signatures.
- `lsh`: numpy LSH banding, candidate pairs, verification, union-find.
- `labels`: `label_duplicates` (exact first, then verified near-duplicates, a deterministic keeper per
  cluster) and `near_duplicate_pairs` (train vs eval decontamination).
- `index`: `DedupIndex`, the accepted rows of earlier runs persisted in segments with checksums.
- `jsonl`: `dedup_jsonl`, the `seedwheel dedup` command's work.

Example:
    >>> from curation.dedup import MinHashConfig, label_duplicates
    >>> [x.is_duplicate for x in label_duplicates([1, 2], ["Hello, world!", "hello world"], None, MinHashConfig())]
    [False, True]
"""

from curation.dedup.index import DedupIndex, IndexCorruptError
from curation.dedup.jsonl import DedupSummary, dedup_jsonl
from curation.dedup.labels import (
    DedupInputError,
    DedupLabel,
    LabelArrays,
    label_arrays,
    label_duplicates,
    near_duplicate_pairs,
)
from curation.dedup.minhash import (
    DedupConfigError,
    MinHashConfig,
    as_lean_minhash,
    compute_signatures,
    exact_hash,
    normalize_text,
)

__all__ = [
    "DedupConfigError",
    "DedupIndex",
    "DedupInputError",
    "DedupLabel",
    "DedupSummary",
    "IndexCorruptError",
    "LabelArrays",
    "MinHashConfig",
    "as_lean_minhash",
    "compute_signatures",
    "dedup_jsonl",
    "exact_hash",
    "label_arrays",
    "label_duplicates",
    "near_duplicate_pairs",
    "normalize_text",
]
