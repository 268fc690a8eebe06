"""Incremental validation: verdicts cached by content, so a night checks only new or changed tasks.

Each test counts verifier runs (a counting verifier registered for the test, or every `verify` call the checks
make), never time: "not checked again" means no verifier ran.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

import validators.tasks
from core.cache_store import SEGMENTS, CacheStore
from generators.programmatic import SqlLiteralSwap, generate_variants
from tests.paths import SEEDS
from validators.registry import REGISTRY, Completion, Verdict, Verifier, VerifyContext
from validators.seeds import load_seeds
from validators.tasks import check_tasks, compute_task_id, verdict_key

NAME = "counting_answer"


class CountingAnswer(Verifier):
    """Passes the exact answer; counts its runs per answer. `timeout` as a completion fails like a sandbox timeout."""

    name = NAME
    version = 1
    runs: ClassVar[Counter[str]] = Counter()
    lock: ClassVar[threading.Lock] = threading.Lock()

    def check(self, params: Mapping[str, Any], completion: Completion, context: VerifyContext) -> Verdict:
        with self.lock:
            self.runs[params["answer"]] += 1
        if completion.text == "timeout":
            return Verdict.fail("timeout", "wall limit 1s")
        return Verdict.ok() if completion.text == params["answer"] else Verdict.fail("answer_mismatch")

    def wrong_answer(self, params: Mapping[str, Any]) -> str | None:
        return params.get("wrong", "wrong")


class CountingAnswerV2(CountingAnswer):
    version = 2


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """CountingAnswer v1 in the registry for this test only; yields its run counter."""
    REGISTRY.names()  # load the built-ins first
    monkeypatch.setitem(REGISTRY._verifiers, (NAME, 1), CountingAnswer())
    CountingAnswer.runs.clear()
    yield CountingAnswer.runs


def task(answer: str, reference: str | None = None, verifier: str = NAME, **params: str) -> dict[str, Any]:
    prompt = [{"role": "user", "content": f"Say {answer}."}]
    spec = {"name": verifier, "version": 1, "params": {"answer": answer, **params}}
    task_id = compute_task_id(prompt, spec)
    return {
        "task_id": task_id,
        "family": "demo",
        "prompt": prompt,
        "verifier": spec,
        "reference": answer if reference is None else reference,
        "lineage": {"seed_id": task_id, "parent_id": None, "generator": None, "source": "seed", "failure_id": None},
        "difficulty": None,
        "tags": [],
    }


def validate(tasks: list[dict[str, Any]], folder: Path, context: VerifyContext | None = None):
    """One night's validation against the cache in `folder`: (problems, the cache as it was used)."""
    cache = CacheStore.open(folder)
    return check_tasks(tasks, context, cache=cache), cache


def test_a_second_validation_runs_no_verifier(tmp_path, counting):
    tasks = [task(str(n)) for n in range(20)] + [task("bad", reference="nope")]
    first, cache = validate(tasks, tmp_path)
    assert sum(counting.values()) == 20 * 2 + 1  # reference + wrong answer each; the bad reference stops early
    assert (cache.hits, cache.misses) == (0, 21)
    counting.clear()
    second, cache = validate(tasks, tmp_path)
    assert sum(counting.values()) == 0  # not one verifier run
    assert (cache.hits, cache.misses) == (21, 0)
    assert second == first  # the stored problems come back as they were found
    assert [p.code for p in second[-1]] == ["reference_failed"]


def test_a_changed_reference_revalidates_that_task_only(tmp_path, counting):
    tasks = [task(str(n)) for n in range(5)]
    validate(tasks, tmp_path)
    counting.clear()
    # The task_id hashes prompt + verifier only: the same id, but a different record (the reference must pass).
    tasks[2] = {**tasks[2], "reference": "not 2"}
    problems, cache = validate(tasks, tmp_path)
    assert counting == {"2": 1}
    assert (cache.hits, cache.misses) == (4, 1)
    assert [p.code for p in problems[2]] == ["reference_failed"]


