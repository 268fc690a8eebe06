"""`seedwheel simulate`: nights of a stand-in app's traffic, each followed by the normal nightly path.

Each night:
1. the app serves a night of requests drawn from the traffic pool (`simulation.pool`) with the currently promoted
   model (the base model before any promotion), through a local OpenAI-compatible server (the LLM endpoint
   resource's own, with the promoted checkpoint as its model), and checks each answer with its verifier;
2. it delivers the night's traffic log into the inbox (`FailureInbox.deliver`);
3. the `failure_inbox` sensor ticks, and each run it requests is materialized (redaction, traffic rows, failures);
4. the flywheel job runs: failure tasks, regeneration, training, the gate and the promotion;
5. the night's record is appended to `<root>/simulation/nights.jsonl`.

Nothing in the pipeline knows it is simulated: the app is a client that writes the documented log format into
the inbox. The next night serves whatever the gate promoted. A rerun continues after the last recorded night; a
night that died before its record was written is served again (the same draw, the same answers from the call
cache) and its log is re-delivered under the same name.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg

from assets.failures import LOG_ASSETS
from core.errors import SeedwheelError
from core.signals import dispositions_kept
from core.tables import atomic_write, frame_from_records, read_table, records_from_frame, write_table
from failures.traffic import ALL
from pipeline.definitions import build_definitions
from pipeline.instance import open_instance
from pipeline.profiles import profile_resources
from pipeline.promoted import current_policy
from pipeline.runs import RunSummary, materialize
from pipeline.settings import Settings
from resources import FailureInbox, LLMEndpoint, SeedRepository
from simulation import build_pool, draw, is_held_out, model_label, serve_night
from validators.tasks import TASK_FIELDS

logger = logging.getLogger(__name__)

SIMULATION_FOLDER = "simulation"
POOL_FILE = "pool.parquet"
NIGHTS_FILE = "nights.jsonl"
# Tables whose task ids a pool request must never be: the seeds, their variants, every split.
KNOWN_TABLES = ("seed_tasks", "task_variants", "failure_tasks", "train_tasks", "eval_tasks", "failure_eval")
NIGHT_COLUMNS = (
    "night", "model", "model_path", "served", "failed", "failure_rate", "failure_rate_low", "failure_rate_high",
    "failures_ingested", "tasks_derived", "trained_on", "decision", "promoted", "failures_fixed", "failures_broken",
    "run_id",
)  # fmt: skip


class SimulationError(SeedwheelError, ValueError):
    """A simulation that cannot run as asked: the message says why and what to do."""


@dataclass(frozen=True)
class SimulationConfig:
    """How the stand-in app behaves.

    Args:
        nights: nights to run after those already recorded.
        requests: requests served per night.
        pool_per_seed: pool requests made from each seed (the pool is built once, on the first night).
        temperature: the app's sampling temperature (0: greedy, as deployed agents mostly answer).
        max_tokens: longest answer.
    """

    nights: int = 1
    requests: int = 24
    pool_per_seed: int = 4
    temperature: float = 0.0
    max_tokens: int = 256

    def __post_init__(self) -> None:
        for name in ("nights", "requests", "pool_per_seed", "max_tokens"):
            if getattr(self, name) < 1:
                raise SimulationError(f"{name} ({getattr(self, name)}) must be at least 1")
        if self.temperature < 0:
            raise SimulationError(f"temperature ({self.temperature}) must be 0 or more")


Progress = Callable[[str], Callable[[int, int], None]]


def simulate(
    settings: Settings,
    config: SimulationConfig,
    *,
    echo: Callable[[str], None],
    progress: Progress,
    resources: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Run `config.nights` nights after the recorded ones; returns every night's record (`NIGHT_COLUMNS`).

    Args:
        settings: the storage root (local), seeds, inbox and profile the nights run with.
        config: the app's traffic.
        echo: where a line for people goes (the CLI prints it).
        progress: `progress(what)` gives a `(done, total)` callback for the answers of a night.
        resources: resource fields for the nightly runs, as `pipeline.runs.materialize` takes them (the launchpad's).
    """
    if not isinstance(settings.home, Path):
        raise SimulationError(
            f"seedwheel simulate needs a local storage root, not {settings.home}: pass --home DIR (the stand-in app "
            "is for trying the loop on one machine; a deployed app writes its traffic logs into the inbox instead)"
        )
    folder = settings.home / SIMULATION_FOLDER
    nights = _read_nights(folder / NIGHTS_FILE)
    for night in range(len(nights) + 1, len(nights) + config.nights + 1):
        record = _night(settings, config, night, folder, echo, progress, resources or {})
        nights.append(record)
        with atomic_write(folder / NIGHTS_FILE, "w") as handle:
            handle.write("".join(json.dumps(n, sort_keys=True) + "\n" for n in nights))
        echo(night_line(record))
    return nights


