"""kill -9 mid-materialization (generation, judge, training): whole files only, nothing left running, and a rerun
that finishes without repeating the LLM calls or the training steps already done.

Each stage runs in a real child process (the CLI's `materialize`), which is SIGKILLed: no cleanup code runs.
"""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from llm.cache import DB_NAME
from pipeline.runs import materialize
from pipeline.settings import Settings
from tests.outputs import assert_whole_files
from tests.paths import REPO, SEEDS
from validators.seeds import load_seeds
from validators.tables import frame_from_records, write_table
from validators.tasks import TASK_FIELDS

pytestmark = pytest.mark.slow

CHILD = """
import json, sys
from pathlib import Path
from llm.cache import DB_NAME
from pipeline.runs import materialize
from pipeline.settings import Settings
home, dagster_home, select, resources, seeds, environ = sys.argv[1:7]
settings = Settings.from_env(
    json.loads(environ), home=Path(home), seeds_dir=Path(seeds), dagster_home=Path(dagster_home)
)
materialize(settings, select, resources=json.loads(resources))
"""


def run_and_kill(settings: Settings, select: str, until: Callable[[], bool], resources: dict | None = None) -> None:
    """Start `materialize(select)` in a child process and SIGKILL its process group once `until()` holds."""
    args = [
        *(str(settings.home), str(settings.dagster_home), select, json.dumps(resources or {}), str(SEEDS)),
        json.dumps(settings.environ()),
    ]
    log = open(settings.home.parent / f"child-{time.time_ns()}.log", "wb")  # noqa: SIM115 (closed below)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args], cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 600
        while not until():
            assert child.poll() is None, f"the run ended before the kill: {Path(log.name).read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the kill point was never reached"
            time.sleep(0.2)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        log.close()


def llm_cache_rows(settings: Settings) -> int:
    path = settings.home / "llm_cache" / DB_NAME
    if not path.exists():
        return 0
    with sqlite3.connect(path, timeout=30) as db:
        try:
            return db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        except sqlite3.OperationalError:  # the table is not created yet
            return 0


def leftover_processes(settings: Settings) -> list[str]:
    """Processes whose command line mentions the storage root (model servers, training jobs), after a grace."""
    marker = str(settings.home).encode()
    deadline = time.monotonic() + 30
    while True:
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                args = cmdline.read_bytes()
                state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker in args and state not in ("Z", "X"):
                found.append(args.replace(b"\0", b" ").decode(errors="replace")[:200])
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


@pytest.fixture
def killable(tmp_path, tiny_models_env) -> Settings:
    settings = Settings.from_env(
        tiny_models_env, home=tmp_path / "home", seeds_dir=SEEDS, dagster_home=tmp_path / "dagster"
    )
    settings.home.mkdir(parents=True)
    return settings


def test_generation_killed_mid_llm_calls_resumes_without_repeating_them(killable):
    settings = killable
    select = "key:seed_tasks or key:failure_tasks or key:task_variants"
    every_parent = {"plan": {"rewrite_max_per_family": None}}  # many calls, so the kill lands mid-run
    assert materialize(settings, "key:seed_tasks or key:failure_tasks").success
    run_and_kill(settings, select, until=lambda: llm_cache_rows(settings) >= 20, resources=every_parent)
    assert leftover_processes(settings) == []  # the model server went down with the killed run
    assert_whole_files(settings.home)
    done_before = llm_cache_rows(settings)
    rerun = materialize(settings, select, resources=every_parent)
    assert rerun.success, rerun.failures
    metadata = next(a for a in rerun.assets if a.key == "task_variants").metadata
    assert metadata["llm_calls_cached"] >= done_before  # every answer that reached the cache is reused
    assert metadata["llm_calls_made"] + metadata["llm_calls_cached"] == metadata["parents"]  # one call per parent


def test_judging_killed_mid_run_resumes_without_repeating_calls(killable):
    settings = killable
    upstream = materialize(settings, "+key:deduplicated_tasks")  # everything upstream of the judge
    assert upstream.success, upstream.failures
    assert materialize(settings, "key:judge_calibration").success
    before = llm_cache_rows(settings)
    more = {"judge": {"max_per_family": 8}}  # enough judgments (batches of 8) that the kill lands mid-run
    run_and_kill(settings, "key:judged_tasks", until=lambda: llm_cache_rows(settings) >= before + 4, resources=more)
    assert leftover_processes(settings) == []
    assert_whole_files(settings.home)
    done_before = llm_cache_rows(settings) - before
    rerun = materialize(settings, "key:judged_tasks", resources=more)
    assert rerun.success, rerun.failures
    metadata = next(a for a in rerun.assets if a.key == "judged_tasks").metadata
    assert metadata["llm_calls_cached"] >= done_before


def test_training_killed_mid_run_resumes_from_its_last_checkpoint(killable, tiny_model_dir):
    settings = killable
    seeds = load_seeds([SEEDS / "arithmetic"], root=SEEDS.parent).tasks[:16]
    tasks = [{k: t[k] for k in TASK_FIELDS} for t in seeds]
    write_table(frame_from_records(tasks, TASK_FIELDS), settings.home / "train_tasks.parquet")
    profile = pd.DataFrame({"task_id": [t["task_id"] for t in tasks], "in_grpo_set": True})
    write_table(profile, settings.home / "difficulty_profile.parquet")
    manifest = {"stage": "sft", "checkpoint": str(tiny_model_dir), "base_model": str(tiny_model_dir)}
    write_table(pd.DataFrame([manifest]), settings.home / "sft_checkpoint.parquet")
    grpo = {"max_steps": 12, "save_steps": 2, "num_generations": 2, "per_device_train_batch_size": 4}
    resources = {"training": {"grpo": {**grpo, "max_completion_length": 8, "max_prompt_tokens": 512}}}
    runs = settings.home / "training" / "grpo"
    checkpoint = lambda: any(runs.glob("*/output/checkpoint-2/trainer_state.json"))  # noqa: E731
    run_and_kill(settings, "key:grpo_checkpoint", until=checkpoint, resources=resources)
    assert leftover_processes(settings) == []  # the training job went down with the killed run
    assert_whole_files(settings.home)
    rerun = materialize(settings, "key:grpo_checkpoint", resources=resources)
    assert rerun.success, rerun.failures
    metadata = rerun.assets[0].metadata
    assert metadata["steps"] == 12
    assert "checkpoint-" in metadata["resumed_from"]  # resumed, not restarted
    assert [p.name for p in runs.glob("*/train.parquet")] == ["train.parquet"]  # one run directory, reused
