"""Incremental nights: with 1% new seeds, night 2 costs <= 5% of night 1 for generation, validation and dedup.

`.venv/bin/python bench/bench_incremental_validation.py [--rounds 2] [--gsm8k 300] [--per-seed 3] [--families ...]`

**Corpus** (real data): the bundled seeds of every family, or of `--families` (`python_function` runs the sandbox,
`sql` reads its SQLite fixture), multiplied by promoting their programmatic variants made at `--rounds` other
random seeds to seeds of their own (each a distinct task: a new gold, renamed functions with new tests, swapped
literals), plus `--gsm8k` GSM8K train questions (MIT licence, `../shared/data/gsm8k/train.jsonl`) as arithmetic
seeds. `--families arithmetic --rounds 0 --gsm8k 10 --per-seed 1` is a smoke run of a few seconds (its ratios mean
nothing at that size).
1% of the corpus, drawn at random across families, is held back: it is night 2's new seeds.

**A night** runs what the nightly regeneration runs for these stages, with every cache persisted in one storage
root shared by both nights:

1. generation: `generate_variants(per_seed)` with the generation cache (`<root>/generation_cache/`);
2. validation: `check_tasks` on the variants with the validation cache (`<root>/validation_cache/`): the schema,
   the id, the params, the reference passing and a wrong answer failing (two sandbox runs per python task);
3. dedup: `curation.curate.dedup_tasks` on seeds + valid variants against the persisted `DedupIndex`, then
   the kept tasks indexed (`index_tasks`, as `split_tasks` does in the pipeline).

Each stage's wall time (`time.perf_counter`), this process's CPU time (`time.process_time`) and the CPU time of
its child processes (`resource.getrusage(RUSAGE_CHILDREN)`: the sandbox runs) are measured. Target: night 2's
wall time over the three stages is at most 5% of night 1's (each stage's ratio is shown; dedup alone stays near
half, since every night hashes each row's key to find the known ones, but it is under 1% of night 1).
Night 1 is the baseline (cold caches, as on the first night; the caches' own writes included). Prints a
table, then every figure as one JSON object on the last line; exits 1 if the target is missed.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from core.cache_store import CacheStore  # noqa: E402
from curation.curate import dedup_tasks, index_tasks  # noqa: E402
from curation.dedup import DedupIndex, MinHashConfig  # noqa: E402
from generators.programmatic import (  # noqa: E402
    generate_variants,
    programmatic_generators,
)
from validators.registry import VerifyContext  # noqa: E402
from validators.seeds import AUDIT_DIR, load_seeds  # noqa: E402
from validators.tasks import check_tasks  # noqa: E402

SEEDS = REPO / "seeds"
FAMILIES = sorted(path.name for path in SEEDS.iterdir() if path.is_dir() and path.name != AUDIT_DIR)
GSM8K = REPO.parent / "shared" / "data" / "gsm8k" / "train.jsonl"
GSM8K_SYSTEM = "Solve the problem. Show your reasoning, then give the final answer on its own line as '#### <number>'."
TARGET = 0.05  # night 2 / night 1, the three stages together
NEW_SHARE = 0.01
STAGES = ("generation", "validation", "dedup")
CACHES = ("generation_cache", "validation_cache")


@dataclass
class Cost:
    wall: float
    cpu: float
    children: float


def measure(work: Callable[[], Any]) -> tuple[Any, Cost]:
    """Run `work`; its wall time, this process's CPU time and the CPU time of the children it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, cpu = time.perf_counter(), time.process_time()
    out = work()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    children = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return out, Cost(time.perf_counter() - wall, time.process_time() - cpu, children)


