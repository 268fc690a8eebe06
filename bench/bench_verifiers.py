"""Verifier throughput and sandbox overhead on this machine: `.venv/bin/python bench/bench_verifiers.py`.

Reports verifications per second for every registered verifier (sandboxed ones apart), the sandbox's start-up
cost per call against a plain `subprocess.run([python, "-c", "pass"])` measured in the same run (ratios travel
between machines, absolute times do not), and the wall time for 1,000 `python_tests` completions scored with
`verify_many` on all cores. Prints a table, then every figure as one JSON object on the last line.
Runs in about a minute on 2 cores; `--quick` cuts the counts for a smoke test.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sandbox.process import isolation_report, run_python  # noqa: E402
from validators.batch import verify_many  # noqa: E402
from validators.registry import REGISTRY, VerifyContext, verify  # noqa: E402
from validators.seeds import discover_seed_files, read_seed_file  # noqa: E402

SANDBOXED = ("python_tests",)

CODE_TASK = {
    "verifier": {
        "name": "python_tests",
        "params": {
            "tests": "assert fib(0) == 0\nassert fib(1) == 1\nassert fib(10) == 55\nassert fib(20) == 6765",
            "entry_point": "fib",
        },
    }
}
CODE_COMPLETIONS = [
    "```python\ndef fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n```",
    "```python\ndef fib(n):\n    return n\n```",
    "def fib(n):\n    return fib(n - 1) + fib(n - 2) if n > 1 else n",
    "def fibonacci(n):\n    return 0",
]


def timed(func: Callable[[], Any], repeat: int) -> list[float]:
    """Seconds per call, `repeat` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return times


def rate(func: Callable[[], Any], *, min_calls: int, budget_s: float) -> float:
    """Calls per second: at least `min_calls`, then until `budget_s` has passed."""
    calls, start = 0, time.perf_counter()
    while calls < min_calls or time.perf_counter() - start < budget_s:
        func()
        calls += 1
    return calls / (time.perf_counter() - start)


def make_sql_task(folder: Path) -> tuple[dict[str, Any], VerifyContext, str]:
    path = folder / "bench.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, grp TEXT, v REAL)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?)", [(i, f"g{i % 7}", i * 0.5) for i in range(1000)])
    conn.commit()
    conn.close()
    gold = "SELECT grp, COUNT(*), SUM(v) FROM t GROUP BY grp"
    task = {"verifier": {"name": "sql_result", "params": {"database": "bench.db", "gold_query": gold}}}
    return task, VerifyContext(seeds_dir=folder), "SELECT grp, count(id), sum(v) FROM t GROUP BY 1 ORDER BY 1 DESC"


