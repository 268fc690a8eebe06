"""The cache store: append-only segments merged on open, a damaged segment dropped alone, compaction that never
loses an entry (nor a segment another run added meanwhile), the old single file migrated, working copies that
merge without a conflict; fixtures fingerprinted by content. Real files and real processes throughout."""

import fcntl
import hashlib
import json
import logging
import multiprocessing
import os
import shutil
from pathlib import Path

import pytest

import core.cache_store as cache_store
from core.cache_store import COMPACTED, ENTRIES, LOCK, SEGMENTS, CacheStore, file_digest
from core.folders import working_copy


def files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (path relative to it -> bytes), the lock aside."""
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != LOCK
    }


def commit_batches(folder: Path, batches: list[dict[str, object]]) -> list[str]:
    """One run per batch, each committing it as one segment; the segments' names, in commit order."""
    names: list[str] = []
    for batch in batches:
        before = set(files(folder)) if folder.exists() else set()
        store = CacheStore.open(folder)
        for key, value in batch.items():
            store.put(key, value)
        store.commit()
        names += sorted(set(files(folder)) - before)
    return names


def batches(count: int, size: int = 5, prefix: str = "k") -> list[dict[str, object]]:
    return [{f"{prefix}{b}-{i}": {"batch": b, "i": i} for i in range(size)} for b in range(count)]


def assert_holds(folder: Path, expected: dict[str, object]) -> None:
    """A fresh open of `folder` finds nothing damaged, and exactly the `expected` entries."""
    store = CacheStore.open(folder)
    assert not store.rebuilt, store.rebuild_reason
    assert {key: store.get(key) for key in expected} == expected
    assert len(store) == len(expected)


def test_entries_survive_a_reopen_and_count_hits_and_misses(tmp_path):
    store = CacheStore.open(tmp_path)
    store.put("a", [])
    store.put("b", {"tasks": [1, 2]})
    assert store.commit() == 2
    reopened = CacheStore.open(tmp_path)
    assert (reopened.get("a"), reopened.get("b"), reopened.get("c")) == ([], {"tasks": [1, 2]}, None)
    assert (reopened.hits, reopened.misses, len(reopened)) == (2, 1, 2)


def test_a_commit_adds_one_segment_of_its_new_entries_and_changes_no_file(tmp_path):
    commit_batches(tmp_path, batches(3, size=100))
    before = files(tmp_path)
    store = CacheStore.open(tmp_path)
    assert store.get("k1-7") == {"batch": 1, "i": 7}
    store.put("new-1", 1)
    store.put("new-2", 2)
    assert store.commit() == 2
    after = files(tmp_path)
    (added,) = set(after) - set(before)  # exactly one new file; every earlier one byte for byte as it was
    assert {name: after[name] for name in before} == before
    assert added.startswith(f"{SEGMENTS}/") and added.endswith(".jsonl")
    header, *lines = after[added].decode().splitlines()
    assert json.loads(header)["entries"] == 2 and [json.loads(line) for line in lines] == [["new-1", 1], ["new-2", 2]]
    assert store.commit() == 0 and files(tmp_path) == after  # nothing staged: nothing written


def test_a_failed_write_changes_nothing(tmp_path):
    commit_batches(tmp_path, batches(1))
    before = files(tmp_path)
    store = CacheStore.open(tmp_path)
    store.put("b", object())  # not JSON: the encoding fails before any file is opened
    with pytest.raises(TypeError):
        store.commit()
    assert files(tmp_path) == before
    assert not list(tmp_path.rglob(".*.tmp"))


def test_a_killed_writers_temporary_file_is_removed_once_it_is_stale(tmp_path):
    commit_batches(tmp_path, batches(1))
    killed = tmp_path / SEGMENTS / ".20260101T000000000000Z-0000000000000000.jsonl.abc123.tmp"  # kill -9 mid-write
    legacy = tmp_path / f".{ENTRIES}.def456.tmp"  # a killed writer of the format before segments
    live = tmp_path / SEGMENTS / ".20260101T000000000001Z-1111111111111111.jsonl.ghi789.tmp"  # a writer still at it
    for path in (killed, legacy, live):
        path.write_bytes(b"half a fil")
    old = os.stat(killed).st_mtime - cache_store.STALE_TEMPORARY_S - 60
    for path in (killed, legacy):
        os.utime(path, (old, old))
    store = CacheStore.open(tmp_path)
    store.put("a", 1)
    store.commit()
    assert (killed.exists(), legacy.exists(), live.exists()) == (False, False, True)