@pytest.mark.parametrize(
    "change",
    [
        {"difficulty": 3},  # fields the id leaves out still change the key: the schema checks them
        {"lineage": {"seed_id": "0" * 16, "parent_id": None, "generator": None, "source": "seed", "failure_id": None}},
        {"tags": ["new"]},
    ],
)
def test_any_field_of_the_record_is_in_the_key(counting, change):
    before = task("1")
    assert verdict_key(before) is not None
    assert verdict_key({**before, **change}) != verdict_key(before)


def test_a_verifier_version_bump_revalidates_exactly_its_tasks(tmp_path, counting, monkeypatch):
    numeric = {**task("4", reference="#### 4", verifier="numeric_answer")}
    tasks = [task(str(n)) for n in range(5)] + [numeric]
    validate(tasks, tmp_path)
    counting.clear()
    # The code's version moves to 2 (the record still says 1: an old number resolves to the latest code).
    monkeypatch.delitem(REGISTRY._verifiers, (NAME, 1))
    monkeypatch.setitem(REGISTRY._verifiers, (NAME, 2), CountingAnswerV2())
    problems, cache = validate(tasks, tmp_path)
    assert counting == {str(n): 2 for n in range(5)}  # every counting_answer task, reference + wrong answer
    assert (cache.hits, cache.misses) == (1, 5)  # the numeric_answer task is still a hit
    assert problems == [[]] * 6


def test_a_weighted_task_is_keyed_on_its_components_versions(counting, monkeypatch):
    component = {"name": NAME, "params": {"answer": "7"}, "weight": 1.0}
    weighted = {**task("7"), "verifier": {"name": "weighted", "version": 1, "params": {"components": [component]}}}
    before = verdict_key(weighted)
    monkeypatch.delitem(REGISTRY._verifiers, (NAME, 1))
    monkeypatch.setitem(REGISTRY._verifiers, (NAME, 2), CountingAnswerV2())
    assert None is not verdict_key(weighted) != before  # weighted's own version did not move; its component's did


def test_environmental_outcomes_are_not_cached(tmp_path, counting):
    # A reference that timed out, and a wrong answer that timed out (the task looks valid, but only by luck).
    tasks = [task("a", reference="timeout"), task("b", wrong="timeout"), task("c")]
    first, _ = validate(tasks, tmp_path)
    assert [[p.code for p in found] for found in first] == [["reference_failed"], [], []]
    counting.clear()
    _, cache = validate(tasks, tmp_path)
    assert counting == {"a": 1, "b": 2}  # both checked again; "c" came from the cache
    assert cache.hits == 1


def test_records_that_cannot_be_keyed_are_checked_every_time(tmp_path, counting):
    unknown = task("x", verifier="no_such_verifier")  # a plugin not installed (yet): nothing to key on
    assert verdict_key(unknown) is None
    problems, cache = validate([unknown], tmp_path)
    assert [p.code for p in problems[0]] == ["unknown_verifier"]
    assert (cache.hits, len(cache)) == (0, 0)


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # truncated mid-write by something other than atomic_write
        lambda data: data.replace(b"[]]", b'[{"code":"x","pointer":"/","message":"m","fix":"f"}]]', 1),  # edited
        lambda data: b"\x00\x01garbage",  # not even a header
        lambda data: data.replace(b'"format": 1', b'"format": 99', 1),  # another format
    ],
)
def test_a_damaged_cache_segment_is_detected_and_rebuilt(tmp_path, counting, caplog, damage):
    tasks = [task(str(n)) for n in range(10)]
    validate(tasks, tmp_path)
    (path,) = (tmp_path / SEGMENTS).glob("*.jsonl")  # the first night's one commit
    path.write_bytes(damage(path.read_bytes()))
    counting.clear()
    with caplog.at_level(logging.WARNING, logger="core.cache_store"):
        problems, cache = validate(tasks, tmp_path)
    assert cache.rebuilt and cache.rebuild_reason
    assert any("is damaged" in r.getMessage() and "rebuilt" in r.getMessage() for r in caplog.records)
    assert sum(counting.values()) == 20  # nothing in the damaged segment was trusted: every task checked again
    assert problems == [[]] * 10
    assert not path.exists()  # deleted by the commit, which wrote the verdicts again as a new segment
    reopened = CacheStore.open(tmp_path)  # sound and complete
    assert not reopened.rebuilt and len(reopened) == 10


