"""kill -9 mid-materialization (generation, judge, training): whole files only, nothing left running, and a rerun
that finishes without repeating the LLM calls or the training steps already done.

Each stage runs in a real child process (the CLI's `materialize`), which is SIGKILLed: no cleanup code runs. The
tests use one family (the arithmetic seeds) and plant the upstream tables they need instead of materializing them;
a dozen LLM answers, capped at a few tokens, are asked one at a time, so the kill lands after the first with the
others still to come (seconds of margin on a loaded machine), and each rerun checks that it had calls left to make.
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

from core.tables import frame_from_records, write_table
from langmodels.cache import DB_NAME
from pipeline.runs import materialize
from pipeline.settings import Settings
from tests.outputs import assert_whole_files
from tests.paths import REPO, copy_seeds
from tests.processes import leftover_processes
from validators.seeds import load_seeds
from validators.tasks import TASK_FIELDS

pytestmark = pytest.mark.slow

FAMILY = "arithmetic"
# Answers of a few tokens (the tiny model's are noise anyway), one request at a time, a dozen in all: the kill lands
# after the first answer reaches the cache, with the others still to come.
CALLS = 12
ONE_SHORT_ANSWER_AT_A_TIME = {"max_concurrency": 1, "max_tokens": 16}

CHILD = """
import json, sys
from pathlib import Path
from langmodels.cache import DB_NAME
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
        *(str(settings.home), str(settings.dagster_home), select, json.dumps(resources or {})),
        *(str(settings.seeds_dir), json.dumps(settings.environ())),
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
            time.sleep(0.1)
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


@pytest.fixture
def killable(tmp_path, tiny_models_env) -> Settings:
    """Settings on a seeds folder with the arithmetic seeds alone, the tiny model behind the local server."""
    seeds = copy_seeds(tmp_path / "seeds", [FAMILY])
    settings = Settings.from_env(
        tiny_models_env, home=tmp_path / "home", seeds_dir=seeds, dagster_home=tmp_path / "dagster"
    )
    settings.home.mkdir(parents=True)
    return settings


@pytest.fixture
def seed_tasks(killable: Settings) -> list[dict]:
    seeds = load_seeds([killable.seeds_dir / FAMILY], root=killable.seeds_dir.parent).tasks
    assert len(seeds) > CALLS
    return [{k: t[k] for k in TASK_FIELDS} for t in seeds]


def test_generation_killed_mid_llm_calls_resumes_without_repeating_them(killable):
    settings = killable
    select = "key:seed_tasks or key:failure_tasks or key:task_variants"
    resources = {"plan": {"rewrite_max_per_family": CALLS}, "llm": ONE_SHORT_ANSWER_AT_A_TIME}
    assert materialize(settings, "key:seed_tasks or key:failure_tasks").success
    run_and_kill(settings, select, until=lambda: llm_cache_rows(settings) >= 1, resources=resources)
    assert leftover_processes(settings.home) == []  # the model server went down with the killed run
    assert_whole_files(settings.home)
    done_before = llm_cache_rows(settings)
    rerun = materialize(settings, select, resources=resources)
    assert rerun.success, rerun.failures
    metadata = next(a for a in rerun.assets if a.key == "task_variants").metadata
    assert metadata["llm_calls_made"] > 0  # the kill landed mid-run, not after the last call
    assert metadata["llm_calls_cached"] >= done_before > 0  # every answer that reached the cache is reused
    assert metadata["llm_calls_made"] + metadata["llm_calls_cached"] == CALLS  # one call per rewritten parent


def test_judging_killed_mid_run_resumes_without_repeating_calls(killable, seed_tasks):
    settings = killable
    # The judge's input, planted: the seeds as the deduplicated table, none a duplicate.
    planted = frame_from_records(seed_tasks, TASK_FIELDS).assign(is_duplicate=False)
    write_table(planted, settings.home / "deduplicated_tasks.parquet")
    # And a calibration made before, whose verdict on the judge the labels carry.
    write_table(pd.DataFrame({"calibration_passed": [True]}), settings.home / "judge_calibration.parquet")
    resources = {"judge": {"max_per_family": CALLS}, "llm": ONE_SHORT_ANSWER_AT_A_TIME}  # a call per task
    run_and_kill(settings, "key:judged_tasks", until=lambda: llm_cache_rows(settings) >= 1, resources=resources)
    assert leftover_processes(settings.home) == []
    assert_whole_files(settings.home)
    done_before = llm_cache_rows(settings)
    rerun = materialize(settings, "key:judged_tasks", resources=resources)
    assert rerun.success, rerun.failures
    metadata = next(a for a in rerun.assets if a.key == "judged_tasks").metadata
    assert metadata["llm_calls_made"] > 0
    assert metadata["llm_calls_cached"] >= done_before > 0
    assert metadata["judged"] == CALLS


def test_training_killed_mid_run_resumes_from_its_last_checkpoint(killable, seed_tasks, tiny_model_dir):
    settings = killable
    tasks = seed_tasks[:16]
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
    assert leftover_processes(settings.home) == []  # the training job went down with the killed run
    assert_whole_files(settings.home)
    rerun = materialize(settings, "key:grpo_checkpoint", resources=resources)
    assert rerun.success, rerun.failures
    metadata = rerun.assets[0].metadata
    assert metadata["steps"] == 12
    assert "checkpoint-" in metadata["resumed_from"]  # resumed, not restarted
    assert [p.name for p in runs.glob("*/train.parquet")] == ["train.parquet"]  # one run directory, reused
