"""Folders on an S3-compatible server (moto, on loopback): working copies, manifest commits, concurrent commits
from two processes, nothing visible from a step that failed, read-only copies cached by content, and pruning that
never takes what a reader or a commit may still need."""

import hashlib
import multiprocessing
import os
import tempfile
import time
from pathlib import Path

import pytest

from core.folders import FolderConflict, Pruned, RemoteFolder, StoreUnavailable, read_only_copy, working_copy


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


def test_a_read_only_copy_of_a_folder_inside_a_commit_is_downloaded_once_per_content(s3_bucket, tmp_path, monkeypatch):
    run = f"s3://{s3_bucket}/home/training/sft/0a1b"
    with working_copy(run) as folder:
        for name, content in [("final/model.bin", "weights"), ("final/sub/tokenizer.json", "{}"), ("ckpt/x", "")]:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(content)
    cache = tmp_path / "cache"
    copy = read_only_copy(f"{run}/final", cache)
    # The files under final/ alone, read-only, in a folder of the cache named by their content.
    files = sorted(str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file())
    assert files == ["model.bin", "sub/tokenizer.json"]
    assert (copy / "model.bin").read_text() == "weights" and not (copy / "model.bin").stat().st_mode & 0o222
    assert [p.name for p in cache.iterdir()] == [copy.name]  # no scratch folder left beside it

    # A second reader finds the copy: nothing is downloaded.
    def no_download(*args):
        raise AssertionError("downloaded again")

    with monkeypatch.context() as patched:
        patched.setattr(RemoteFolder, "download", no_download)
        assert read_only_copy(f"{run}/final/", cache) == copy
    # Other contents (a newer commit) get a copy of their own; the same contents elsewhere share one.
    with working_copy(run) as folder:
        (folder / "final" / "model.bin").write_text("retrained")
    newer = read_only_copy(f"{run}/final", cache)
    assert newer != copy and (newer / "model.bin").read_text() == "retrained"
    with working_copy(f"s3://{s3_bucket}/home/elsewhere") as folder:
        (folder / "model.bin").write_text("weights")
        (folder / "sub").mkdir()
        (folder / "sub" / "tokenizer.json").write_text("{}")
    assert read_only_copy(f"s3://{s3_bucket}/home/elsewhere", cache) == copy

    with pytest.raises(FileNotFoundError, match="no committed folder holds it"):
        read_only_copy(f"s3://{s3_bucket}/home/training/grpo/never/final", cache)
    with pytest.raises(FileNotFoundError, match="has no file under it"):
        read_only_copy(f"{run}/fina", cache)


DAY = 86_400.0


def _commit(url: str, files: dict[str, str]) -> None:
    with working_copy(url) as folder:
        for name, content in files.items():
            (folder / name).write_text(content)


def _objects(remote: RemoteFolder) -> set[str]:
    return {path.rsplit("/", 1)[-1] for path in remote.fs.ls(f"{remote.root}/objects", refresh=True)}


def test_prune_deletes_old_manifests_and_unnamed_objects_once_no_reader_can_need_them(s3_bucket):
    url = f"s3://{s3_bucket}/home/judge_history"
    for night in range(4):  # generations 1-4, each replacing one file: the old versions' objects fall out of use
        _commit(url, {"judged.json": f"night {night}", "rubric.txt": "r1"})
    remote = RemoteFolder(url)
    remote.fs.pipe_file(f"{remote.root}/objects/{'0' * 64}", b"an upload whose commit never came")
    assert len(_objects(remote)) == 6

    # Young garbage stays: a reader may still be downloading an old generation, a commit may still be coming.
    assert remote.prune(keep=2, min_age_s=DAY) == Pruned()
    # A day on, all but the newest two manifests go, and every object they alone named.
    pruned = remote.prune(keep=2, min_age_s=DAY, now=time.time() + 2 * DAY)
    assert (pruned.manifests, pruned.objects) == (2, 3) and pruned.bytes == len(
        b"night 0night 1an upload whose commit never came"
    )
    assert [name.rsplit("/", 1)[-1] for name in remote._manifest_names()] == ["000000000003.json", "000000000004.json"]
    with working_copy(url) as folder:  # the folder is whole
        assert (folder / "judged.json").read_text() == "night 3" and (folder / "rubric.txt").read_text() == "r1"
        (folder / "judged.json").write_text("night 4")
    assert remote.latest().generation == 5
    with pytest.raises(ValueError, match=r"keep \(0\) must be at least 1"):
        remote.prune(keep=0)


def test_a_commit_uploads_again_what_only_an_unnamed_object_holds(s3_bucket, monkeypatch):
    url = f"s3://{s3_bucket}/home/export"
    _commit(url, {"a.txt": "kept"})
    remote = RemoteFolder(url)
    digest = hashlib.sha256(b"orphan").hexdigest()
    remote.fs.pipe_file(f"{remote.root}/objects/{digest}", b"orphan")  # a killed commit's upload, prunable any time
    uploads: list[str] = []
    real = remote.fs.put_file

    def put_file(lpath, rpath, **kwargs):
        uploads.append(rpath)
        return real(lpath, rpath, **kwargs)

    monkeypatch.setattr(remote.fs, "put_file", put_file)  # fsspec caches the instance: every folder's client
    _commit(url, {"a.txt": "kept", "b.txt": "orphan"})
    # The commit does not count on the unnamed object (a prune could take it before the manifest names it): it
    # uploads it again, which renews its age; "kept" is named by the manifest it read, and is not uploaded.
    assert [path.rsplit("/", 1)[-1] for path in uploads] == [digest]
