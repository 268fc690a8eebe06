"""Linear time on hostile text: `.venv/bin/python bench/bench_adversarial_inputs.py`.

A reward function and the failure-log redactor read whatever a policy or a production log holds. Each hostile
pattern below (the ones the verifier and redaction tests feed in) is timed at n and at 4n repetitions; the
growth ratio t(4n) / t(n) is about 4 for linear work and about 16 for quadratic. Ratios travel between machines,
absolute times do not. Target: every ratio at most 8. Prints a table, then every figure as one JSON object on
the last line. Runs in under a minute on 2 cores; `--quick` uses a quarter of the sizes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from failures.redaction import redact_text  # noqa: E402
from validators.registry import REGISTRY, Completion, VerifyContext  # noqa: E402

TARGET_RATIO = 8.0
CONTEXT = VerifyContext()
JSON_PARAMS = {
    "schema": {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]},
    "expected": {"total": 12.5},
}


def json_answer(text: str) -> object:
    return REGISTRY.get("json_schema").check(JSON_PARAMS, Completion(text), CONTEXT)


def numeric_answer(text: str) -> object:
    return REGISTRY.get("numeric_answer").check({"answer": 18}, Completion(text), CONTEXT)


# (reader, pattern name, text for n repetitions): n is 50,000 in the tests' sizes.
CASES: list[tuple[str, Callable[[str], object], str, Callable[[int], str]]] = [
    ("json_schema", json_answer, "openers that never close", lambda n: "{" * (4 * n)),
    ("json_schema", json_answer, "deep nesting", lambda n: "[" * (2 * n) + "]" * (2 * n)),
    ("json_schema", json_answer, "many small non-JSON objects", lambda n: "{x} " * n),
    ("json_schema", json_answer, "unbalanced quotes in braces", lambda n: '{"' * (2 * n)),
    ("numeric", numeric_answer, "box openers that never close", lambda n: "\\boxed{" * n),
    ("numeric", numeric_answer, "markers without numbers", lambda n: "#### " * n),
    ("numeric", numeric_answer, "marker phrases + whitespace", lambda n: ("answer" + " " * 10_000) * (n // 2500)),
    ("redaction", redact_text, "one endless identifier", lambda n: "a_" * n),
    ("redaction", redact_text, "digit groups", lambda n: "1 " * n),
    ("redaction", redact_text, "almost dotted quads", lambda n: "1." * n),
    ("redaction", redact_text, "almost IPv6", lambda n: ":" * (2 * n)),
    ("redaction", redact_text, "almost e-mail addresses", lambda n: "a@" * n),
    ("redaction", redact_text, "assignments without values", lambda n: "password=" * (n // 5)),
    ("redaction", redact_text, "random-looking token", lambda n: "Ab1" * (2 * n // 3)),
    ("redaction", redact_text, "long dotted local parts", lambda n: ("a." * 30 + "@") * (n // 30)),
]


class Growth(NamedTuple):
    """One pattern's times at n and 4n repetitions."""

    reader: str
    pattern: str
    n_s: float
    four_n_s: float

    @property
    def ratio(self) -> float:
        return self.four_n_s / self.n_s


def best_of(func: Callable[[str], object], text: str, repeat: int) -> float:
    """The fastest of `repeat` calls, in seconds (the least disturbed by other work on the machine)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func(text)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a quarter of the sizes (a smoke run)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n = 12_500 if args.quick else 50_000

    rows = [
        Growth(reader, pattern, best_of(func, make(n), args.repeat), best_of(func, make(4 * n), args.repeat))
        for reader, func, pattern, make in CASES
    ]

    print(f"{'reader':<12} {'pattern':<32} {'n (s)':>9} {'4n (s)':>9} {'4n/n':>6}")
    for row in rows:
        print(f"{row.reader:<12} {row.pattern:<32} {row.n_s:>9.4f} {row.four_n_s:>9.4f} {row.ratio:>6.1f}")
    worst = max(rows, key=lambda row: row.ratio)
    met = worst.ratio <= TARGET_RATIO
    print(
        f"worst growth {worst.ratio:.1f} ({worst.reader}: {worst.pattern}); target <= {TARGET_RATIO:.0f}: "
        f"{'met' if met else 'MISSED'}"
    )
    figures = {f"{row.reader}/{row.pattern}": round(row.ratio, 2) for row in rows}
    print(
        json.dumps(
            {
                "bench": "adversarial_inputs",
                "n": n,
                "worst_ratio": round(worst.ratio, 2),
                "target_ratio": TARGET_RATIO,
                "met": met,
                "ratios": figures,
            }
        )
    )


if __name__ == "__main__":
    main()
