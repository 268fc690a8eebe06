"""Shard-parallel stages: `validated_tasks` (or, with `--stage generation`, `task_variants`) in 2 shards on
Dagster's multiprocess executor, one step at a time against two at a time, each shard step on one thread (a
one-core worker, like a Kubernetes pod with `cpu: 1`).

`.venv/bin/python bench/bench_shards.py [--stage validation|generation] [--tasks 400]`

**Tasks** (real data): the bundled `python_function` seeds, cloned to `--tasks` distinct tasks by numbering the
prompt (a new content-hash `task_id`, the same tests and reference). Both stages are sandbox-bound on them:

- `validation`: the clones are planted as `task_variants` with the seeds as `seed_tasks`, as a night's upstream
  assets would leave them; checking one runs its reference against its tests in the sandbox, and the verifier's
  known-wrong answer too (`python_tests`).
- `generation`: the clones are planted as `seed_tasks`, the parents; the programmatic generator
  (`python_function_respec`, 3 variants each) runs each parent's verified reference on new edge cases in the
  sandbox to get their expected values. No LLM rewrites.

**Runs**: each materializes the stage's asset through `pipeline.runs.materialize(executor="multiprocess")`, a
process per step, in a fresh storage root: the stage's cache starts empty, so every task is worked on (the work,
not the cache, is measured). With 2 shards (and, for validation, `validation_threads=1`):

1. `max_concurrent=1`: the baseline, one worker running the shards one after the other;
2. `max_concurrent=2`: two workers, the two shard steps side by side on the 2 cores.

A third run, 1 shard (validation: with 2 threads in its step, the shape of validation before shards), is shown
for reference. Measured per run: the run's wall time; the shard phase, from the first shard step's start to the
last one's end (Dagster's event log); the working seconds the steps report (added over the shards); and the CPU
time of the finished child processes (step processes and their sandbox runs). The speed-up is run 1 over run 2,
for the shard phase (the part shards parallelize) and the whole run (which adds the step processes' start-up,
the split and the merge). Then the hours a cold night of 1M and 10M tasks would take on N one-core workers, from
the measured seconds per task. Prints a table, then every figure as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import dagster as dg  # noqa: E402

from core.tables import frame_from_records, write_table  # noqa: E402
from generators.base import derive_task  # noqa: E402
from pipeline.instance import open_instance  # noqa: E402
from pipeline.runs import materialize  # noqa: E402
from pipeline.settings import Settings  # noqa: E402
from validators.records import GeneratorSpec, TaskRecord  # noqa: E402
from validators.registry import VerifyContext  # noqa: E402
from validators.seeds import load_seeds  # noqa: E402
from validators.tasks import TASK_FIELDS  # noqa: E402

SEEDS = REPO / "seeds"
FAMILY = "python_function"
CLONE: GeneratorSpec = {"name": "bench_clone", "version": 1, "params": {}}
TARGET = 1.8  # shard-phase speed-up on 2 cores, 2 being the ideal
PROJECTED_TASKS = (1_000_000, 10_000_000)
PROJECTED_WORKERS = (1, 8, 64)


@dataclass(frozen=True)
class Stage:
    """What the bench runs of one sharded stage, and where its figures are in the asset's metadata."""

    asset: str
    shard_step: str  # the prefix of its shard steps' keys
    seconds: str  # the work the shard steps report, added up
    worked: str  # the records the shards worked on
    reused: str  # the records its cache served (0 in a cold run)
    what: str  # a line on what one record costs

    def resources(self, shards: int, threads: int) -> dict[str, dict[str, Any]]:
        if self.asset == "validated_tasks":
            return {"policy": {"validation_shards": shards, "validation_threads": threads}}
        return {"plan": {"generation_shards": shards, "rewrite_kinds": []}}

    def plant(self, home: Path, seeds: Sequence[Mapping[str, Any]], clones: Sequence[Mapping[str, Any]]) -> None:
        """The stage's upstream tables, as a night's earlier steps leave them."""
        parents, variants = (seeds, clones) if self.asset == "validated_tasks" else (clones, [])
        write_table(frame_from_records(parents, (*TASK_FIELDS, "origin")), home / "seed_tasks.parquet")
        write_table(frame_from_records(variants, TASK_FIELDS), home / "task_variants.parquet")
        write_table(frame_from_records([], TASK_FIELDS), home / "failure_tasks.parquet")


