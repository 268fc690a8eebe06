"""Programmatic generation reuses what an unchanged parent produced (counted in generator runs, not time)."""

from __future__ import annotations

import shutil
import sqlite3
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from core.cache_store import CacheStore
from generators.base import GenerationResult, Generator
from generators.programmatic import (
    generate_variants,
    programmatic_generators,
)
from tests.paths import SEEDS
from validators.registry import VerifyContext
from validators.seeds import load_seeds
from validators.tasks import canonical_json


@pytest.fixture
def seeds_dir(tmp_path: Path) -> Path:
    """A copy of the bundled seeds, so a test may change the SQL fixture."""
    return Path(shutil.copytree(SEEDS, tmp_path / "seeds"))


@pytest.fixture
def generators(seeds_dir: Path) -> dict[str, Generator]:
    return programmatic_generators(VerifyContext(seeds_dir=seeds_dir))


@pytest.fixture(scope="module")
def parents() -> list[dict[str, Any]]:
    """Two seeds of every family (python_function runs the sandbox, sql and the shop's episodes read a database)."""
    tasks = load_seeds([SEEDS], context=VerifyContext(seeds_dir=SEEDS)).tasks
    by_family: dict[str, list[dict[str, Any]]] = {}
    for t in tasks:
        if t["verifier"]["params"].get("environment") != "files":  # the shop's episodes: they read the fixture
            by_family.setdefault(t["family"], []).append(t)
    return [t for family in sorted(by_family) for t in by_family[family][:2]]


@pytest.fixture
def runs(generators: dict[str, Generator], monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Generator runs per parent task_id."""
    calls: Counter[str] = Counter()
    for generator in generators.values():
        real = type(generator).generate

        def counted(self, parent, *, n, random_seed, _real=real):
            calls[parent["task_id"]] += 1
            return _real(self, parent, n=n, random_seed=random_seed)

        monkeypatch.setattr(type(generator), "generate", counted)
    return calls


def night(parents, generators, folder: Path) -> tuple[GenerationResult, CacheStore]:
    cache = CacheStore.open(folder)
    return generate_variants(parents, per_seed=3, random_seed=0, generators=generators, cache=cache), cache


@pytest.mark.slow
def test_a_second_generation_returns_the_same_output_and_recomputes_nothing(tmp_path, parents, generators, runs):
    first, cache = night(parents, generators, tmp_path)
    assert sum(runs.values()) == len(parents) and cache.hits == 0
    assert {t["family"] for t in first.tasks} == set(generators)  # the sandbox and the SQLite fixture included
    runs.clear()
    second, cache = night(parents, generators, tmp_path)
    assert sum(runs.values()) == 0  # no generator ran: no sandbox, no query
    assert cache.hits == len(parents)
    assert canonical_json([second.tasks, second.rejects]) == canonical_json([first.tasks, first.rejects])


def test_an_edited_seed_recomputes_only_its_variants(tmp_path, parents, generators, runs):
    first, _ = night(parents, generators, tmp_path)
    runs.clear()
    edited = dict(parents[0], difficulty=5)  # same task_id: the id does not hash difficulty
    second, cache = night([edited, *parents[1:]], generators, tmp_path)
    assert runs == {edited["task_id"]: 1}
    assert cache.hits == len(parents) - 1
    others = [t for t in second.tasks if t["lineage"]["parent_id"] != edited["task_id"]]
    assert canonical_json(others) == canonical_json(
        [t for t in first.tasks if t["lineage"]["parent_id"] != edited["task_id"]]
    )
    assert {t["difficulty"] for t in second.tasks if t["lineage"]["parent_id"] == edited["task_id"]} == {5}


def test_a_changed_fixture_regenerates_the_parents_that_read_it(tmp_path, seeds_dir, parents, generators, runs):
    night(parents, generators, tmp_path / "cache")
    runs.clear()
    with sqlite3.connect(seeds_dir / "sql" / "shop.sqlite") as db:
        db.execute("CREATE TABLE audit_note (note TEXT)")
    night(parents, generators, tmp_path / "cache")
    assert set(runs) == {p["task_id"] for p in parents if p["family"] in ("sql", "episode")}  # the shop's episodes


class Flaky(Generator):
    """Rejects with a transient code (as a sandbox timeout would) every other parent."""

    name = "flaky"
    families: ClassVar[frozenset[str]] = frozenset({"demo"})
    transient_reject_codes: ClassVar[frozenset[str]] = frozenset({"oracle_failed"})

    def generate(self, parent: Mapping[str, Any], *, n: int, random_seed: int) -> GenerationResult:
        return GenerationResult(rejects=[self.reject(parent, "oracle_failed", "timeout", {})])


def test_an_output_with_a_transient_reject_is_not_reused(tmp_path, parents):
    demo = [{**p, "family": "demo"} for p in parents[:2]]
    night(demo, {"demo": Flaky()}, tmp_path)
    _, cache = night(demo, {"demo": Flaky()}, tmp_path)
    assert cache.hits == 0 and len(cache) == 0
