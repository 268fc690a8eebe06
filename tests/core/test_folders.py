"""Folders on an S3-compatible server (moto, on loopback): working copies, manifest commits, concurrent commits
from two processes, and nothing visible from a step that failed."""

import multiprocessing
import os
import tempfile
from pathlib import Path

import pytest

from core.folders import FolderConflict, RemoteFolder, StoreUnavailable, working_copy


def test_a_working_copy_commits_its_files_and_the_next_one_reads_them(s3_bucket):
    url = f"s3://{s3_bucket}/home/dedup_index"
    with working_copy(url) as folder:
        assert list(folder.iterdir()) == []
        (folder / "segments").mkdir()
        (folder / "segments" / "a.parquet").write_bytes(b"A" * 3000)
        (folder / "meta.json").write_text("{}")
    with working_copy(url) as folder:
        assert (folder / "segments" / "a.parquet").read_bytes() == b"A" * 3000
        (folder / "meta.json").unlink()
        (folder / "segments" / "b.parquet").write_bytes(b"B")
    latest = RemoteFolder(url).latest()
    assert latest.generation == 2 and sorted(latest.files) == ["segments/a.parquet", "segments/b.parquet"]


def test_a_step_that_fails_changes_nothing_and_stray_objects_are_not_the_folder(s3_bucket):
    url = f"s3://{s3_bucket}/home/export"
    with working_copy(url) as folder:
        (folder / "train.jsonl").write_text("one\n")
    with pytest.raises(RuntimeError, match="killed"), working_copy(url) as folder:
        (folder / "train.jsonl").write_text("half of two\n")
        raise RuntimeError("killed")
    remote = RemoteFolder(url)
    remote.fs.pipe_file(f"{remote.root}/objects/{'0' * 64}", b"an upload whose commit never came")
    remote.fs.pipe_file(f"{remote.root}/train.jsonl", b"a file written beside the protocol")
    with working_copy(url) as folder:
        assert [p.name for p in folder.iterdir()] == ["train.jsonl"]
        assert (folder / "train.jsonl").read_text() == "one\n"
    assert remote.latest().generation == 1


def _commit_after_barrier(url: str, name: str, content: str, barrier) -> str:
    remote = RemoteFolder(url)
    with tempfile.TemporaryDirectory() as scratch:
        base = remote.checkout(Path(scratch))
        (Path(scratch) / name).write_text(content)
        barrier.wait(timeout=60)  # both have read the same generation before either commits
        try:
            return str(remote.commit(Path(scratch), base).generation)
        except FolderConflict as exc:
            return f"conflict: {exc}"


def _race(url: str, writes: list[tuple[str, str]]) -> list[str]:
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(2) as pool:
        barrier = manager.Barrier(2)
        return pool.starmap(_commit_after_barrier, [(url, name, text, barrier) for name, text in writes])


def test_two_processes_committing_different_files_at_once_both_land(s3_bucket):
    url = f"s3://{s3_bucket}/home/validation_cache"
    assert sorted(_race(url, [("shard-0.parquet", "zero"), ("shard-1.parquet", "one")])) == ["1", "2"]
    assert sorted(RemoteFolder(url).latest().files) == ["shard-0.parquet", "shard-1.parquet"]


def test_two_processes_changing_the_same_file_differently_get_a_conflict_not_a_lost_write(s3_bucket):
    url = f"s3://{s3_bucket}/home/judge_history"
    results = sorted(_race(url, [("judged.json", "mine"), ("judged.json", "theirs")]))
    assert results[0] == "1" and results[1].startswith("conflict: ") and "judged.json" in results[1]


def test_a_missing_bucket_and_an_unsupported_store_name_the_setting_and_the_fix(s3_bucket):
    with pytest.raises(StoreUnavailable, match=r"SEEDWHEEL_HOME: the bucket of s3://no-such-bucket-x/home") as caught:
        RemoteFolder("s3://no-such-bucket-x/home").latest()
    assert "aws s3 mb s3://no-such-bucket-x" in caught.value.hint
    with pytest.raises(StoreUnavailable, match="create-only write"):
        RemoteFolder("memory://seedwheel/home")


def test_a_local_folder_is_its_own_working_copy(tmp_path):
    with working_copy(tmp_path / "index") as folder:
        (folder / "a").write_text("x")
    assert (tmp_path / "index" / "a").read_text() == "x" and os.listdir(tmp_path) == ["index"]