def test_overlapping_commits_merge(tmp_path):
    first, second = CacheStore.open(tmp_path), CacheStore.open(tmp_path)
    first.put("a", 1)
    second.put("b", 2)
    first.commit()
    second.commit()  # adds its own segment beside the first's
    reopened = CacheStore.open(tmp_path)
    assert (reopened.get("a"), reopened.get("b"), reopened.rebuilt) == (1, 2, False)


def _writer(folder: str, worker: int, rounds: int, per_round: int, barrier) -> int:
    """A run in its own process: `rounds` opens of the cache, each putting `per_round` entries of its own (committed
    every 7, so many segments) and committing; compactions (after 3 segments) race the other writers' appends."""
    cache_store.COMMIT_EVERY = 7
    cache_store.COMPACT_AFTER = 3
    barrier.wait(timeout=60)
    for round_ in range(rounds):
        store = CacheStore.open(Path(folder))
        for i in range(per_round):
            store.put(f"w{worker}-r{round_}-{i}", [worker, round_, i])
        store.commit()
    return worker


def test_writers_in_separate_processes_lose_no_entry(tmp_path):
    workers, rounds, per_round = 3, 6, 20
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(workers) as pool:
        barrier = manager.Barrier(workers)
        args = [(str(tmp_path), w, rounds, per_round, barrier) for w in range(workers)]
        assert sorted(pool.starmap(_writer, args)) == list(range(workers))
    expected = {f"w{w}-r{r}-{i}": [w, r, i] for w in range(workers) for r in range(rounds) for i in range(per_round)}
    assert_holds(tmp_path, expected)
    assert any(name.startswith(f"{SEGMENTS}/{COMPACTED}") for name in files(tmp_path))  # compactions did run