def seed_samples(names: list[str]) -> dict[str, tuple[dict[str, Any], str]]:
    """One (task, reference) per verifier name from the bundled seeds, for verifiers this script does not know."""
    samples: dict[str, tuple[dict[str, Any], str]] = {}
    try:
        files = discover_seed_files([REPO / "seeds"])
    except (OSError, ValueError):
        return samples
    for path in files:
        try:
            records, _ = read_seed_file(path)
        except (OSError, ValueError):
            continue
        for record in records:
            raw = record.raw if isinstance(record.raw, dict) else {}
            spec, reference = raw.get("verifier"), raw.get("reference")
            if isinstance(spec, dict) and spec.get("name") in names and isinstance(reference, str):
                samples.setdefault(spec["name"], ({"verifier": spec}, reference))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke test")
    parser.add_argument(
        "--batch", type=int, default=None, help="python_tests completions scored in parallel (1000; 50 with --quick)"
    )
    args = parser.parse_args()
    repeat = 5 if args.quick else 30
    batch = args.batch or (50 if args.quick else 1000)
    workers = os.cpu_count() or 1
    figures: dict[str, Any] = {"cpus": workers, "python": sys.version.split()[0]}
    figures["sandbox_layers"] = isolation_report()["layers"]

    # Start-up overhead: the sandbox against a bare interpreter and an in-process exec of the same program.
    plain = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), repeat)
    isolated = timed(lambda: subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True), repeat)
    sandbox = timed(lambda: run_python("pass"), repeat)
    code = compile("pass", "<bench>", "exec")
    in_process = timed(lambda: exec(code, {}), 1000)
    figures["startup_ms"] = {
        "in_process_exec": statistics.median(in_process) * 1e3,
        "subprocess_python_c_pass": statistics.median(plain) * 1e3,
        "subprocess_python_I_S_pass": statistics.median(isolated) * 1e3,
        "sandbox_run_python_pass": statistics.median(sandbox) * 1e3,
    }
    figures["sandbox_overhead_ratio_vs_subprocess"] = statistics.median(sandbox) / statistics.median(plain)
    figures["sandbox_overhead_ratio_vs_isolated_subprocess"] = statistics.median(sandbox) / statistics.median(isolated)

    # Sequential throughput per registered verifier.
    rates: dict[str, float | None] = {}
    names = REGISTRY.names()
    samples = seed_samples(names)
    with tempfile.TemporaryDirectory(prefix="bench-verifiers-") as folder:
        sql_task, sql_context, sql_completion = make_sql_task(Path(folder))
        own = {
            "python_tests": (CODE_TASK, CODE_COMPLETIONS[0], VerifyContext()),
            "sql_result": (sql_task, sql_completion, sql_context),
            "numeric_answer": ({"verifier": {"name": "numeric_answer", "params": {"answer": 18}}}, "#### 18", None),
        }
        checks: dict[str, str] = {}
        for name in names:
            if name in own:
                task, completion, context = own[name]
            elif name in samples:
                (task, completion), context = samples[name], VerifyContext(seeds_dir=REPO / "seeds")
            else:
                rates[name] = None
                continue
            try:
                checks[name] = verify(task, completion, context=context).reason
                sandboxed = name in SANDBOXED
                rates[name] = rate(
                    functools.partial(verify, task, completion, context=context),
                    min_calls=10 if sandboxed or args.quick else 200,
                    budget_s=0.2 if args.quick else (2.0 if sandboxed else 1.0),
                )
            except Exception as exc:  # a sample from someone else's seeds may not fit; report it, keep going
                checks[name] = f"error: {type(exc).__name__}: {exc}"[:120]
                rates[name] = None
    figures["verifications_per_s_1_thread"] = rates
    figures["sample_verdicts"] = checks

    # 1,000 code completions scored on every core (threads: the work is in sandboxed child processes).
    tasks = [CODE_TASK] * batch
    completions = [CODE_COMPLETIONS[i % len(CODE_COMPLETIONS)] for i in range(batch)]
    one = min(100, batch)
    start = time.perf_counter()
    verify_many(tasks[:one], completions[:one], workers=1)
    serial_per_item = (time.perf_counter() - start) / one
    start = time.perf_counter()
    verdicts = verify_many(tasks, completions, workers=workers)
    parallel_s = time.perf_counter() - start
    figures["python_tests_batch"] = {
        "completions": batch,
        "workers": workers,
        "seconds": parallel_s,
        "per_s": batch / parallel_s,
        "ms_per_completion_1_worker": serial_per_item * 1e3,
        "speedup_vs_1_worker": serial_per_item * batch / parallel_s,
        "passed": sum(v.passed for v in verdicts),
    }

    print_table(figures)
    print(json.dumps(figures, sort_keys=True))


def print_table(figures: dict[str, Any]) -> None:
    startup = figures["startup_ms"]
    isolated_ratio = figures["sandbox_overhead_ratio_vs_isolated_subprocess"]
    lines = [
        f"cpus: {figures['cpus']}   python: {figures['python']}   layers: {', '.join(figures['sandbox_layers'])}",
        "",
        f"{'start-up (median)':<44}{'ms':>10}",
        *(f"  {name:<42}{value:>10.3f}" for name, value in startup.items()),
        f"  {'sandbox / subprocess python -c pass':<42}{figures['sandbox_overhead_ratio_vs_subprocess']:>9.2f}x",
        f"  {'sandbox / subprocess python -I -S -c pass':<42}{isolated_ratio:>9.2f}x",
        "",
        f"{'verifier (1 thread)':<30}{'verif/s':>12}  sample verdict",
    ]
    for name, value in figures["verifications_per_s_1_thread"].items():
        tag = " (sandboxed)" if name in SANDBOXED else ""
        shown = f"{value:>12.1f}" if value is not None else f"{'n/a':>12}"
        lines.append(f"  {name + tag:<28}{shown}  {figures['sample_verdicts'].get(name, 'no sample task')}")
    b = figures["python_tests_batch"]
    lines += [
        "",
        f"python_tests x {b['completions']} on {b['workers']} workers: {b['seconds']:.1f} s ({b['per_s']:.1f}/s), "
        f"{b['ms_per_completion_1_worker']:.1f} ms each on 1 worker, speed-up {b['speedup_vs_1_worker']:.2f}x, "
        f"{b['passed']} passed",
        "",
    ]
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
