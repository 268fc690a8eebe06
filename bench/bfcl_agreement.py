"""The `tool_call` verifier against BFCL's data and its own AST checker: `.venv/bin/python bench/bfcl_agreement.py`.

For the simple_python, multiple, parallel, parallel_multiple and irrelevance categories of `bfcl-eval` (installed
by `make install-dev`), every task becomes a `tool_call` task and gets generated calls whose right verdict is
known (every combination of acceptable values, up to 16 per task; one call list per mutation; for irrelevance, a
plain-text answer and a call per function): see `tests/bfcl.py`. Prints, per category, how many tasks were kept,
how many acceptable calls pass and mutations fail, and how often seedwheel's verdict equals BFCL's checker's on
the same calls; then the mutations by kind; then every figure as one JSON object on the last line. Exits 1 if an
acceptable call fails, a mutation passes, or agreement is under 99.5%. Runs in about 20 s on 2 cores;
`--categories` measures some of them (`--categories simple_python`: a few seconds).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.bfcl import (  # noqa: E402
    ACCEPTABLE,
    CATEGORIES,
    INSTALL_HINT,
    IRRELEVANCE_KINDS,
    MUTATIONS,
    VARIANTS,
    bfcl_data,
    measure,
)

AGREEMENT_TARGET = 0.995


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--categories", nargs="+", choices=CATEGORIES, default=CATEGORIES, help="BFCL categories (default: all)"
    )
    args = parser.parse_args()
    data = bfcl_data()
    if data is None:
        print(f"bfcl-eval is not installed: {INSTALL_HINT}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    results = measure(data, tuple(args.categories))
    elapsed = time.perf_counter() - started
    header = f"{'category':<18} {'tasks':>5} {'kept':>5} {'cases':>6} {'right pass':>11} {'wrong fail':>11}"
    print(f"{header} {'agree with BFCL':>16}")
    figures: dict[str, dict[str, float | int]] = {}
    for category, result in results.items():
        good = [ours for case, ours, _ in result.verdicts if case.should_pass]
        bad = [ours for case, ours, _ in result.verdicts if not case.should_pass]
        figures[category] = {
            "tasks": result.items,
            "kept": result.items - len(result.excluded),
            "cases": len(result.verdicts),
            "right_pass_rate": sum(good) / len(good),
            "wrong_fail_rate": 1 - sum(bad) / len(bad),
            "agreement": result.agreement,
            "disagreements": len(result.disagreements()),
        }
        row = figures[category]
        print(
            f"{category:<18} {row['tasks']:>5} {row['kept']:>5} {row['cases']:>6} "
            f"{row['right_pass_rate']:>11.2%} {row['wrong_fail_rate']:>11.2%} {row['agreement']:>16.2%}"
        )
    verdicts = [row for result in results.values() for row in result.verdicts]
    overall = sum(ours == theirs for _, ours, theirs in verdicts) / len(verdicts)
    print(f"{'all':<18} {len(verdicts):>18} cases, agreement with BFCL {overall:.2%} ({elapsed:.1f} s)")

    print(f"\n{'kind':<18} {'cases':>6} {'seedwheel passes':>17} {'BFCL passes':>12}")
    by_kind: dict[str, dict[str, int]] = {}
    for kind in (ACCEPTABLE, *VARIANTS, *MUTATIONS, *IRRELEVANCE_KINDS):
        rows = [(ours, theirs) for case, ours, theirs in verdicts if case.kind == kind]
        by_kind[kind] = {"cases": len(rows), "seedwheel": sum(o for o, _ in rows), "bfcl": sum(t for _, t in rows)}
        print(f"{kind:<18} {len(rows):>6} {by_kind[kind]['seedwheel']:>17} {by_kind[kind]['bfcl']:>12}")

    excluded = {item: problem for result in results.values() for item, problem in result.excluded.items()}
    print(f"\nleft out ({len(excluded)}: the ground truth breaks its own function doc):")
    for item, problem in excluded.items():
        print(f"  {item}: {problem[:150]}")
    wrong = sum(len(result.wrong()) for result in results.values())
    summary = {"agreement": overall, "cases": len(verdicts), "wrong_verdicts": wrong, "left_out": len(excluded)}
    print(json.dumps({**summary, "categories": figures, "kinds": by_kind, "seconds": round(elapsed, 1)}))
    return 0 if wrong == 0 and overall >= AGREEMENT_TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
