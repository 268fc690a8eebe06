"""`seedwheel simulate`: two nights of a stand-in app's traffic, each followed by the whole nightly path (tiny model).

The mechanics, not the learning (the tiny random model fails nearly everything): night 1's traffic goes through
the inbox to failure tasks and into the splits, each night's record holds its traffic, failure rate with its
interval and the gate's decision, and night 2 serves whatever is promoted by then.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core.tables import read_table, records_from_frame
from failures import wilson_interval
from pipeline.profiles import profile_resources
from pipeline.promoted import current_policy
from pipeline.settings import Settings
from pipeline.simulate import NIGHT_COLUMNS, SimulationConfig, held_out_pool
from pipeline.simulate import simulate as run_nights
from resources import StorageRoot
from simulation import is_held_out
from tests.paths import tiny_settings

pytestmark = pytest.mark.slow

SPLITS = ("train_tasks", "eval_tasks", "failure_eval")


@pytest.fixture
def settings(tmp_path: Path, tiny_models_env: dict[str, str]) -> Settings:
    """Quickstart settings over the arithmetic and SQL seeds (tiny model)."""
    return tiny_settings(tmp_path, tiny_models_env, ["arithmetic", "sql"])


# The tiny random model solves nothing, so no task is within its reach: GRPO trains on unprofiled tasks too.
TINY = {"training": {"grpo_unprofiled": True, "grpo": {"max_completion_length": 8, "max_steps": 1}}}


def simulate(settings: Settings) -> str:
    """One night, as `seedwheel simulate --nights 1 --requests 12 --pool-per-seed 2` runs it; its printout."""
    lines: list[str] = []
    config = SimulationConfig(nights=1, requests=12, pool_per_seed=2)
    run_nights(settings, config, echo=lines.append, progress=lambda what: lambda done, total: None, resources=TINY)
    return "\n".join(lines)


def test_two_nights_close_the_loop_through_the_inbox(settings: Settings, tmp_path: Path) -> None:
    simulate(settings)
    home = settings.home
    [night1] = [json.loads(line) for line in (home / "simulation" / "nights.jsonl").read_text().splitlines()]
    assert list(night1) == sorted(NIGHT_COLUMNS)
    assert night1["served"] == 12 and night1["model"] == Path(settings.base_model).name
    # Every answer was verified (none unknown): the interval is Wilson's over all 12.
    assert (night1["failure_rate_low"], night1["failure_rate_high"]) == wilson_interval(night1["failed"], 12)
    assert not list(Path(settings.failure_inbox).glob("*.jsonl"))  # the log left the inbox once stored

    # The log went the documented way: a partition per file, text-free traffic rows, failures redacted as tasks.
    traffic = read_table(home / "production_traffic" / "traffic-night-001.jsonl.parquet")
    assert len(traffic) == 12 and set(traffic["model"]) == {night1["model"]}
    assert night1["failures_ingested"] == night1["failed"] > 0
    failure_ids = set(read_table(home / "failure_logs" / "traffic-night-001.jsonl.parquet")["failure_id"])
    derived = records_from_frame(read_table(home / "failure_tasks.parquet"))
    assert {t["lineage"]["failure_id"] for t in derived} <= failure_ids and night1["tasks_derived"] == len(derived)
    in_splits = {t for s in SPLITS for t in read_table(home / f"{s}.parquet")["task_id"]}
    assert {t["task_id"] for t in derived} & in_splits  # production failures became training or eval data
    rates = read_table(home / "failure_rates.parquet")
    assert rates.loc[(rates["night"] == 1) & (rates["family"] == "all"), "failed"].tolist() == [night1["failed"]]
    assert night1["decision"] in ("promoted", "kept baseline")

    # The pool is never a seed, and its held-out share is never served (a failure's source names its request).
    pool = set(read_table(home / "simulation" / "pool.parquet")["task_id"])
    assert pool and not pool & set(read_table(home / "seed_tasks.parquet")["task_id"])
    assert not any(is_held_out(request) for request in served_requests(home, 1))

    # Whatever is promoted is what the next night serves: here, a checkpoint the gate promoted as it would.
    promoted = home / "training" / "grpo" / "promoted" / "output" / "final"  # where GRPO runs keep their weights
    shutil.copytree(settings.base_model, promoted)
    gate = profile_resources(settings).gate
    gate.registry(StorageRoot(root=str(home)).state()).promote(promoted, run_id="test")
    second = simulate(settings)
    nights = [json.loads(line) for line in (home / "simulation" / "nights.jsonl").read_text().splitlines()]
    assert [n["night"] for n in nights] == [1, 2] and nights[1]["model"] == "grpo-promoted"
    assert nights[1]["model_path"] == str(promoted) == current_policy(settings)
    assert "night 2: grpo-promoted served 12" in second
    night2_traffic = read_table(home / "production_traffic" / "traffic-night-002.jsonl.parquet")
    assert set(night2_traffic["model"]) == {"grpo-promoted"}
    # No request served on night 2 was in a split by then (night 1's failures were), nor held out.
    assert served_requests(home, 2) and not served_requests(home, 2) & in_splits
    assert not any(is_held_out(request) for request in served_requests(home, 2))
    # The held-out share is what a model is measured on afterwards (bench/flywheel_nights.py): the pool's own.
    held_out = {task["task_id"] for task in held_out_pool(settings)}
    assert held_out and held_out < pool and all(is_held_out(request) for request in held_out)


def served_requests(home: Path, night: int) -> set[str]:
    """The pool task ids a night's failures were served for (the app logs each request's id in `source`)."""
    failures = records_from_frame(read_table(home / "failure_logs" / f"traffic-night-{night:03d}.jsonl.parquet"))
    return {record["source"]["request"] for record in failures}
