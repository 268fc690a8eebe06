"""The production deployment on real services: the Dagster instance in PostgreSQL, the nightly regeneration's
steps on two Celery workers (`seedwheel worker`) with Redis as the broker, the LLM cache in the same database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pandas as pd
import psycopg2
import pytest
from upath import UPath

from langmodels.launcher import ModelServer
from pipeline.instance import open_instance
from pipeline.runs import materialize
from pipeline.settings import Settings
from tests.paths import REAL_MODELS_DIR, copy_seeds
from tests.services import fresh_database, redis_server

pytestmark = pytest.mark.slow

REGENERATION = "group:seeds or group:failures or group:generation or group:curation or group:judging"
SMALL = {"plan": {"per_seed": 1}}
SEEDWHEEL = str(Path(sys.executable).with_name("seedwheel"))


@contextmanager
def workers(settings: Settings, count: int, log_dir: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`count` `seedwheel worker` processes with `settings`, stopped (SIGTERM, Celery's warm shutdown) after."""
    env = {**os.environ, **settings.environ()}
    started = []
    try:
        for i in range(count):
            with open(log_dir / f"worker{i}.log", "wb") as log:
                command = [SEEDWHEEL, "worker", "--name", f"w{i}@%h"]
                started.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
        yield started
    finally:
        for process in started:
            process.send_signal(signal.SIGTERM)
        for process in started:
            process.wait(timeout=60)


def test_the_regeneration_runs_its_steps_on_two_celery_workers_over_postgres(tmp_path, postgres_url):
    database = fresh_database(postgres_url)
    with redis_server(tmp_path) as port:
        settings = Settings.from_env(
            {"SEEDWHEEL_DATABASE_URL": database, "SEEDWHEEL_CELERY_BROKER": f"redis://127.0.0.1:{port}/0"},
            home=tmp_path / "home",
            seeds_dir=copy_seeds(tmp_path / "seeds", ["arithmetic"], audit=["arithmetic"]),
            dagster_home=tmp_path / "dagster",
            models_dir=REAL_MODELS_DIR,
        )
        with workers(settings, 2, tmp_path) as started:
            summary = materialize(settings, REGENERATION, resources=SMALL, executor="celery")
            alive = [p.poll() is None for p in started]
        assert summary.success, [*summary.failures, (tmp_path / "worker0.log").read_text()[-3000:]]
        assert alive == [True, True]

    with open_instance(settings) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        starts = instance.all_logs(summary.run_id, of_type=dg.DagsterEventType.STEP_START)
        stored = json.dumps(instance.get_run_by_id(summary.run_id).run_config)
    assert settings.celery_broker not in stored  # the run config names the broker's variable, not its URL
    step_pids = {entry.dagster_event.pid for entry in starts}
    worker_pids = {p.pid for p in started}
    assert len(starts) >= 8 and step_pids == worker_pids  # every step ran in a worker, and both workers worked
    assert {"judged_tasks", "train_tasks", "eval_tasks"} <= {a.key for a in summary.assets}

    # The runs and the LLM cache are rows in the database, not files under the Dagster home or the storage root.
    with psycopg2.connect(database) as db, db.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runs WHERE run_id = %s", (summary.run_id,))
        assert cursor.fetchone() == (1,)
        cursor.execute("SELECT count(*) FROM responses")
        assert cursor.fetchone()[0] > 0
    assert not list((tmp_path / "dagster").glob("**/*.db")) and not list((tmp_path / "home").glob("**/*.sqlite3"))


def test_the_regeneration_on_object_storage_writes_nothing_to_the_local_disk(
    tmp_path, postgres_url, s3_bucket, real_model_dir
):
    """SEEDWHEEL_HOME on S3 (moto), the instance, LLM cache, ledger and locks in PostgreSQL, the model served
    apart (as vLLM would be): `seedwheel run` leaves only the instance's config on this machine."""
    home = f"s3://{s3_bucket}/seedwheel"
    database = fresh_database(postgres_url)
    seeds = copy_seeds(tmp_path / "seeds", ["arithmetic"], audit=["arithmetic"])
    watched = {name: tmp_path / name for name in ("cwd", "user", "dagster")}  # what a run could litter
    for folder in (*watched.values(), tmp_path / "tmp", tmp_path / "server"):
        folder.mkdir()
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with ModelServer(real_model_dir, log_dir=tmp_path / "server", extra_args=["--threads", "2"]) as server:
        env = {
            **os.environ,  # the AWS_* variables of the test's S3 server among them
            "SEEDWHEEL_HOME": home,
            "SEEDWHEEL_DATABASE_URL": database,
            "SEEDWHEEL_SEEDS": str(seeds),
            "SEEDWHEEL_LLM_BASE_URL": server.base_url,
            "SEEDWHEEL_LLM_MODEL": server.model,
            "DAGSTER_HOME": str(watched["dagster"]),
            "HOME": str(watched["user"]),
            "XDG_CACHE_HOME": str(watched["user"] / ".cache"),
            "TMPDIR": str(tmp_path / "tmp"),
            "MPLCONFIGDIR": str(tmp_path / "tmp" / "matplotlib"),  # as the Dockerfile sets it: a font cache
        }
        result = subprocess.run(
            [SEEDWHEEL, "run", "--job", "regeneration_job"],  # the nightly schedule's job, by name
            cwd=watched["cwd"],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]

    # On this machine: the instance's config (its runs are in the database), the temporary folder, nothing else
    # (the model server's logs are the served model's, a service apart, as vLLM would be).
    written = sorted(
        p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.relative_to(tmp_path).parts[0] in watched
    )
    new = {str(p) for p in written if p not in before}
    assert new <= {"dagster/dagster.yaml", "dagster/.instance.lock"}, sorted(new)

    # In the bucket: the tables, and each side-state folder as committed objects and a manifest.
    remote = UPath(home)
    assert len(pd.read_parquet(str(remote / "train_tasks.parquet"))) > 0
    for folder in ("validation_cache", "generation_cache", "dedup_index", "export", "judge_history"):
        assert list((remote / folder).rglob("manifests/*.json")), folder
    with psycopg2.connect(database) as db, db.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM split_ledger")
        assert cursor.fetchone()[0] > 0
