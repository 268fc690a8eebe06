"""Does the loop make the deployed model better? `.venv/bin/python bench/flywheel_nights.py [--nights 3]`.

Runs `seedwheel simulate` for `--nights` nights on a fresh storage root with the quickstart profile (the bundled
SmolLM2-135M-Instruct, 2 CPU cores): each night the stand-in app serves a night of traffic with the deployed
model, its log goes through the inbox, and the nightly path trains, gates and maybe promotes. Then the model that
served night 1 (the base model) and the model deployed after the last night are both served, through the same app
path, on the same held-out traffic: a uniform sample (by task-id hash) of the pool's held-out requests, which no
night ever served, so no failure of theirs was ever trained on. The comparison is paired per request: the
failure rate's drop (first - last: the pass-rate gain) with a 95% paired bootstrap interval
(`training.stats.compare`). Target: the drop's lower bound above 0, within 45 minutes.

Prints the per-night table (served, failed, failure rate, failures in, tasks derived, trained on, the gate's
decision, held-out failures fixed and broken), the comparison, and every figure as one JSON object on the last
line. `--home DIR` keeps the root (a rerun continues after its recorded nights); by default a temporary one.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from curation.splits import hash_sample  # noqa: E402
from pipeline.promoted import current_policy  # noqa: E402
from pipeline.settings import Settings  # noqa: E402
from pipeline.simulate import SimulationConfig, held_out_pool, serve, simulate  # noqa: E402
from simulation import model_label  # noqa: E402
from training.stats import compare  # noqa: E402

TARGET_MINUTES = 45
HELD_OUT_SALT = "bench-flywheel-nights-v1"
TABLE = (
    ("night", "{night}"),
    ("model", "{model}"),
    ("served", "{served}"),
    ("failed", "{failed}"),
    ("failure rate [95% CI]", "{failure_rate:.2f} [{failure_rate_low:.2f}, {failure_rate_high:.2f}]"),
    ("failures in", "{failures_ingested}"),
    ("tasks derived", "{tasks_derived}"),
    ("trained on", "{trained_on}"),
    ("gate", "{decision}"),
    ("fixed", "{failures_fixed}"),
    ("broken", "{failures_broken}"),
)


def quiet_progress(what: str) -> Callable[[int, int], None]:
    def report(done: int, total: int) -> None:
        if done == total:
            print(f"  {what} {done}/{total}", flush=True)

    return report


def passed_by_request(lines: list[dict[str, Any]]) -> dict[str, list[bool]]:
    """request id -> [passed], the shape `training.stats.compare` pairs on."""
    return {line["source"]["request"]: [line["outcome"] == "passed"] for line in lines}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=3)
    parser.add_argument("--requests", type=int, default=24, help="requests served per night")
    parser.add_argument("--held-out", type=int, default=60, help="held-out requests both models answer")
    parser.add_argument("--home", type=Path, default=None, help="storage root (default: a temporary folder)")
    parser.add_argument(
        "--resources",
        type=json.loads,
        default={},
        help="resource fields for the nightly runs, as JSON, as the launchpad takes them (default: the profile's)",
    )
    args = parser.parse_args(argv)
    home = args.home or Path(tempfile.mkdtemp(prefix="seedwheel-flywheel-nights-"))
    settings = Settings.from_env(profile="quickstart", home=home)
    config = SimulationConfig(nights=args.nights, requests=args.requests)
    print(f"flywheel nights: {args.nights} nights of {args.requests} requests under {home}", flush=True)

    started = time.monotonic()
    records = simulate(
        settings, config, echo=lambda line: print(line, flush=True), progress=quiet_progress, resources=args.resources
    )
    nights_s = time.monotonic() - started
    first, last = records[0]["model_path"], current_policy(settings)
    pool = held_out_pool(settings)
    held_out = [pool[i] for i in hash_sample(pool, args.held_out, HELD_OUT_SALT)]
    print(f"serving {len(held_out)} held-out requests with {model_label(first)} and {model_label(last)}", flush=True)
    answers = {}
    for role, model in (("first", first), ("last", last)):
        lines = serve(settings, model, held_out, night=0, config=config, progress=quiet_progress(role))
        answers[role] = passed_by_request(lines)
    total_s = time.monotonic() - started

    families = {task["task_id"]: task["family"] for task in held_out}
    comparison = compare(answers["last"], answers["first"], families)
    # A pass-rate gain is the same number as the failure rate's drop: the improvement, better above 0.
    gain = comparison.overall.difference
    failure_first, failure_last = 1 - comparison.overall.baseline, 1 - comparison.overall.candidate

    print()
    print("| " + " | ".join(name for name, _ in TABLE) + " |")
    print("|" + " --- |" * len(TABLE))
    for record in records:
        print("| " + " | ".join(cell.format(**record) for _, cell in TABLE) + " |")
    print()
    print(
        f"held-out traffic ({len(held_out)} requests, never served on a night): failure rate "
        f"{failure_first:.2f} with {model_label(first)} (night 1) -> {failure_last:.2f} with "
        f"{model_label(last)} (deployed after night {records[-1]['night']}): drop {gain.value:+.2f} "
        f"[{gain.low:+.2f}, {gain.high:+.2f}] (paired, 95%)"
    )
    for family, paired in sorted(comparison.families.items()):
        rates = f"{1 - paired.baseline:.2f} -> {1 - paired.candidate:.2f}"
        print(f"  {family}: {paired.tasks} requests, failure rate {rates}")
    met = gain.low > 0 and total_s <= TARGET_MINUTES * 60
    print(
        f"target: the drop's lower bound above 0 within {TARGET_MINUTES} min: "
        f"{'met' if met else 'not met'} ({total_s / 60:.1f} min)"
    )
    print(
        json.dumps(
            {
                "nights": [{k: v for k, v in r.items() if k != "run_id"} for r in records],
                "held_out_requests": len(held_out),
                "failure_rate_first": round(failure_first, 4),
                "failure_rate_last": round(failure_last, 4),
                "failure_rate_drop": round(gain.value, 4),
                "failure_rate_drop_low": round(gain.low, 4),
                "failure_rate_drop_high": round(gain.high, 4),
                "nights_seconds": round(nights_s, 1),
                "total_seconds": round(total_s, 1),
                "target_met": met,
            },
            sort_keys=True,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