def gsm8k_seeds(folder: Path, count: int) -> None:
    """Write `count` GSM8K train questions as a seed file (the bundled slice's format, calculator notes removed)."""
    rows = []
    for line in GSM8K.read_text(encoding="utf-8").splitlines()[100 : 100 + count]:  # past the bundled slice
        row = json.loads(line)
        solution, answer = row["answer"].rsplit("####", 1)
        reference = re.sub(r"<<[^>]*>>", "", solution).strip() + f"\n#### {answer.strip()}"
        rows.append(
            {
                "prompt": [{"role": "system", "content": GSM8K_SYSTEM}, {"role": "user", "content": row["question"]}],
                "verifier": {"name": "numeric_answer", "params": {"answer": answer.strip().replace(",", "")}},
                "reference": reference,
                "tags": ["gsm8k"],
            }
        )
    (folder / "arithmetic").mkdir(parents=True, exist_ok=True)
    (folder / "arithmetic" / "gsm8k_bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def as_seed(task: Mapping[str, Any]) -> dict[str, Any]:
    """A variant promoted to a seed: its own lineage root."""
    lineage = {"seed_id": task["task_id"], "parent_id": None, "generator": None, "source": "seed", "failure_id": None}
    return {**task, "lineage": lineage}


def corpus(seeds_dir: Path, rounds: int, gsm8k: int) -> list[Mapping[str, Any]]:
    """Every corpus seed (checked like the seed loader checks them), in a fixed random order."""
    gsm8k_seeds(seeds_dir, gsm8k)
    context = VerifyContext(seeds_dir=seeds_dir)
    loaded = load_seeds([seeds_dir], context=context)
    seeds = {t["task_id"]: {k: v for k, v in t.items() if k != "origin"} for t in loaded.tasks}
    bundled = [seeds[t["task_id"]] for t in loaded.tasks if "gsm8k_bench" not in t["origin"]]
    derived: list[Mapping[str, Any]] = []
    for round_seed in range(1, rounds + 1):
        made = generate_variants(
            bundled, per_seed=3, random_seed=round_seed, generators=programmatic_generators(context)
        )
        derived += [as_seed(t) for t in made.tasks if t["task_id"] not in seeds]
    derived = list({t["task_id"]: t for t in derived}.values())
    valid = [t for t, problems in zip(derived, check_tasks(derived, context), strict=True) if not problems]
    tasks = [*seeds.values(), *valid]
    random.Random(0).shuffle(tasks)
    return tasks


def night(seeds: Sequence[Mapping[str, Any]], root: Path, context: VerifyContext, per_seed: int) -> dict[str, Any]:
    """One night's generation, validation and dedup against the caches under `root`."""
    config = MinHashConfig()
    generation_cache = CacheStore.open(root / "generation_cache")
    result, generation = measure(
        lambda: generate_variants(
            seeds,
            per_seed=per_seed,
            random_seed=0,
            generators=programmatic_generators(context),
            cache=generation_cache,
        )
    )
    validation_cache = CacheStore.open(root / "validation_cache")
    problems, validation = measure(lambda: check_tasks(result.tasks, context, cache=validation_cache))
    valid = [t for t, found in zip(result.tasks, problems, strict=True) if not found]
    tasks = list({t["task_id"]: t for t in [*seeds, *valid]}.values())  # a variant may equal a promoted seed

    def dedup() -> tuple[int, int]:
        index = DedupIndex.open(root / "dedup_index" / config.name, config)
        labels = dedup_tasks(tasks, config, index)  # stages its keepers; deduplicated_tasks commits nothing
        kept = [t for t, label in zip(tasks, labels, strict=True) if not label.is_duplicate]
        # split_tasks indexes what the splits keep, in its own step (its own index object).
        added = index_tasks(kept, DedupIndex.open(root / "dedup_index" / config.name, config))
        return len(tasks) - len(kept), added

    (duplicates, indexed), dedup_cost = measure(dedup)
    return {
        "seeds": len(seeds),
        "variants": len(result.tasks),
        "rejects": len(result.rejects),
        "valid": len(valid),
        "generation": generation,
        "generation_reused": generation_cache.hits,
        "validation": validation,
        "validation_hits": validation_cache.hits,
        "dedup": dedup_cost,
        "dedup_rows": len(tasks),
        "duplicates": duplicates,
        "indexed": indexed,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="random seeds whose variants become seeds")
    parser.add_argument("--gsm8k", type=int, default=300, help="GSM8K train questions added as arithmetic seeds")
    parser.add_argument("--per-seed", type=int, default=3)
    parser.add_argument(
        "--families", nargs="+", choices=FAMILIES, default=FAMILIES, help="bundled seed families (default: all)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        seeds_dir = Path(tmp) / "seeds"
        for family in args.families:
            shutil.copytree(SEEDS / family, seeds_dir / family)
        context = VerifyContext(seeds_dir=seeds_dir)
        started = time.perf_counter()
        tasks = corpus(seeds_dir, args.rounds, args.gsm8k)
        setup_seconds = time.perf_counter() - started
        new = max(1, round(len(tasks) * NEW_SHARE / (1 + NEW_SHARE)))
        base, grown = tasks[:-new], tasks
        root = Path(tmp) / "storage"
        first = night(base, root, context, args.per_seed)
        second = night(grown, root, context, args.per_seed)
        cache_bytes = {
            f"{name}_bytes": sum(p.stat().st_size for p in (root / name).rglob("*.jsonl")) for name in CACHES
        }

    families = Counter(t["family"] for t in grown)
    print(f"corpus: {len(grown)} seeds ({', '.join(f'{f} {n}' for f, n in sorted(families.items()))}); ", end="")
    print(f"night 2 adds {new} ({new / len(base):.1%}); setup {setup_seconds:.0f} s\n")
    header = f"{'stage':<11} {'night':<6} {'items':>6} {'reused':>7} {'wall s':>8} {'cpu s':>7} {'child cpu s':>12}"
    print(f"{header} {'night2/night1':>14}")
    ratios = {}
    for stage in STAGES:
        items, reused = {
            "generation": ("seeds", "generation_reused"),
            "validation": ("variants", "validation_hits"),
            "dedup": ("dedup_rows", None),
        }[stage]
        ratios[stage] = second[stage].wall / first[stage].wall if first[stage].wall else float("inf")
        for label, n in (("1", first), ("2", second)):
            cost = n[stage]
            shown = n[reused] if reused else "-"
            ratio = f"{ratios[stage]:.2%}" if label == "2" else ""
            print(
                f"{stage:<11} {label:<6} {n[items]:>6} {shown:>7} {cost.wall:>8.2f} {cost.cpu:>7.2f} "
                f"{cost.children:>12.2f} {ratio:>14}"
            )
    total = sum(second[s].wall for s in STAGES) / sum(first[s].wall for s in STAGES)
    missed = total > TARGET
    verdict = "PASS" if not missed else f"FAIL (above {TARGET:.0%})"
    sizes = ", ".join(f"{name} {size / 1e6:.1f} MB" for name, size in cache_bytes.items())
    print(f"\ncaches after night 2: {sizes.replace('_bytes', '')}")
    print(f"night 2 costs {total:.2%} of night 1 over the three stages (target <= {TARGET:.0%}): {verdict}")
    figures: dict[str, Any] = {
        "seeds": len(grown),
        "new_seeds": new,
        "families": dict(sorted(families.items())),
        "setup_seconds": round(setup_seconds, 1),
        **cache_bytes,
    }
    for label, n in (("night1", first), ("night2", second)):
        for stage in STAGES:
            figures[f"{label}_{stage}_wall_s"] = round(n[stage].wall, 3)
            figures[f"{label}_{stage}_cpu_s"] = round(n[stage].cpu, 3)
            figures[f"{label}_{stage}_child_cpu_s"] = round(n[stage].children, 3)
        figures[f"{label}_variants"] = n["variants"]
        figures[f"{label}_generation_reused"] = n["generation_reused"]
        figures[f"{label}_validation_hits"] = n["validation_hits"]
        figures[f"{label}_dedup_rows"] = n["dedup_rows"]
    figures |= {f"{stage}_ratio": round(ratios[stage], 4) for stage in STAGES}
    figures |= {"total_ratio": round(total, 4), "passed": not missed}
    print(json.dumps(figures))
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
