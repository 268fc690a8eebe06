"""`seedwheel prune`: a failed run's step outputs go once they are old, on a local root and on S3, and on S3 the
committed folders' superseded manifests and unnamed objects too; nothing young, nothing in use."""

import os
import time
from pathlib import Path

from click.testing import CliRunner

from core.folders import RemoteFolder, working_copy
from pipeline.cli import main
from resources import StorageRoot

DAY = 86_400.0


def test_a_failed_runs_step_outputs_go_once_they_are_old(tmp_path):
    home = tmp_path / "home"
    for run, age in (("old-run", 3 * DAY), ("recent-run", 60.0)):
        shard = home / "steps" / run / "validated_tasks.check_shard[0]"
        shard.mkdir(parents=True)
        (shard / "verdicts.parquet").write_bytes(b"x" * 100)
        os.utime(shard / "verdicts.parquet", (time.time() - age, time.time() - age))
    (home / "seed_tasks.parquet").write_bytes(b"a table")
    os.utime(home / "seed_tasks.parquet", (time.time() - 9 * DAY, time.time() - 9 * DAY))

    result = CliRunner().invoke(main, ["prune", "--home", str(home)])
    assert result.exit_code == 0, result.output
    assert f"{home}/steps/old-run: 0 manifests, 1 files, 100 bytes" in result.output
    assert sorted(p.name for p in (home / "steps").iterdir()) == ["recent-run"]  # a re-execution may still use it
    assert (home / "seed_tasks.parquet").exists()  # tables are never garbage
    again = CliRunner().invoke(main, ["prune", "--home", str(home), "--min-age-hours", "0"])
    assert "nothing" not in again.output and not list((home / "steps").iterdir())
    assert CliRunner().invoke(main, ["prune", "--home", str(home)]).output == "nothing to prune\n"


def test_an_object_store_root_prunes_every_committed_folder(s3_bucket):
    root = f"s3://{s3_bucket}/home"
    for night in range(3):
        for folder in ("judge_history", "dedup_index/minhash-x"):
            with working_copy(f"{root}/{folder}") as local:
                (local / "state.json").write_text(f"{folder} night {night}")
    storage = StorageRoot(root=root)
    steps = RemoteFolder(root).fs
    steps.pipe_file(f"{s3_bucket}/home/steps/run-1/task_variants.generate_shard[0]/variants.parquet", b"v" * 10)

    assert storage.prune() == []  # all young
    rows = storage.prune(keep=1, now=time.time() + 2 * DAY)
    assert [(row["what"], row["manifests"], row["objects"]) for row in rows] == [
        (f"{root}/dedup_index/minhash-x", 2, 2),
        (f"{root}/judge_history", 2, 2),
        (f"{root}/steps/run-1", 0, 1),
    ]
    for folder in ("judge_history", "dedup_index/minhash-x"):
        with working_copy(f"{root}/{folder}") as local:
            assert (Path(local) / "state.json").read_text() == f"{folder} night 2"
    assert not steps.exists(f"{s3_bucket}/home/steps/run-1")
