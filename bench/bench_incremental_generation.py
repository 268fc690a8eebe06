"""Incremental LLM generation: a rerun with 1% new seeds must pay for about 1% of the first run's calls.

`.venv/bin/python bench/bench_incremental_generation.py [--seeds 1000]`

GSM8K test questions stand in for seed tasks (numeric_answer). Against the loopback fake OpenAI server (which
answers a valid rewrite after a fixed latency), `rewrite_tasks` runs three times with the same on-disk cache:
the first run over N seeds (the baseline), an identical rerun (must make 0 calls), and a run with 1% more
seeds (must make at most ~1% of the first run's calls: only the new seeds'). Prints a table, then every
figure as one JSON object on the last line; exits 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from generators.rewrite import rewrite_tasks  # noqa: E402
from langmodels import EndpointConfig, LLMCache, LLMClient  # noqa: E402
from tests.fake_server import FakeOpenAIServer  # noqa: E402
from validators.tasks import compute_task_id  # noqa: E402

GSM8K = REPO.parent / "shared" / "data" / "gsm8k" / "test.jsonl"
KINDS = ["paraphrase", "distractors"]


def seed_tasks(count: int) -> list[dict[str, Any]]:
    """The first `count` GSM8K test questions as seed task records."""
    tasks = []
    for line in GSM8K.read_text(encoding="utf-8").splitlines()[:count]:
        row = json.loads(line)
        answer = row["answer"].rsplit("####", 1)[1].strip().replace(",", "")
        prompt = [{"role": "user", "content": row["question"]}]
        verifier = {"name": "numeric_answer", "version": 1, "params": {"answer": answer}}
        task_id = compute_task_id(prompt, verifier)
        lineage = {"seed_id": task_id, "parent_id": None, "generator": None, "source": "seed", "failure_id": None}
        tasks.append(
            {
                "task_id": task_id,
                "family": "arithmetic",
                "prompt": prompt,
                "verifier": verifier,
                "reference": f"#### {answer}",
                "lineage": lineage,
                "difficulty": None,
                "tags": [],
            }
        )
    return tasks


def rewriter(body: Mapping[str, Any]) -> str:
    """A well-behaved model: the task text back with a prefix per kind, so every number survives."""
    text = body["messages"][-1]["content"]
    inner = text.split(">", 1)[1].rsplit("</", 1)[0].strip() if ">" in text else text
    prefix = "The sky was clear that day." if "add DISTRACTORS" in body["messages"][0]["content"] else "Consider this:"
    return json.dumps({"rewritten": f"{prefix} {inner}"})


def run(parents: list[dict[str, Any]], server: FakeOpenAIServer, cache_dir: Path) -> dict[str, float]:
    config = EndpointConfig(base_url=server.base_url, model="bench", max_concurrency=32, max_retries=0)
    client = LLMClient(config, LLMCache(cache_dir))
    started = time.perf_counter()
    result = rewrite_tasks(parents, kinds=KINDS, per_kind=1, client=client, random_seed=0)
    return {
        "seconds": time.perf_counter() - started,
        "calls": client.stats.calls,
        "cached": client.stats.hits,
        "variants": len(result.tasks),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--latency-ms", type=int, default=20)
    args = parser.parse_args()
    parents = seed_tasks(args.seeds + args.seeds // 100)
    base, grown = parents[: args.seeds], parents
    with (
        FakeOpenAIServer(responder=rewriter, latency_s=args.latency_ms / 1000) as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        first = run(base, server, Path(tmp))
        rerun = run(base, server, Path(tmp))
        added = run(grown, server, Path(tmp))
    ratio = added["calls"] / first["calls"] if first["calls"] else float("inf")
    new_share = (len(grown) - len(base)) / len(base)
    rows = [("first run", len(base), first), ("identical rerun", len(base), rerun), ("+1% seeds", len(grown), added)]
    print(f"{'run':<16} {'seeds':>6} {'calls':>6} {'cached':>7} {'variants':>9} {'seconds':>8}")
    for name, seeds, r in rows:
        print(f"{name:<16} {seeds:>6} {r['calls']:>6} {r['cached']:>7} {r['variants']:>9} {r['seconds']:>8.2f}")
    passed = rerun["calls"] == 0 and ratio <= new_share * 1.05
    verdict = "PASS" if passed else "FAIL"
    print(f"\n+1% seeds cost {ratio:.2%} of the first run's calls (target <= ~{new_share:.0%}): {verdict}")
    figures = {
        "seeds": len(base),
        "first_calls": first["calls"],
        "rerun_calls": rerun["calls"],
        "grown_calls": added["calls"],
        "grown_call_ratio": round(ratio, 4),
        "first_seconds": round(first["seconds"], 2),
        "rerun_seconds": round(rerun["seconds"], 2),
        "grown_seconds": round(added["seconds"], 2),
        "passed": passed,
    }
    print(json.dumps(figures))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