def night_line(record: Mapping[str, Any]) -> str:
    """A night's record as two lines for people.

    Example:
        >>> print(night_line({"night": 2, "model": "grpo-1a2b", "served": 24, "failed": 9, "failure_rate": 0.375,
        ...                   "failure_rate_low": 0.21, "failure_rate_high": 0.57, "failures_ingested": 9,
        ...                   "tasks_derived": 7, "trained_on": 40, "decision": "promoted", "failures_fixed": 2,
        ...                   "failures_broken": 0}))
        night 2: grpo-1a2b served 24, failed 9: failure rate 0.38 [0.21, 0.57]
          9 failures in, 7 tasks derived, trained on 40; promoted (held-out failures fixed 2, broken 0)
    """
    return (
        f"night {record['night']}: {record['model']} served {record['served']}, failed {record['failed']}: "
        f"failure rate {record['failure_rate']:.2f} [{record['failure_rate_low']:.2f}, "
        f"{record['failure_rate_high']:.2f}]\n  {record['failures_ingested']} failures in, {record['tasks_derived']} "
        f"tasks derived, trained on {record['trained_on']}; {record['decision']} (held-out failures fixed "
        f"{record['failures_fixed']}, broken {record['failures_broken']})"
    )


def _night(
    settings: Settings,
    config: SimulationConfig,
    night: int,
    folder: Path,
    echo: Callable[[str], None],
    progress: Progress,
    overrides: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    served = current_policy(settings)  # the model the app serves
    label = model_label(served)

    known = _stored_ids(settings.home)
    seeds = SeedRepository(path=str(settings.seeds_dir))
    pool = _pool(folder / POOL_FILE, seeds, config, known)
    requests = draw(pool, night=night, requests=config.requests, exclude=known)
    if not requests:
        raise SimulationError(
            f"the traffic pool ({len(pool)} requests) has none left to serve that is not held out or already in a "
            f"split: remove {folder / POOL_FILE} to build a larger one, with --pool-per-seed above "
            f"{config.pool_per_seed}"
        )
    echo(f"night {night}: serving {len(requests)} requests with {label}")
    lines = serve(
        settings, served, requests, night=night, config=config, progress=progress(f"night {night}: answered")
    )
    name = f"traffic-night-{night:03d}.jsonl"
    definitions = build_definitions(settings)
    inbox: FailureInbox = definitions.resources["inbox"]
    inbox.deliver(name, "".join(json.dumps(line) + "\n" for line in lines).encode())
    echo(f"night {night}: delivered {name} ({len(lines)} interactions) to the inbox; the nightly path runs")

    for partition in _inbox_tick(settings, definitions):
        logs = " or ".join(f"key:{k}" for k in LOG_ASSETS)
        _check(materialize(settings, logs, resources=overrides, partition=partition), partition)
    summary = _check(materialize(settings, resources=overrides, job="flywheel_job"), "flywheel_job")
    return _record(settings.home, night, served, name, summary)


def serve(
    settings: Settings,
    model: str,
    tasks: list[dict[str, Any]],
    *,
    night: int,
    config: SimulationConfig,
    progress: Callable[[int, int], None],
) -> list[dict[str, Any]]:
    """The stand-in app's answers to `tasks` with `model` (a local server through the LLM endpoint resource's own
    machinery), each verified: one traffic-log record per task, in order (`simulation.serve_night`)."""
    llm: LLMEndpoint = profile_resources(settings).resources()["llm"]
    with llm.model_copy(update={"base_url": "", "model": model}).endpoint() as endpoint:
        return serve_night(
            endpoint.client(),
            tasks,
            model=model_label(model),
            night=night,
            clock=lambda: datetime.now(UTC),
            context=SeedRepository(path=str(settings.seeds_dir)).verify_context(),
            params={"temperature": config.temperature, "max_tokens": config.max_tokens},
            progress=progress,
        )


def held_out_pool(settings: Settings) -> list[dict[str, Any]]:
    """The stored traffic pool's held-out requests (`simulation.is_held_out`): never served on a night, so a
    model can be measured on traffic no night's failures taught it. Empty before the first night."""
    path = Path(settings.home) / SIMULATION_FOLDER / POOL_FILE
    if not path.exists():
        return []
    return [task for task in records_from_frame(read_table(path)) if is_held_out(task["task_id"])]


def _pool(path: Path, seeds: SeedRepository, config: SimulationConfig, known: set[str]) -> list[dict[str, Any]]:
    """The stored pool, else one built now from the seeds and stored (so every night draws from the same pool)."""
    if path.exists():
        return records_from_frame(read_table(path))
    pool = build_pool(seeds.load().tasks, per_seed=config.pool_per_seed, known=known)
    write_table(frame_from_records(pool, TASK_FIELDS), path)
    return pool


def _inbox_tick(settings: Settings, definitions: dg.Definitions) -> list[str]:
    """One tick of the `failure_inbox` sensor, as the daemon would run it: its new partitions are added, and the
    partitions it requests runs for are returned."""
    sensor = definitions.resolve_sensor_def("failure_inbox")
    with dispositions_kept(), open_instance(settings) as instance:
        context = dg.build_sensor_context(instance=instance, resources=definitions.resources)
        with context as tick:
            result = sensor(tick)
        for request in result.dynamic_partitions_requests:
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return [request.partition_key for request in result.run_requests]


def _check(summary: RunSummary, what: str) -> RunSummary:
    if not summary.success:
        raise SimulationError(
            f"the run for {what} failed ({summary.run_id}): {'; '.join(summary.failures)[:2000]}",
            hint="see the run in `seedwheel ui`; rerun seedwheel simulate to serve this night again",
        )
    return summary


def _stored_ids(home: Path) -> set[str]:
    ids: set[str] = set()
    for table in KNOWN_TABLES:
        path = home / f"{table}.parquet"
        if path.exists():
            ids |= set(read_table(path)["task_id"])
    return ids


def _record(home: Path, night: int, served: str, log: str, summary: RunSummary) -> dict[str, Any]:
    """The night's record, from what the nightly path stored: its log's row of `failure_rates`, its failures, the
    failure tasks derived from them, the GRPO manifest and the gate's decision."""
    rates = read_table(home / "failure_rates.parquet")
    label = model_label(served)
    [overall] = records_from_frame(rates[(rates["log"] == log) & (rates["model"] == label) & (rates["family"] == ALL)])
    failure_ids = set(read_table(home / "failure_logs" / f"{log}.parquet")["failure_id"])
    derived = records_from_frame(read_table(home / "failure_tasks.parquet"))
    meta = {asset.key: asset.metadata for asset in summary.assets}
    promotion = meta.get("promotion", {})
    grpo = read_table(home / "grpo_checkpoint.parquet") if (home / "grpo_checkpoint.parquet").exists() else None
    return {
        "night": night,
        "model": label,
        "model_path": served,
        **{key: overall[key] for key in ("served", "failed", "failure_rate", "failure_rate_low", "failure_rate_high")},
        "failures_ingested": len(failure_ids),
        "tasks_derived": sum(t["lineage"]["failure_id"] in failure_ids for t in derived),
        "trained_on": len(grpo.iloc[-1]["task_ids"]) if grpo is not None and len(grpo) else 0,
        "decision": promotion.get("decision", "no gate ran"),
        "promoted": bool(promotion.get("promoted", False)),
        "failures_fixed": len(promotion.get("failures_fixed") or []),
        "failures_broken": len(promotion.get("failures_broken") or []),
        "run_id": summary.run_id,
    }


def _read_nights(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
