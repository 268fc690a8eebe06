"""The promotion gate's statistics at scale: `.venv/bin/python bench/bench_bootstrap.py`.

Times `training.stats.evaluate` (pass@1 and pass@4 per family and overall, bootstrap intervals) and `compare`
(the paired bootstrap) over thousands of tasks with 10,000 resamples, against a naive baseline measured in the
same run: a Python loop that draws one resample of task indices at a time and takes its mean (timed on a few
hundred resamples, scaled to 10,000). Ratios travel between machines, absolute times do not. Target: the gate's
statistics (every interval) at least 2x faster than the naive loop's single pass@1 interval. Prints a table, then
every figure as one JSON object on the last line. Runs in a few seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from training.stats import compare, evaluate  # noqa: E402

RESAMPLES = 10_000
TARGET_SPEEDUP = 2.0
FAMILIES = ("sql", "tool_call", "arithmetic")


def synthetic_verdicts(tasks: int, samples: int, rate: float, seed: int) -> dict[str, list[bool]]:
    """task_id -> `samples` pass/fail draws at `rate`."""
    rng = np.random.default_rng(seed)
    return {f"t{i}": (rng.random(samples) < rate).tolist() for i in range(tasks)}


def naive_seconds(verdicts: dict[str, list[bool]], loops: int) -> float:
    """Seconds for RESAMPLES naive bootstrap resamples of the pass@1 mean, timed on `loops` and scaled."""
    per_task = np.array([np.mean(v) for v in verdicts.values()])
    rng = np.random.default_rng(0)
    started = time.perf_counter()
    means = []
    for _ in range(loops):
        picks = rng.integers(0, len(per_task), len(per_task))
        means.append(float(per_task[picks].mean()))
    return (time.perf_counter() - started) * RESAMPLES / loops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--naive-loops", type=int, default=500)
    args = parser.parse_args()

    candidate = synthetic_verdicts(args.tasks, 4, 0.35, seed=3)
    baseline = synthetic_verdicts(args.tasks, 4, 0.3, seed=2)
    families = {task: FAMILIES[i % len(FAMILIES)] for i, task in enumerate(baseline)}

    started = time.perf_counter()
    evaluate(baseline, families, ks=[1, 4], resamples=RESAMPLES)
    evaluate_s = time.perf_counter() - started
    started = time.perf_counter()
    compare(candidate, baseline, families, resamples=RESAMPLES)
    compare_s = time.perf_counter() - started
    naive_s = naive_seconds(baseline, args.naive_loops)

    gate_s = evaluate_s + compare_s
    speedup = naive_s / gate_s
    met = speedup >= TARGET_SPEEDUP
    print(f"{args.tasks} tasks x 4 samples, {RESAMPLES:,} resamples, {len(FAMILIES)} families")
    print(f"{'step':<58} {'seconds':>9}")
    print(f"{'evaluate (pass@1, pass@4; per family and overall)':<58} {evaluate_s:>9.3f}")
    print(f"{'compare (paired, per family and overall)':<58} {compare_s:>9.3f}")
    print(f"{'naive loop: one pass@1 interval (scaled from a sample)':<58} {naive_s:>9.3f}")
    print(f"speedup {speedup:.1f}x over the naive loop; target >= {TARGET_SPEEDUP:.0f}x: {'met' if met else 'MISSED'}")
    figures = {
        "bench": "bootstrap",
        "tasks": args.tasks,
        "resamples": RESAMPLES,
        "evaluate_s": round(evaluate_s, 4),
        "compare_s": round(compare_s, 4),
        "naive_s": round(naive_s, 4),
        "speedup": round(speedup, 2),
        "target_speedup": TARGET_SPEEDUP,
        "met": met,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