STAGES = {
    "validation": Stage(
        "validated_tasks",
        "validated_tasks.check_shard[",
        "validation_seconds",
        "variants_checked",
        "cache_hits",
        "python_tests tasks, each checked in the sandbox (its reference and a known-wrong answer)",
    ),
    "generation": Stage(
        "task_variants",
        "task_variants.generate_shard[",
        "programmatic_seconds",
        "programmatic_parents_generated",
        "programmatic_parents_reused",
        "python_function parents, 3 variants each, their expected values run in the sandbox",
    ),
}
# (label, shards, threads per validation step, steps at a time)
RUNS = (
    ("2 shards, 1 worker", 2, 1, 1),
    ("2 shards, 2 workers", 2, 1, 2),
    ("1 shard (2 threads)", 1, 2, 1),  # the threads: validation's step only
)


def corpus(count: int) -> tuple[list[dict[str, Any]], list[TaskRecord]]:
    """The python_function seeds, and `count` distinct clones of them (a numbered prompt each)."""
    context = VerifyContext(seeds_dir=SEEDS)
    seeds = [t for t in load_seeds([SEEDS / FAMILY], root=SEEDS.parent, context=context).tasks]
    clones = []
    for n in range(count):
        seed = seeds[n % len(seeds)]
        last = seed["prompt"][-1]
        prompt = [*seed["prompt"][:-1], {**last, "content": f"{last['content']}\n\n(Task {n}.)"}]
        params = seed["verifier"]["params"]
        clones.append(
            derive_task(seed, prompt=prompt, verifier_params=params, reference=seed["reference"], generator=CLONE)
        )
    return seeds, clones


Corpus = tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]]


