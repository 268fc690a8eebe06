"""LLM client throughput and cache lookup speed: `.venv/bin/python bench/bench_llm_client.py`.

Throughput: the loopback fake OpenAI server (`tests.fake_server`, in its own process so it does not share
the client's GIL) answers every request after a fixed latency standing in for model time. The same kind of batch
is sent at concurrency 1 (the baseline), 8, 32 and 64; the figure that travels between machines is the speed-up
over the baseline measured in the same run. Passing needs >= 20x at 32 and >= 40x at 64.

The latency is 250 ms by default (real endpoints take 0.5-30 s per call). The speed-up at concurrency C is
bounded by the client's own CPU cost per request `o`: C requests per `latency` need `C * o` of CPU, so 40x
needs `latency >= ~39 * o`. The `ceiling` row measures that bound (latency 0, concurrency 64): on a 2-core
machine shared with other jobs the openai client costs ~2.5-4 ms per request, which caps a 50 ms endpoint at
~15x whatever the concurrency; `--latency-ms 50` shows it.

Cache: 100,000 answers inserted, then looked up in one `get_many`, and then the realistic rerun: a
`complete_many` over the same 100,000 requests (key computation included) that must make zero calls.

Prints a table, then every figure as one JSON object on the last line; exits 1 if a target is missed.
Runs in about a minute on 2 cores; `--quick` cuts the counts for a smoke test, `--cache-entries` the cache's alone
(`--quick --latency-ms 20 --cache-entries 1000` runs in seconds; its speed-ups mean nothing).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from langmodels import CachedResponse, ChatRequest, EndpointConfig, LLMCache, LLMClient  # noqa: E402
from langmodels.cache import cache_keys, request_payload  # noqa: E402
from tests.fake_server import fake_server_process  # noqa: E402

TARGETS = {32: 20.0, 64: 40.0}


def requests(n: int, tag: str) -> list[ChatRequest]:
    return [
        ChatRequest([{"role": "user", "content": f"Rewrite task {tag}-{i}: what is {i} + {i}?"}], "bench-v1")
        for i in range(n)
    ]


def throughput(base_url: str, concurrency: int, n: int, folder: Path) -> dict[str, float]:
    """Requests per second for `n` uncached requests at `concurrency` (answers written to a fresh cache)."""
    config = EndpointConfig(base_url=base_url, model="fake-model", max_concurrency=concurrency, timeout_s=30)
    with LLMCache(folder) as cache:
        client = LLMClient(config, cache)
        batch = requests(n, f"{folder.name}-c{concurrency}")
        cpu, started = time.process_time(), time.perf_counter()
        results = client.complete_many_sync(batch)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert all(r.ok for r in results), {r.error for r in results}
    assert client.stats.calls == n, "every request must be a real call"
    return {
        "requests": n,
        "seconds": round(elapsed, 3),
        "per_second": round(n / elapsed, 1),
        "client_cpu_ms_per_request": round(1000 * cpu / n, 2),
    }


def cache_figures(base_url: str, n: int, folder: Path) -> dict[str, Any]:
    """Insert `n` answers, look them all up, then rerun a `complete_many` over them (zero calls)."""
    config = EndpointConfig(base_url=base_url, model="fake-model", max_calls=0)
    batch = requests(n, "cache")
    with LLMCache(folder / "cache100k") as cache:
        started = time.perf_counter()
        keys = cache_keys(config, batch)
        cache.put_many(
            (key, CachedResponse(f"answer {i}", 12, 8, "stop"), request_payload(config, r))
            for i, (key, r) in enumerate(zip(keys, batch, strict=True))
        )
        insert_s = time.perf_counter() - started
        started = time.perf_counter()
        found = cache.get_many(keys)
        lookup_s = time.perf_counter() - started
        assert len(found) == n
        client = LLMClient(config, cache)
        started = time.perf_counter()
        results = client.complete_many_sync(batch)
        rerun_s = time.perf_counter() - started
    assert all(r.cached for r in results) and client.stats.calls == 0
    return {
        "entries": n,
        "insert_s": round(insert_s, 3),
        "get_many_s": round(lookup_s, 3),
        "rerun_complete_many_s": round(rerun_s, 3),
        "lookups_per_second": round(n / lookup_s),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke test")
    parser.add_argument("--latency-ms", type=float, default=500.0, help="fake model time per request")
    parser.add_argument(
        "--cache-entries", type=int, default=None, help="answers in the cache part (100,000; 10,000 with --quick)"
    )
    args = parser.parse_args()
    # 16 "waves" per concurrency level, so ramp-up and the last stragglers do not dominate; the latency-bound
    # baseline needs only a few dozen requests for a stable rate. --quick: 2 waves, a smoke test.
    sizes = {1: 4, 8: 16, 32: 64, 64: 128} if args.quick else {1: 32, 8: 128, 32: 512, 64: 1024}
    n_cache = args.cache_entries or (10_000 if args.quick else 100_000)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        with fake_server_process(0.0) as base_url:
            throughput(base_url, 64, 64, folder / "warmup")  # imports, first connections
            ceiling = throughput(base_url, 64, sizes[64], folder / "ceiling")
            cache = cache_figures(base_url, n_cache, folder)
        with fake_server_process(args.latency_ms) as base_url:
            runs = {c: throughput(base_url, c, n, folder / "latency") for c, n in sizes.items()}

    base = runs[1]["per_second"]
    for run in runs.values():
        run["speedup"] = round(run["per_second"] / base, 1)
    passed = all(runs[c]["speedup"] >= target for c, target in TARGETS.items())
    # The shortest endpoint latency at which this client could still reach 40x at 64 (see the module doc).
    min_latency_ms = round(39 * 1000 / ceiling["per_second"])
    figures = {
        "latency_ms": args.latency_ms,
        "throughput": {str(c): run for c, run in runs.items()},
        "ceiling": ceiling,
        "min_latency_ms_for_40x": min_latency_ms,
        "targets": {str(c): t for c, t in TARGETS.items()},
        "cache": cache,
        "passed": passed,
    }

    print(f"fake endpoint latency {args.latency_ms:.0f} ms per request")
    print(
        f"{'concurrency':>11} {'requests':>8} {'seconds':>8} {'req/s':>8} {'speed-up':>9} {'target':>7} "
        f"{'cpu ms/req':>10}"
    )
    for c, run in runs.items():
        target = f">={TARGETS[c]:.0f}x" if c in TARGETS else ""
        print(
            f"{c:>11} {run['requests']:>8} {run['seconds']:>8.2f} {run['per_second']:>8.1f} {run['speedup']:>8.1f}x "
            f"{target:>7} {run['client_cpu_ms_per_request']:>10.2f}"
        )
    print(
        f"ceiling (latency 0, concurrency 64): {ceiling['per_second']:.0f} req/s, "
        f"{ceiling['client_cpu_ms_per_request']:.2f} ms client CPU per request "
        f"-> 40x needs latency >= ~{min_latency_ms} ms"
    )
    print(
        f"cache: {cache['entries']:,} entries inserted in {cache['insert_s']:.2f} s, looked up in "
        f"{cache['get_many_s']:.2f} s ({cache['lookups_per_second']:,}/s); a complete_many rerun over all of them "
        f"(keys computed, zero calls) took {cache['rerun_complete_many_s']:.2f} s"
    )
    print("PASS" if passed else "FAIL: a speed-up target was missed")
    print(json.dumps(figures, sort_keys=True))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
