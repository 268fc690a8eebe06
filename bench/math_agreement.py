"""`math_answer` against labelled math rows and math-verify alone: `.venv/bin/python bench/math_agreement.py`.

Three sources, each row with a known right verdict:

- GSM8K's test split (`../shared/data/gsm8k`, MIT): each row's gold is its `#### N`, read by
  `math_answer.answer_params`; four completions per row with known verdicts: the reference solution (right), the
  reference with its final answer boxed (right), the final answer off by one (wrong), and the final answer hedged
  with another number (`#### N or N+1`, wrong).
- NeMo Gym's math_with_judge example rollouts (vendored under tests/interop/data, Apache-2.0): its gold
  `expected_answer`, the rollout's text, and NeMo Gym's own reward as the label.
- The forms models write (`tests/math_forms.py`, the verifier's table test): fractions, radicals, intervals, sets,
  units, hedges, a model correcting itself, hostile answers. math-verify alone is not run on the hostile ones
  (`unsafe_answer`): `10^{10^{10}}` does not finish without its signal timeout; they are counted for it as not run.

Each completion is judged three ways: `math_answer`; math-verify alone (`parse` of the gold and of the whole
completion with its default extraction, then `verify`), the baseline; and `numeric_answer` where the gold is a
number. Prints agreement with the labels per source, the rows where `math_answer` and math-verify differ by
kind, and one JSON line. Exits 1 when `math_answer` agrees with the labels on fewer than 99% of the rows.
`--limit N` takes the first N GSM8K rows (the smoke run: a few seconds).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.math_forms import ACCEPTS, REJECTS  # noqa: E402
from tests.paths import GSM8K  # noqa: E402
from validators.registry import REGISTRY, Completion, VerifyContext  # noqa: E402
from validators.verifiers.math_answer import MathAnswer  # noqa: E402

NEMO_GYM_MATH = REPO / "tests" / "interop" / "data" / "nemo_gym" / "math_with_judge" / "example_rollouts.jsonl"
AGREEMENT_TARGET = 0.99
CONTEXT = VerifyContext()


def gsm8k_cases(limit: int | None) -> Iterator[tuple[str, str, str, bool]]:
    """(source kind, gold, completion, right) for GSM8K's test rows."""
    math = MathAnswer()
    with (GSM8K / "test.jsonl").open(encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            if limit is not None and number >= limit:
                return
            solution = json.loads(line)["answer"]
            gold = math.answer_params(solution)["answer"]
            body = solution.rsplit("####", 1)[0]
            wrong = str(int(gold.replace(",", "")) + 1)
            yield "reference", gold, solution, True
            yield "boxed", gold, f"{body}The answer is $\\boxed{{{gold}}}$.", True
            yield "off_by_one", gold, f"{body}#### {wrong}", False
            yield "hedged", gold, f"{body}#### {gold} or {wrong}", False


def nemo_gym_cases() -> Iterator[tuple[str, str, str, bool]]:
    with NEMO_GYM_MATH.open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            text = "".join(
                part.get("text", "")
                for item in row["response"]["output"]
                if item.get("type") == "message"
                for part in item.get("content", [])
            )
            yield "rollout", row["expected_answer"], text, row["reward"] == 1.0


def form_cases() -> Iterator[tuple[str, str, str, bool]]:
    for gold, text in ACCEPTS:
        yield "right", gold, text, True
    for gold, text, reason in REJECTS:
        yield reason, gold, text, False


def math_verify_alone(gold: str, completion: str) -> bool:
    from math_verify import parse, verify

    gold_text = gold if "$" in gold or "\\(" in gold else f"${gold}$"
    return bool(
        verify(parse(gold_text, parsing_timeout=None), parse(completion, parsing_timeout=None), timeout_seconds=None)
    )


def judge(name: str, gold: str, completion: str) -> bool | None:
    verifier = REGISTRY.get(name)
    params: dict[str, Any] = {"answer": gold}
    if verifier.params_problems(params, CONTEXT):
        return None  # numeric_answer on a gold that is not a number
    return verifier.check(params, Completion(completion), CONTEXT).passed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="the first N GSM8K test rows (default: all 1,319)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # math-verify warns once per process that its (signal) timeouts are off
    started = time.perf_counter()
    sources = {
        "gsm8k": list(gsm8k_cases(args.limit)),
        "nemo_gym_math": list(nemo_gym_cases()),
        "forms": list(form_cases()),
    }
    figures: dict[str, Any] = {}
    differences: Counter[str] = Counter()
    print("| source | rows | math_answer agrees | math-verify alone agrees | numeric_answer agrees |")
    print("| --- | --- | --- | --- | --- |")
    for source, cases in sources.items():
        counts: Counter[str] = Counter()
        numeric_rows = not_run = 0
        for kind, gold, completion, right in cases:
            ours = judge("math_answer", gold, completion)
            if kind == "unsafe_answer":
                not_run += 1
                counts["math_answer"] += ours == right
                continue
            theirs = math_verify_alone(gold, completion)
            numeric = judge("numeric_answer", gold, completion)
            counts["math_answer"] += ours == right
            counts["math_verify"] += theirs == right
            if numeric is not None:
                numeric_rows += 1
                counts["numeric_answer"] += numeric == right
            if ours != theirs:
                who = "math_answer" if ours == right else "math-verify alone"
                differences[f"{source}/{kind}: {who} right on {completion[-60:]!r} (gold {gold})"] += 1
        rows = len(cases)
        figures[source] = {
            "rows": rows,
            "math_answer": counts["math_answer"] / rows,
            "math_verify": counts["math_verify"] / (rows - not_run),
            "math_verify_not_run": not_run,
            "numeric_answer": counts["numeric_answer"] / numeric_rows if numeric_rows else None,
            "numeric_rows": numeric_rows,
        }
        numeric_cell = f"{counts['numeric_answer']}/{numeric_rows}" if numeric_rows else "n/a (gold not a number)"
        baseline = f"{counts['math_verify']}/{rows - not_run}" + (f" ({not_run} not run)" if not_run else "")
        print(f"| {source} | {rows} | {counts['math_answer']}/{rows} | {baseline} | {numeric_cell} |")
    print("\nwhere math_answer and math-verify alone differ:")
    for kind, count in sorted(differences.items()):
        print(f"  {kind}: {count}")
    if not differences:
        print("  nowhere")
    total = sum(len(cases) for cases in sources.values())
    agreed = sum(figures[source]["math_answer"] * figures[source]["rows"] for source in sources)
    figures.update(
        {
            "math_answer_agreement": round(agreed / total, 4),
            "differences": dict(differences),
            "target": AGREEMENT_TARGET,
            "met": agreed / total >= AGREEMENT_TARGET,
            "seconds": round(time.perf_counter() - started, 1),
        }
    )
    print(json.dumps(figures, sort_keys=True))
    return 0 if figures["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
