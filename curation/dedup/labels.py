"""Label rows as exact or near duplicates (label first, filter later) and find train/eval near-duplicates.

How `label_duplicates` decides:

1. Texts are normalised (`normalize_text`). A row with nothing left is never a duplicate of anything (not even
   of another empty row) and is never indexed: it is its own cluster.
2. A row whose key is already in the index (accepted by an earlier run) is left as it is: not a duplicate,
   its own cluster, not indexed again. Reruns are idempotent.
3. Exact duplicates: rows with equal normalised text form one group; a group whose text equals an indexed
   row's joins that row.
4. Near duplicates: one signature per group; LSH candidate pairs (among the new rows, and between new and
   indexed rows through `DedupIndex.candidates`) are kept only when their estimated Jaccard is at least
   `config.threshold`; groups and indexed rows joined by kept pairs form clusters (union-find, so
   similarity is transitive: A~B and B~C puts A, B and C in one cluster).
5. Each cluster keeps one row: an indexed row when there is one (the earliest committed), else the new row
   with the smallest `priority` (ties: input order). Every other member is a duplicate of the kept row:
   `duplicate_of` is its key, `cluster_id` is `str(kept key)` (so a cluster keeps its id across runs), and
   `kind` is `"exact"` when the member's normalised text equals the kept row's, else `"near"`.

Rows kept by this run are staged in the index (if one is given); `DedupIndex.commit()` persists them.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from core import SeedwheelError
from curation.dedup.index import DedupIndex
from curation.dedup.lsh import band_keys, connected_components, verified_pairs, verify
from curation.dedup.minhash import MinHashConfig, compute_signatures, exact_hash, normalize_text

DuplicateKind = Literal["exact", "near"]


class DedupInputError(SeedwheelError, ValueError):
    """Inputs that cannot be deduplicated as given (mismatched lengths, repeated keys, a bad JSONL line)."""


@dataclass(frozen=True, slots=True)
class DedupLabel:
    """One row's dedup label: whether it duplicates a kept row, its cluster, the kept row's key, and how."""

    is_duplicate: bool
    cluster_id: str
    duplicate_of: Hashable | None
    kind: DuplicateKind | None


@dataclass(frozen=True)
class LabelArrays:
    """Column form of the labels (what `label_duplicates` builds before making `DedupLabel`s).

    `keeper[i]` is the kept row of row i's cluster: `>= 0` a row of this batch, `< 0` the indexed row with
    ordinal `-keeper[i] - 1`. `kind` is 0 (kept), 1 (exact) or 2 (near).
    """

    keeper: np.ndarray
    kind: np.ndarray
    staged: int

    @property
    def is_duplicate(self) -> np.ndarray:
        return self.kind > 0


def _rank(priority: Sequence[Any] | None, n: int) -> np.ndarray:
    # Position of each row in keeper order: by priority, ties by input order (the sort is stable).
    if priority is None:
        return np.arange(n)
    order = sorted(range(n), key=priority.__getitem__)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    return rank


def label_arrays(
    keys: Sequence[Hashable],
    texts: Sequence[str],
    priority: Sequence[Any] | None,
    config: MinHashConfig,
    index: DedupIndex | None = None,
) -> LabelArrays:
    """`label_duplicates` as arrays (no per-row objects): for large batches and `dedup_jsonl`."""
    n = len(keys)
    if len(texts) != n or (priority is not None and len(priority) != n):
        raise DedupInputError(
            f"keys, texts and priority must have one entry per row: got {n} keys, {len(texts)} texts, "
            f"{'no' if priority is None else len(priority)} priorities - pass equal-length sequences"
        )
    if len(set(keys)) != n:
        repeated = pd.Series(list(keys), dtype=object)
        examples = repeated[repeated.duplicated()].head(3).tolist()
        raise DedupInputError(f"keys must be unique, {examples} repeat - deduplicate keys (e.g. task_id) first")
    if index is not None and index.config.name != config.name:
        raise DedupInputError(f"index was opened for {index.config.name}, labelling uses {config.name}")
    norms = [normalize_text(t) for t in texts]
    keeper = np.arange(n, dtype=np.int64)
    kind = np.zeros(n, dtype=np.int8)
    old = index if index is not None and len(index) else None  # the indexed rows this batch is compared with
    n_old = len(old) if old is not None else 0
    known = old.ordinals_of(keys) >= 0 if old is not None else np.zeros(n, dtype=bool)
    active = np.flatnonzero(np.fromiter((bool(t) for t in norms), dtype=bool, count=n) & ~known)
    if len(active) == 0:
        return LabelArrays(keeper, kind, 0)

    # Exact groups (numbered in first-seen order), and the indexed row each group's text equals, if any.
    hashes = np.fromiter((exact_hash(norms[i]) for i in active), dtype=np.uint64, count=len(active))
    group_of, group_hashes = pd.factorize(hashes)
    n_groups = len(group_hashes)
    first_row = np.full(n_groups, len(active), dtype=np.int64)
    np.minimum.at(first_row, group_of, np.arange(len(active)))
    old_exact = old.exact_matches(np.asarray(group_hashes)) if old is not None else np.full(n_groups, -1)

    # One signature per group not already settled by an exact match with the index.
    signed = np.flatnonzero(old_exact < 0)
    signatures = compute_signatures([norms[active[first_row[g]]] for g in signed], config, normalized=True)
    edges = [signed[verified_pairs(signatures, config)]]  # group-group edges
    old_nodes = np.zeros(0, dtype=np.int64)
    if old is not None:
        rows, ordinals = old.candidates(signatures, band_keys(signatures, config))
        scores = verify(signatures, np.stack([rows, ordinals], 1), old.signatures)
        rows, ordinals = rows[scores >= config.threshold - 1e-12], ordinals[scores >= config.threshold - 1e-12]
        exact_groups = np.flatnonzero(old_exact >= 0)
        # Indexed rows taking part become nodes n_groups.. (numbered by ordinal).
        old_nodes, old_node_of = np.unique(np.concatenate([ordinals, old_exact[exact_groups]]), return_inverse=True)
        edges.append(np.stack([signed[rows], n_groups + old_node_of[: len(rows)]], 1))
        edges.append(np.stack([exact_groups, n_groups + old_node_of[len(rows) :]], 1))
    component = connected_components(n_groups + len(old_nodes), np.concatenate(edges).astype(np.int64))

    # Keeper order: indexed rows by ordinal (0..n_old-1), then this batch's rows by priority (n_old..).
    rank = n_old + _rank(None if priority is None else [priority[i] for i in active.tolist()], len(active))
    node_best = np.full(n_groups + len(old_nodes), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(node_best, group_of, rank)
    node_best[n_groups:] = old_nodes
    component_best = pd.Series(node_best).groupby(component).transform("min").to_numpy()
    best = component_best[group_of]  # per active row: the rank of its cluster's kept row
    row_at_rank = np.empty(len(active), dtype=np.int64)
    row_at_rank[rank - n_old] = np.arange(len(active))
    from_index = best < n_old
    kept_active = np.where(from_index, 0, row_at_rank[np.where(from_index, n_old, best) - n_old])
    keeper[active] = np.where(from_index, -best - 1, active[kept_active])
    is_dup = best != rank
    kept_hash = hashes[kept_active]
    if old is not None and from_index.any():  # only indexed rows have a rank below n_old
        kept_hash = np.where(from_index, old.exact_hashes[np.where(from_index, best, 0)], kept_hash)
    kind[active] = np.where(is_dup, np.where(kept_hash == hashes, 1, 2), 0)

    staged = 0
    if index is not None:
        accepted = np.flatnonzero(~is_dup)
        signature_of_group = np.full(n_groups, -1, dtype=np.int64)
        signature_of_group[signed] = np.arange(len(signed))
        index.stage(
            [keys[i] for i in active[accepted].tolist()],
            signatures[signature_of_group[group_of[accepted]]],
            hashes[accepted],
        )
        staged = len(accepted)
    return LabelArrays(keeper, kind, staged)


def label_duplicates(
    keys: Sequence[Hashable],
    texts: Sequence[str],
    priority: Sequence[Any] | None,
    config: MinHashConfig,
    index: DedupIndex | None = None,
) -> list[DedupLabel]:
    """Label every row as kept or as an exact/near duplicate of a kept row (see the module docstring).

    Args:
        keys: unique row keys (e.g. `task_id`; strings or integers if an index persists them).
        texts: the text compared per row (e.g. the prompt's message contents).
        priority: one sortable value per row; the smallest is kept in each cluster, e.g.
            `(lineage.source != "seed", depth, task_id)` to prefer seeds, then the earliest lineage, then
            the smallest key. None: input order.
        config: shingles, permutations, threshold.
        index: rows accepted by earlier runs; matches against them make a row a duplicate of the earlier
            key. This run's kept rows are staged in it (call `index.commit()` after saving the labels).

    Returns:
        One `DedupLabel` per row, in input order.

    Example:
        >>> texts = ["Two plus two?", "two  plus TWO?", "Name a colour."]
        >>> labels = label_duplicates(["a", "b", "c"], texts, None, MinHashConfig())
        >>> [(x.is_duplicate, x.duplicate_of, x.kind) for x in labels]
        [(False, None, None), (True, 'a', 'exact'), (False, None, None)]
    """
    arrays = label_arrays(keys, texts, priority, config, index)
    kinds: tuple[DuplicateKind | None, ...] = (None, "exact", "near")
    labels = []
    # A negative keeper is an indexed row; the index's keys are parsed only when some row needs them.
    old_keys = index.keys if index is not None and (arrays.keeper < 0).any() else []
    for kept, kind in zip(arrays.keeper.tolist(), arrays.kind.tolist(), strict=True):
        kept_key = keys[kept] if kept >= 0 else old_keys[-kept - 1]
        labels.append(DedupLabel(kind > 0, str(kept_key), kept_key if kind > 0 else None, kinds[kind]))
    return labels


def near_duplicate_pairs(
    left_texts: Sequence[str], right_texts: Sequence[str], config: MinHashConfig
) -> list[tuple[int, int, float]]:
    """Pairs (left i, right j, estimated Jaccard) with Jaccard >= `config.threshold`, e.g. train vs eval.

    Same normalisation, signatures, LSH and verification as `label_duplicates`; pairs within one side are
    not reported, and empty texts never pair.

    Args:
        left_texts: e.g. training prompts.
        right_texts: e.g. evaluation prompts.
        config: shingles, permutations, threshold.

    Returns:
        Sorted by (i, j).

    Example:
        >>> near_duplicate_pairs(["What is 2 + 2?", "Name a colour."], ["what is 2+2"], MinHashConfig())
        [(0, 0, 1.0)]
    """
    signatures = compute_signatures([*left_texts, *right_texts], config)
    split = len(left_texts)
    pairs, scores = verified_pairs(signatures, config, lambda i, j: (i < split) != (j < split), with_scores=True)
    pairs = np.sort(pairs, axis=1)
    result = sorted(zip(pairs[:, 0].tolist(), (pairs[:, 1] - split).tolist(), scores.tolist(), strict=True))
    return [(i, j, round(s, 6)) for i, j, s in result]