def test_overlapping_runs_keep_each_others_verdicts(tmp_path, counting):
    a, b = [task(str(n)) for n in range(3)], [task(str(n)) for n in range(3, 6)]
    first, second = CacheStore.open(tmp_path), CacheStore.open(tmp_path)  # both read the folder before either wrote
    check_tasks(a, cache=first)
    check_tasks(b, cache=second)
    counting.clear()
    _, cache = validate(a + b, tmp_path)
    assert cache.hits == 6 and sum(counting.values()) == 0


@pytest.fixture
def sql_seeds(tmp_path: Path) -> tuple[list[dict[str, Any]], VerifyContext]:
    """The bundled SQL seeds over a copy of their database, and a context that resolves to the copy."""
    seeds_dir = tmp_path / "seeds"
    (seeds_dir / "sql").mkdir(parents=True)
    for name in ("shop.sqlite", "shop_questions.yaml"):
        shutil.copy(SEEDS / "sql" / name, seeds_dir / "sql" / name)
    context = VerifyContext(seeds_dir=seeds_dir)
    seeds = load_seeds([seeds_dir], context=context)
    assert not seeds.problems
    return seeds.tasks, context


@pytest.fixture
def verify_calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every `verify` call the task checks make, counted per task_id (real verifiers, sandbox included)."""
    calls: Counter[str] = Counter()
    real = validators.tasks.verify

    def counted(record, completion, *, context=None):
        calls[record["task_id"]] += 1
        return real(record, completion, context=context)

    monkeypatch.setattr(validators.tasks, "verify", counted)
    return calls


def test_a_changed_fixture_file_revalidates_its_tasks(tmp_path, sql_seeds, verify_calls):
    seeds, context = sql_seeds
    sql_tasks = generate_variants(seeds[:6], per_seed=2, random_seed=0, generators={"sql": SqlLiteralSwap(context)})
    numeric = task("4", reference="#### 4", verifier="numeric_answer")
    tasks = [*sql_tasks.tasks, numeric]
    assert len(tasks) > 3
    validate(tasks, tmp_path / "cache", context)
    verify_calls.clear()
    _, cache = validate(tasks, tmp_path / "cache", context)
    assert not verify_calls and cache.hits == len(tasks)
    with sqlite3.connect(context.seeds_dir / "sql" / "shop.sqlite") as db:  # same path, new content
        db.execute("CREATE TABLE audit_note (note TEXT)")
    problems, cache = validate(tasks, tmp_path / "cache", context)
    assert set(verify_calls) == {t["task_id"] for t in sql_tasks.tasks}  # every SQL task, not the numeric one
    assert cache.hits == 1
    assert problems == [[]] * len(tasks)


def test_real_seeds_second_night_runs_no_sandbox(tmp_path, verify_calls, monkeypatch):
    import validators.verifiers.python_tests as python_tests

    sandbox_runs = []
    real_run = python_tests.run_python
    monkeypatch.setattr(python_tests, "run_python", lambda *a, **k: sandbox_runs.append(1) or real_run(*a, **k))
    context = VerifyContext(seeds_dir=SEEDS)
    seeds = load_seeds([SEEDS / "python_function", SEEDS / "sql"], context=context).tasks
    tasks = [t for t in seeds if t["family"] == "python_function"][:4] + [t for t in seeds if t["family"] == "sql"][:4]
    first, _ = validate(tasks, tmp_path, context)
    assert sandbox_runs and verify_calls
    sandbox_runs.clear()
    verify_calls.clear()
    second, cache = validate(tasks, tmp_path, context)
    assert (len(sandbox_runs), sum(verify_calls.values()), cache.hits) == (0, 0, len(tasks))
    assert second == first == [[]] * len(tasks)
