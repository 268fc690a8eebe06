"""Checks that a storage root holds only whole outputs, shared by the kill -9 and the overlapping-run tests."""

import json
import sqlite3
from pathlib import Path

from core.cache_store import CacheStore
from core.tables import read_table
from curation.dedup import DedupIndex, MinHashConfig
from langmodels.cache import DB_NAME
from resources import GENERATION_CACHE_FOLDER, VALIDATION_CACHE_FOLDER


def assert_whole_files(home: Path) -> None:
    """Every table under `home` reads, and no temporary file of an interrupted write is left in sight."""
    for path in home.rglob("*.parquet"):
        read_table(path)
    assert not [p for p in home.iterdir() if p.name.startswith(".")]
    assert not list(home.rglob(".*.tmp")), "a temporary file of an atomic write was left behind"


def assert_consistent_state(home: Path) -> None:
    """What runs share is intact: each dedup index opens as written (not rebuilt), with no key twice; the LLM
    cache passes SQLite's integrity check; the validation and generation caches pass their checksums."""
    for folder in (home / "dedup_index").iterdir():
        fields = json.loads((folder / "manifest.json").read_text())["config_fields"]
        index = DedupIndex.open(folder, MinHashConfig(**fields))
        assert not index.rebuilt, f"{folder}: {index.rebuild_reason}"
        assert len(index) and len(set(index.keys)) == len(index), f"{folder}: empty, or a key is indexed twice"
    with sqlite3.connect(home / "llm_cache" / DB_NAME) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    for folder in (VALIDATION_CACHE_FOLDER, GENERATION_CACHE_FOLDER):
        cache = CacheStore.open(home / folder)
        assert not cache.rebuilt, f"{folder}: {cache.rebuild_reason}"