def run(stage: Stage, root: Path, corpus: Corpus, shards: int, threads: int, steps: int) -> dict[str, Any]:
    """One cold materialization of the stage's asset; its figures."""
    settings = Settings.from_env(
        {}, profile="quickstart", home=root / "home", seeds_dir=SEEDS, dagster_home=root / "dagster"
    )
    home = settings.home
    assert isinstance(home, Path), home  # root / "home": a local folder, not an object-store URL
    stage.plant(home, *corpus)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    resources = stage.resources(shards, threads)
    summary = materialize(settings, stage.asset, resources=resources, executor="multiprocess", steps=steps)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if not summary.success:
        raise SystemExit(f"the run failed: {summary.failures}")
    metadata = next(a for a in summary.assets if a.key == stage.asset).metadata
    with open_instance(settings) as instance:
        shard_events = [
            e
            for e in instance.all_logs(summary.run_id)
            if e.dagster_event and e.step_key and e.step_key.startswith(stage.shard_step)
        ]
    starts = [e.timestamp for e in shard_events if e.dagster_event_type == dg.DagsterEventType.STEP_START]
    ends = [e.timestamp for e in shard_events if e.dagster_event_type == dg.DagsterEventType.STEP_SUCCESS]
    pids = {
        e.dagster_event.pid
        for e in shard_events
        if e.dagster_event and e.dagster_event_type == dg.DagsterEventType.STEP_START
    }
    return {
        "wall_s": round(wall, 2),
        "shard_phase_s": round(max(ends) - min(starts), 2),
        "work_s": metadata[stage.seconds],
        "child_cpu_s": round((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 2),
        "shard_steps": metadata["shard_steps"],
        "shard_processes": len(pids),
        "worked": metadata[stage.worked],
        "cache_hits": metadata[stage.reused],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", choices=sorted(STAGES), default="validation", help="the sharded stage to run")
    parser.add_argument("--tasks", type=int, default=400, help="distinct sandbox-bound tasks to work on")
    args = parser.parse_args()
    stage = STAGES[args.stage]
    seeds, clones = corpus(args.tasks)
    load = os.getloadavg()[0]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, shards, threads, steps in RUNS:
            folder = Path(tmp) / label.replace(" ", "_").replace(",", "")
            results[label] = run(stage, folder, (seeds, clones), shards, threads, steps)
            if results[label]["cache_hits"] or results[label]["worked"] != args.tasks:
                raise SystemExit(f"{label}: expected every one of {args.tasks} tasks worked on, got {results[label]}")
    baseline, parallel = results[RUNS[0][0]], results[RUNS[1][0]]
    phase_speedup = baseline["shard_phase_s"] / parallel["shard_phase_s"]
    wall_speedup = baseline["wall_s"] / parallel["wall_s"]
    per_task_s = baseline["work_s"] / args.tasks  # one thread, one core, nothing else working beside it

    print(f"{args.stage}: {args.tasks} {stage.what};")
    print(f"({len(seeds)} bundled seeds, cloned); cache cold in every run; shard steps of 1 thread: one-core")
    print(f"workers, like Kubernetes pods with cpu: 1. {os.cpu_count()} CPUs, load {load:.2f} before.\n")
    header = f"{'run':<22} {'steps at once':>13} {'shard steps':>11} {'processes':>9} {'work s':>8}"
    print(f"{header} {'shard phase s':>13} {'run wall s':>10} {'child cpu s':>11}")
    for label, _, _, steps in RUNS:
        r = results[label]
        print(
            f"{label:<22} {steps:>13} {r['shard_steps']:>11} {r['shard_processes']:>9} {r['work_s']:>8.2f} "
            f"{r['shard_phase_s']:>13.2f} {r['wall_s']:>10.2f} {r['child_cpu_s']:>11.2f}"
        )
    passed = phase_speedup >= TARGET
    verdict = "PASS" if passed else f"FAIL (below {TARGET}x)"
    print(f"\nspeed-up, 2 workers over 1: shard phase {phase_speedup:.2f}x (target >= {TARGET}x: {verdict}), ", end="")
    print(f"whole run {wall_speedup:.2f}x (step start-ups, split and merge do not shard)")
    print(f"work: {per_task_s * 1000:.1f} ms per task on one core (run 1's work seconds / tasks)\n")
    print("on paper, a cold night (every task worked on) on N one-core workers, assuming the time is linear in")
    print("tasks and each worker has a core of its own (split, merge, step start-ups and the cache not counted):")
    print(f"{'tasks':>12} " + " ".join(f"{f'N={n}':>9}" for n in PROJECTED_WORKERS))
    projected: dict[str, float] = {}
    for tasks in PROJECTED_TASKS:
        hours = {n: tasks * per_task_s / n / 3600 for n in PROJECTED_WORKERS}
        projected |= {f"hours_{tasks}_tasks_{n}_workers": round(h, 3) for n, h in hours.items()}
        print(f"{tasks:>12,} " + " ".join(f"{f'{h:.2f} h':>9}" for h in hours.values()))
    figures: dict[str, Any] = {"stage": args.stage, "tasks": args.tasks, "cpus": os.cpu_count()}
    figures["load_before"] = round(load, 2)
    for label, *_ in RUNS:
        key = label.replace(" ", "_").replace(",", "")
        figures |= {f"{key}_{name}": value for name, value in results[label].items()}
    figures |= {
        "shard_phase_speedup": round(phase_speedup, 3),
        "wall_speedup": round(wall_speedup, 3),
        "work_ms_per_task": round(per_task_s * 1000, 2),
        **projected,
        "passed": passed,
    }
    print(json.dumps(figures))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
