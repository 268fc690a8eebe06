"""The cache store: whole files only, merged across overlapping runs, fixtures fingerprinted by content."""

import os

import pytest

from validators.cache_store import ENTRIES, CacheStore, file_digest


def test_entries_survive_a_reopen_and_count_hits_and_misses(tmp_path):
    store = CacheStore.open(tmp_path)
    store.put("a", [])
    store.put("b", {"tasks": [1, 2]})
    assert store.commit() == 2
    reopened = CacheStore.open(tmp_path)
    assert (reopened.get("a"), reopened.get("b"), reopened.get("c")) == ([], {"tasks": [1, 2]}, None)
    assert (reopened.hits, reopened.misses, len(reopened)) == (2, 1, 2)


def test_a_failed_write_leaves_the_previous_file_whole(tmp_path):
    store = CacheStore.open(tmp_path)
    store.put("a", 1)
    store.commit()
    before = (tmp_path / ENTRIES).read_bytes()
    store.put("b", object())  # not JSON: the write fails midway
    with pytest.raises(TypeError):
        store.commit()
    assert (tmp_path / ENTRIES).read_bytes() == before
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_killed_writers_temporary_file_is_removed_by_the_next_commit(tmp_path):
    (tmp_path / f".{ENTRIES}.abc123.tmp").write_bytes(b"half a fil")  # what kill -9 mid-write leaves
    store = CacheStore.open(tmp_path)
    store.put("a", 1)
    store.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", ENTRIES]


def test_overlapping_commits_merge(tmp_path):
    first, second = CacheStore.open(tmp_path), CacheStore.open(tmp_path)
    first.put("a", 1)
    second.put("b", 2)
    first.commit()
    second.commit()  # reads what the first wrote since it opened, and writes the union
    reopened = CacheStore.open(tmp_path)
    assert (reopened.get("a"), reopened.get("b"), reopened.rebuilt) == (1, 2, False)


def test_file_digest_follows_content_not_time(tmp_path):
    path = tmp_path / "shop.sqlite"
    path.write_bytes(b"one")
    first = file_digest(path)
    os.utime(path, ns=(1, 1))  # touched: the same bytes
    assert file_digest(path) == first
    path.write_bytes(b"two")
    assert file_digest(path) != first
    assert file_digest(tmp_path / "missing.sqlite") is None