DAMAGES = {
    "truncated": lambda data: data[: len(data) // 2],  # cut mid-write by something other than atomic_write
    "edited": lambda data: data.replace(b'"i":3', b'"i":4', 1),  # a value changed, the checksum not
    "garbage": lambda data: b"\x00\x01garbage",  # not even a header
    "list header": lambda data: b"[1, 2]\n" + data.split(b"\n", 1)[1],  # JSON, but not a header
    "empty": lambda data: b"",
    "other format": lambda data: data.replace(b'"format": 1', b'"format": 99', 1),
    "extra line": lambda data: data + b'["k9-9", 1]\n',  # an entry the header does not count
}


@pytest.mark.parametrize("damage", DAMAGES.values(), ids=DAMAGES.keys())
def test_a_damaged_segment_is_dropped_alone_and_deleted_by_the_next_commit(tmp_path, caplog, damage):
    parts = batches(3)
    names = commit_batches(tmp_path, parts)
    path = tmp_path / names[1]
    path.write_bytes(damage(path.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="core.cache_store"):
        store = CacheStore.open(tmp_path)
    assert store.rebuilt and store.rebuild_reason and names[1] in store.rebuild_reason
    assert any("is damaged" in r.getMessage() and names[1] in r.getMessage() for r in caplog.records)
    assert {key: store.get(key) for key in parts[0] | parts[2]} == parts[0] | parts[2]  # the others are trusted
    assert [store.get(key) for key in parts[1]] == [None] * len(parts[1])  # the damaged one's are computed again
    for key, value in parts[1].items():
        store.put(key, value)
    store.commit()
    (new,) = set(files(tmp_path)) - {names[0], names[2]}  # the damaged segment alone was deleted
    assert new not in names
    assert_holds(tmp_path, parts[0] | parts[1] | parts[2])


def test_a_damaged_segment_rewritten_since_it_was_read_is_not_deleted(tmp_path):
    names = commit_batches(tmp_path, batches(2))
    path = tmp_path / names[0]
    sound = path.read_bytes()
    path.write_bytes(sound[:-5])
    store = CacheStore.open(tmp_path)
    assert store.rebuilt
    path.write_bytes(sound)  # another run wrote the sound bytes under that name since (a compaction's output can)
    store.put("x", 1)
    store.commit()
    assert path.read_bytes() == sound


def test_compaction_keeps_every_entry_and_spares_a_segment_added_meanwhile(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_store, "COMPACT_AFTER", 3)
    parts = batches(4)
    old = commit_batches(tmp_path, parts[:3])
    late = CacheStore.open(tmp_path)  # reads 3 segments: not past the threshold, it only appends
    old += commit_batches(tmp_path, parts[3:])
    compacting = CacheStore.open(tmp_path)  # reads the 4 segments: past the threshold
    late.put("late", "added after the compacting run opened")
    late.commit()
    (meanwhile,) = set(files(tmp_path)) - set(old)
    added_bytes = (tmp_path / meanwhile).read_bytes()
    compacting.put("own", 1)
    compacting.commit()
    after = files(tmp_path)
    merged = [name for name in after if name.startswith(f"{SEGMENTS}/{COMPACTED}")]
    assert len(merged) == 1 and not set(old) & set(after)  # the 4 merged into one, and deleted
    assert after[meanwhile] == added_bytes  # never read by the compacting run: never deleted
    header = json.loads(after[merged[0]].split(b"\n", 1)[0])
    assert merged[0] == f"{SEGMENTS}/{COMPACTED}{header['sha256']}.jsonl" and header["entries"] == 20
    assert len(after) == 3  # the merged segment, the one added meanwhile, the compacting run's own commit
    expected = {k: v for part in parts for k, v in part.items()} | {"late": "added after the compacting run opened"}
    assert_holds(tmp_path, expected | {"own": 1})


def test_a_compaction_another_run_holds_or_has_done_is_not_repeated(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_store, "COMPACT_AFTER", 3)
    commit_batches(tmp_path, batches(4))
    first, second = CacheStore.open(tmp_path), CacheStore.open(tmp_path)
    with open(tmp_path / LOCK, "a") as held:  # another run is compacting: a commit neither waits nor compacts
        fcntl.flock(held, fcntl.LOCK_EX)
        first.put("a", 1)
        first.commit()
    assert not any(COMPACTED in name for name in files(tmp_path))
    third = CacheStore.open(tmp_path)  # reads the 4 and first's segment
    second.commit()  # nothing staged: still tidies up, merging the 4
    assert len([name for name in files(tmp_path) if COMPACTED in name]) == 1
    third.put("c", 3)
    third.commit()  # part of what it read was merged by `second` since: merging it again would repeat that file
    first.put("b", 2)
    first.commit()  # the lock is free now, but the same holds
    assert len([name for name in files(tmp_path) if COMPACTED in name]) == 1
    assert_holds(tmp_path, {k: v for part in batches(4) for k, v in part.items()} | {"a": 1, "b": 2, "c": 3})


def test_an_open_that_races_a_compaction_still_reads_every_entry(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_store, "COMPACT_AFTER", 3)
    parts = batches(4)
    commit_batches(tmp_path, parts)
    compacting = CacheStore.open(tmp_path)
    real = cache_store._listing
    calls = []

    def listing_then_compaction(folder: Path):
        found = real(folder)
        if not calls:  # the other run compacts between this open's listing and its reads
            compacting.commit()
        calls.append(found)
        return found

    monkeypatch.setattr(cache_store, "_listing", listing_then_compaction)
    store = CacheStore.open(tmp_path)
    assert len(calls) == 2  # the segments it listed were gone: it listed again and read the merged one
    assert not store.rebuilt and {k: store.get(k) for part in parts for k in part} == {
        k: v for part in parts for k, v in part.items()
    }


def test_an_old_single_file_cache_is_read_and_migrated_by_the_next_commit(tmp_path):
    entries = {"k1": {"problems": []}, "k0": [{"code": "x"}]}
    body = b"".join(json.dumps([k, entries[k]], separators=(",", ":")).encode() + b"\n" for k in sorted(entries))
    header = {"format": 1, "entries": 2, "sha256": hashlib.sha256(body).hexdigest()}
    (tmp_path / ENTRIES).write_bytes(json.dumps(header).encode() + b"\n" + body)  # as the format before segments
    (tmp_path / LOCK).touch()
    store = CacheStore.open(tmp_path)
    assert (store.get("k0"), store.get("k1"), store.rebuilt) == ([{"code": "x"}], {"problems": []}, False)
    store.put("k2", 2)
    store.commit()
    assert not (tmp_path / ENTRIES).exists()
    assert all(name.startswith(f"{SEGMENTS}/") for name in files(tmp_path))
    assert_holds(tmp_path, {**entries, "k2": 2})


def changes(base: dict[str, bytes], copy: dict[str, bytes]) -> dict[str, str | None]:
    """What a working copy changed since `base`, as `core.folders.RemoteFolder.commit` applies it: path -> the
    SHA-256 of its new bytes, or None when deleted."""
    digest = {path: hashlib.sha256(data).hexdigest() for path, data in copy.items()}
    found: dict[str, str | None] = {p: d for p, d in digest.items() if base.get(p) != copy[p]}
    found.update({path: None for path in base if path not in copy})
    return found


@pytest.mark.parametrize("segments_at_checkout", [2, 5], ids=["appending", "compacting"])
def test_two_working_copies_of_one_folder_change_no_file_in_common(tmp_path, monkeypatch, segments_at_checkout):
    parts = batches(segments_at_checkout)
    commit_batches(tmp_path / "base", parts)
    base = files(tmp_path / "base")
    assert len(base) == segments_at_checkout
    monkeypatch.setattr(cache_store, "COMPACT_AFTER", 3)  # the first run on each copy compacts the 5
    made = {}
    for side in ("a", "b"):  # two shard steps, each on its own checkout of the same generation
        copy = Path(shutil.copytree(tmp_path / "base", tmp_path / side))
        commit_batches(copy, batches(2, prefix=side))
        made[side] = changes(base, files(copy))
    a, b = made["a"], made["b"]
    # core.folders refuses a merge where both changed one file to different contents: here there is none.
    assert not [path for path in a.keys() & b.keys() if a[path] != b[path]]
    own = [{p for p, d in change.items() if d is not None and COMPACTED not in p} for change in (a, b)]
    assert own[0] and own[1] and not own[0] & own[1]  # their own commits: files of different names
    compacting = segments_at_checkout > 3
    assert all((change.get(path, "kept") is None) == compacting for change in (a, b) for path in base)
    merged_files = {**base}
    for change in (a, b):
        for path, digest in change.items():
            side = "a" if change is a else "b"
            if digest is None:
                merged_files.pop(path, None)
            else:
                merged_files[path] = (tmp_path / side / path).read_bytes()
    merged = tmp_path / "merged"
    for path, data in merged_files.items():
        (merged / path).parent.mkdir(parents=True, exist_ok=True)
        (merged / path).write_bytes(data)
    expected = {k: v for part in [*parts, *batches(2, prefix="a"), *batches(2, prefix="b")] for k, v in part.items()}
    assert_holds(merged, expected)
    compacted = [path for path in merged_files if COMPACTED in path]
    assert len(compacted) == compacting  # both compacted the same segments into the same file


def _step(url: str, worker: int, barrier) -> str:
    """A shard step on an object store: a working copy of the cache, new entries committed, the copy committed back
    after the other step has checked out the same generation."""
    from core.folders import FolderConflict

    cache_store.COMPACT_AFTER = 3
    try:
        with working_copy(url) as folder:
            store = CacheStore.open(folder)
            for i in range(10):
                store.put(f"step{worker}-{i}", i)
            store.commit()
            barrier.wait(timeout=60)  # both checked out and committed locally before either commits back
        return "ok"
    except FolderConflict as error:
        return f"conflict: {error}"


def test_two_steps_commit_one_cache_to_an_object_store_at_once_without_a_conflict(s3_bucket):
    url = f"s3://{s3_bucket}/home/validation_cache"
    parts = batches(5)
    for part in parts:  # five earlier nights: past the threshold, so both steps compact the same segments
        with working_copy(url) as folder:
            commit_batches(folder, [part])
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(2) as pool:
        barrier = manager.Barrier(2)
        assert pool.starmap(_step, [(url, w, barrier) for w in range(2)]) == ["ok", "ok"]
    expected = {k: v for part in parts for k, v in part.items()}
    with working_copy(url) as folder:
        assert_holds(folder, expected | {f"step{w}-{i}": i for w in range(2) for i in range(10)})
        names = sorted(files(folder))
    assert len([name for name in names if COMPACTED in name]) == 1 and len(names) == 3


def test_file_digest_follows_content_not_time(tmp_path):
    path = tmp_path / "shop.sqlite"
    path.write_bytes(b"one")
    first = file_digest(path)
    os.utime(path, ns=(1, 1))  # touched: the same bytes
    assert file_digest(path) == first
    path.write_bytes(b"two")
    assert file_digest(path) != first
    assert file_digest(tmp_path / "missing.sqlite") is None
