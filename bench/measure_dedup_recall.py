"""Near-dedup recall and false pairs on labelled pairs: which threshold and band layout to ship.

`.venv/bin/python bench/measure_dedup_recall.py`

GSM8K `test.jsonl` and `test_socratic.jsonl` hold the same 1,319 questions line for line, the socratic answers
rewritten with inserted sub-questions: line i of one and line i of the other are a labelled near-duplicate
pair (text = question + answer). All 2,638 documents are deduplicated together with each configuration of a
sweep (shingle size, permutations, threshold, bands x rows); a flagged pair is *true* when it is a labelled
pair, *false* otherwise. Reports recall of the labelled pairs, false pairs per 10,000 documents, and the
exact word-shingle Jaccard of the labelled pairs (what MinHash estimates). Checks that the shipped default
(`MinHashConfig()`) reaches recall >= 0.99 with <= 1 false pair per 10,000 documents. Prints a table, then
every figure as one JSON object on the last line; exits 1 if the default misses a target.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TypedDict

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from curation.dedup.lsh import band_keys, candidate_pairs, verify  # noqa: E402
from curation.dedup.minhash import MinHashConfig, compute_signatures, normalize_text  # noqa: E402

GSM8K = REPO.parent / "shared" / "data" / "gsm8k"
RECALL_TARGET = 0.99
FALSE_PER_10K_TARGET = 1.0


def load_pairs(limit: int | None = None) -> tuple[list[str], list[str]]:
    """question + answer of test.jsonl and test_socratic.jsonl, line for line."""
    sides = []
    for name in ("test.jsonl", "test_socratic.jsonl"):
        rows = [json.loads(line) for line in (GSM8K / name).read_text(encoding="utf-8").splitlines()[:limit]]
        sides.append([f"{r['question']}\n{r['answer']}" for r in rows])
    return sides[0], sides[1]


def shingle_jaccard(left: list[str], right: list[str], size: int) -> np.ndarray:
    """Exact Jaccard of the word-shingle sets of each labelled pair."""

    def shingles(text: str) -> set[tuple[str, ...]]:
        words = normalize_text(text).split()
        return {tuple(words[i : i + size]) for i in range(max(len(words) - size + 1, 1))}

    return np.array(
        [len(a & b) / len(a | b) for a, b in ((shingles(x), shingles(y)) for x, y in zip(left, right, strict=True))]
    )


class Evaluation(TypedDict):
    """One configuration's figures (a row of the table, an item of the JSON line's `sweep`)."""

    name: str
    shingle_size: int
    num_perm: int
    threshold: float
    bands: int
    rows: int
    candidate_recall: float
    recall: float
    false_pairs: int
    false_per_10k_docs: float
    false_candidates: int
    closest_false: float
    lsh_seconds: float


def evaluate(config: MinHashConfig, signatures: np.ndarray, n_pairs: int) -> Evaluation:
    """Recall and false pairs of one configuration on precomputed signatures (none of them is empty)."""
    started = time.perf_counter()
    candidates = candidate_pairs(band_keys(signatures, config))
    scores = verify(signatures, candidates)
    seconds = time.perf_counter() - started
    labelled = (candidates[:, 1] - candidates[:, 0] == n_pairs) & (candidates[:, 0] < n_pairs)
    flagged = scores >= config.threshold
    found = int((labelled & flagged).sum())
    false = int((~labelled & flagged).sum())
    bands, rows = config.lsh_params
    return {
        "name": config.name,
        "shingle_size": config.shingle_size,
        "num_perm": config.num_perm,
        "threshold": config.threshold,
        "bands": bands,
        "rows": rows,
        "candidate_recall": round(int(labelled.sum()) / n_pairs, 4),
        "recall": round(found / n_pairs, 4),
        "false_pairs": false,
        "false_per_10k_docs": round(false / (2 * n_pairs) * 10_000, 2),
        "false_candidates": int((~labelled).sum()),
        "closest_false": round(float(scores[~labelled].max()), 3) if (~labelled).any() else 0.0,
        "lsh_seconds": round(seconds, 3),
    }


def sweep_configs() -> list[MinHashConfig]:
    """Thresholds with derived bands for several shingle sizes, then explicit layouts and sizes at 128."""
    configs = [MinHashConfig(shingle_size=w, threshold=t) for w in (2, 3, 5) for t in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)]
    configs += [MinHashConfig(threshold=t) for t in (0.45, 0.55, 0.65)]
    configs += [MinHashConfig(threshold=t, bands=b, rows=r) for t in (0.5, 0.7) for b, r in ((16, 8), (64, 2))]
    configs += [MinHashConfig(num_perm=p, threshold=0.5) for p in (64, 256)]
    return configs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="use only the first N pairs")
    args = parser.parse_args()
    left, right = load_pairs(args.limit)
    n_pairs = len(left)
    texts = left + right
    default = MinHashConfig()
    configs = [*sweep_configs(), default]
    signatures: dict[tuple[int, int, int], np.ndarray] = {}
    results = []
    for config in configs:
        layout = (config.shingle_size, config.num_perm, config.seed)
        if layout not in signatures:
            signatures[layout] = compute_signatures(texts, config)
        results.append(evaluate(config, signatures[layout], n_pairs))
    jaccard = {
        f"w{w}": {
            f"p{q}": round(float(v), 3)
            for q, v in zip((10, 50, 90), np.percentile(shingle_jaccard(left, right, w), [10, 50, 90]), strict=True)
        }
        for w in (2, 3, 5)
    }
    chosen = results[-1]
    ok = chosen["recall"] >= RECALL_TARGET and chosen["false_per_10k_docs"] <= FALSE_PER_10K_TARGET

    header = (
        f"{'config':<20} {'w':>2} {'perm':>4} {'thr':>4} {'b x r':>7} {'cand.rec':>8} {'recall':>7} {'false':>5} "
        f"{'/10k docs':>9} {'false cand.':>11} {'closest false':>13}"
    )
    print(f"GSM8K test vs test_socratic: {n_pairs} labelled pairs, {len(texts)} documents")
    print(f"labelled-pair shingle Jaccard percentiles (p10/p50/p90): {jaccard}")
    print(header)
    print("-" * len(header))
    for row in results[:-1]:
        print(
            f"{row['name']:<20} {row['shingle_size']:>2} {row['num_perm']:>4} {row['threshold']:>4} "
            f"{str(row['bands']) + 'x' + str(row['rows']):>7} {row['candidate_recall']:>8.4f} {row['recall']:>7.4f} "
            f"{row['false_pairs']:>5} {row['false_per_10k_docs']:>9} {row['false_candidates']:>11} "
            f"{row['closest_false']:>13}"
        )
    verdict = "PASS" if ok else "FAIL"
    print(
        f"default {chosen['name']} threshold {chosen['threshold']}: recall {chosen['recall']:.4f} "
        f"(target >= {RECALL_TARGET}), {chosen['false_per_10k_docs']} false pairs per 10k docs "
        f"(target <= {FALSE_PER_10K_TARGET}): {verdict}"
    )
    summary = {"pairs": n_pairs, "documents": len(texts), "jaccard_percentiles": jaccard}
    print(json.dumps({**summary, "sweep": results[:-1], "default": chosen, "pass": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
