"""The promotion gate on synthetic score tables, the coverage of its intervals, and the promotion record (in a file
and in PostgreSQL: `state_store`)."""

import json
import threading
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from core.state import StateStore
from tests.services import fresh_database, released_together
from training.promotion import (
    PromotionDecision,
    PromotionPolicy,
    PromotionPolicyError,
    PromotionRegistry,
    PromotionRegistryError,
    compared_models,
    decide,
    promotion_record,
)
from training.stats import Comparison, Estimate, PairedDifference, compare


def table(rates: dict[str, tuple[int, float]], seed: int, samples: int = 8) -> dict[str, list[bool]]:
    """Verdicts for `tasks` tasks per family, each task solved with the family's rate (sampled)."""
    rng = np.random.default_rng(seed)
    out = {}
    for family, (tasks, rate) in rates.items():
        for i in range(tasks):
            out[f"{family}-{i}"] = (rng.random(samples) < rate).tolist()
    return out


def families_of(verdicts: dict[str, list[bool]]) -> dict[str, str]:
    return {task_id: task_id.rsplit("-", 1)[0] for task_id in verdicts}


BASE = {"arithmetic": (60, 0.4), "sql": (40, 0.5), "tool_call": (30, 0.6)}


@pytest.mark.parametrize(
    ("candidate_rates", "policy", "promote", "expected_reason"),
    [
        # The same model again: no improvement to show, so it is refused.
        (BASE, PromotionPolicy(), False, "not shown to be better"),
        # Better overall (arithmetic +0.5) but sql falls by 0.3: one broken family blocks promotion.
        (
            {"arithmetic": (60, 0.9), "sql": (40, 0.2), "tool_call": (30, 0.6)},
            PromotionPolicy(),
            False,
            ("> 0.00: better", "family sql regressed"),
        ),
        # Clearly better everywhere: promoted.
        ({"arithmetic": (60, 0.7), "sql": (40, 0.8), "tool_call": (30, 0.9)}, PromotionPolicy(), True, ": better"),
        # Clearly better, but the policy asks for more paired tasks than the eval set has.
        (
            {"arithmetic": (60, 0.7), "sql": (40, 0.8), "tool_call": (30, 0.9)},
            PromotionPolicy(min_tasks=500),
            False,
            "too few to judge",
        ),
        # Better by ~0.1, but the policy wants the interval's lower bound above 0.3.
        (
            {"arithmetic": (60, 0.5), "sql": (40, 0.6), "tool_call": (30, 0.7)},
            PromotionPolicy(min_improvement=0.3),
            False,
            "does not exceed 0.30",
        ),
        # A small family's drop does not block when it is below min_family_tasks (too noisy to judge).
        (
            {"arithmetic": (60, 0.8), "sql": (40, 0.8), "tool_call": (30, 0.6), "tiny": (3, 0.0)},
            PromotionPolicy(min_family_tasks=5),
            True,
            "family tiny -1.00",
        ),
    ],
)
def test_decide_on_synthetic_tables(candidate_rates, policy, promote, expected_reason) -> None:
    base_rates = dict(BASE)
    if "tiny" in candidate_rates:
        base_rates["tiny"] = (3, 1.0)
    baseline = table(base_rates, seed=1)
    # The same seed as the baseline where the rates match, so "the same model" gives identical verdicts.
    candidate = table(candidate_rates, seed=1)
    comparison = compare(candidate, baseline, families_of(baseline), resamples=2000, seed=0)

    decision = decide(comparison, policy)

    assert decision.promote is promote, decision.reasons
    for expected in (expected_reason,) if isinstance(expected_reason, str) else expected_reason:
        assert any(expected in reason for reason in decision.reasons), decision.reasons
    assert decision.numbers["tasks"] == comparison.tasks
    assert "sql/difference_low" in decision.numbers


def fixed_comparison(sql_difference: Estimate, sql_tasks: int = 30) -> Comparison:
    """A comparison with given numbers, to check the wording of reasons exactly."""
    return Comparison(
        overall=PairedDifference(tasks=120, candidate=0.62, baseline=0.5, difference=Estimate(0.12, 0.05, 0.19)),
        families={"sql": PairedDifference(sql_tasks, 0.3, 0.5, sql_difference)},
        per_task={},
        confidence=0.95,
        resamples=10_000,
        seed=0,
    )


@pytest.mark.parametrize(
    ("epochs", "promote"),
    [
        # Both trained under the same split: compared as usual (this comparison promotes).
        ({"baseline": 0, "candidate": 0}, True),
        # The base model has no manifest, so no epoch: always comparable.
        ({"baseline": None, "candidate": 1}, True),
        # A re-split lies between them: refused, however good the numbers.
        ({"baseline": 0, "candidate": 1}, False),
    ],
)
def test_the_gate_refuses_to_compare_across_a_resplit(epochs, promote) -> None:
    decision = decide(fixed_comparison(Estimate(0.1, 0.02, 0.2)), PromotionPolicy(), split_epochs=epochs)
    assert decision.promote is promote
    assert any("re-split lies between them" in reason for reason in decision.reasons) is not promote


def test_a_candidate_that_is_the_baseline_itself_is_never_promoted_and_the_reasons_say_why() -> None:
    better = fixed_comparison(Estimate(0.1, 0.02, 0.2))  # numbers that would promote another model
    assert decide(better, models={"baseline": "grpo/a", "candidate": "grpo/b"}).promote
    same = decide(better, models={"baseline": "grpo/a", "candidate": "grpo/a"})
    assert not same.promote
    assert same.reasons[0].startswith("the candidate is the baseline itself (grpo/a): this run trained nothing new")


@pytest.mark.parametrize(
    ("sql_difference", "policy", "promote", "family_reason"),
    [
        # The brief's example: mean -0.20 is beyond the 0.05 tolerance, so the default (mean) rule blocks.
        (
            Estimate(-0.2, -0.35, -0.05),
            PromotionPolicy(),
            False,
            "family sql regressed -0.20 [-0.35, -0.05] beyond tolerance 0.05",
        ),
        # Same numbers under the "ci" rule: the upper bound -0.05 is not below -0.05, so no proven regression.
        (
            Estimate(-0.2, -0.35, -0.05),
            PromotionPolicy(family_rule="ci"),
            True,
            "family sql -0.20 [-0.35, -0.05] within tolerance 0.05",
        ),
        # Under the "ci" rule a family whose whole interval is below the tolerance still blocks.
        (
            Estimate(-0.2, -0.3, -0.1),
            PromotionPolicy(family_rule="ci"),
            False,
            "family sql regressed -0.20 [-0.30, -0.10] beyond tolerance 0.05",
        ),
        # A drop smaller than the tolerance is allowed.
        (Estimate(-0.03, -0.1, 0.04), PromotionPolicy(), True, "family sql -0.03 [-0.10, 0.04] within tolerance 0.05"),
    ],
)
def test_reasons_read_as_sentences(sql_difference, policy, promote, family_reason) -> None:
    decision = decide(fixed_comparison(sql_difference), policy)

    assert decision.promote is promote
    assert decision.reasons == [
        "120 paired tasks >= min_tasks 20: enough",
        "overall +0.12 [0.05, 0.19] > 0.00: better",
        family_reason,
    ]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        # A negative improvement bar would promote worse models.
        ({"min_improvement": -0.1}, "min_improvement"),
        # A tolerance of a whole pass@1 point range allows anything.
        ({"max_family_regression": 1.5}, "max_family_regression"),
        # Only two rules exist.
        ({"family_rule": "median"}, "family_rule"),
        # Zero tasks can never be enough evidence.
        ({"min_tasks": 0}, "min_tasks"),
        ({"min_family_tasks": 0}, "min_family_tasks"),
    ],
)
def test_policy_checks_itself(kwargs, match) -> None:
    with pytest.raises(PromotionPolicyError, match=match):
        PromotionPolicy(**kwargs)


def test_paired_interval_covers_the_true_difference_about_95_percent_of_the_time() -> None:
    # A population of tasks with known per-task solve rates; each run draws an eval set of 150 tasks from it and
    # samples 4 completions per task from each model. The candidate is better by 0.1 where it has room.
    rng = np.random.default_rng(123)
    base_p = rng.beta(2, 2, size=20_000)
    cand_p = np.minimum(base_p + 0.1, 1.0)
    true_difference = float((cand_p - base_p).mean())
    runs, covered = 200, 0
    for run in range(runs):
        tasks = rng.integers(0, len(base_p), size=150)
        baseline = {f"t{i}": (rng.random(4) < base_p[j]).tolist() for i, j in enumerate(tasks)}
        candidate = {f"t{i}": (rng.random(4) < cand_p[j]).tolist() for i, j in enumerate(tasks)}
        comparison = compare(candidate, baseline, dict.fromkeys(baseline, "x"), resamples=1000, seed=run)
        difference = comparison.overall.difference
        covered += difference.low <= true_difference <= difference.high

    # Binomial spread of 200 runs at 95% is about +-3 points; percentile intervals run slightly narrow.
    assert 0.89 <= covered / runs <= 0.99


def test_registry_starts_empty_and_records_promotions(tmp_path: Path, state_store) -> None:
    registry = PromotionRegistry(tmp_path / "state" / "promoted.json", state_store)

    # Nothing promoted yet: the base model is the baseline.
    assert registry.current() is None
    assert registry.history() == []
    assert registry.baseline("base/model") == "base/model"

    first = registry.promote(
        tmp_path / "ckpt-1", run_id="run-1", numbers={"difference": 0.1}, when=datetime(2026, 1, 2, tzinfo=UTC)
    )
    second = registry.promote("ckpt-2", run_id="run-2", numbers={"difference": 0.05, "tasks": 40})

    assert first.model == str(tmp_path / "ckpt-1") and first.baseline is None
    assert first.promoted_at == "2026-01-02T00:00:00+00:00"
    assert second.baseline == first.model
    assert registry.current() == second
    assert registry.history() == [first, second]
    assert registry.baseline("base/model") == "ckpt-2"
    # A fresh object reads the same record (the next run).
    assert PromotionRegistry(registry.path, state_store).current() == second


def test_the_registry_file_is_one_json_record_with_its_lock_beside_it(tmp_path: Path) -> None:
    registry = PromotionRegistry(tmp_path / "promoted.json")
    entry = registry.promote("ckpt-1", run_id="run-1")
    # No temporary files are left beside it.
    assert sorted(p.name for p in tmp_path.iterdir()) == [".promoted.json.lock", "promoted.json"]
    data = json.loads(registry.path.read_text())
    assert data["format"] == 1 and data["current"]["model"] == entry.model and len(data["history"]) == 1


def test_the_candidate_is_weighed_against_the_promoted_model_else_its_base_model(tmp_path: Path) -> None:
    registry = PromotionRegistry(tmp_path / "promoted.json")
    checkpoint = pd.DataFrame([{"checkpoint": "grpo/run-2", "base_model": "base/model"}])
    assert compared_models(checkpoint, registry) == {"baseline": "base/model", "candidate": "grpo/run-2"}
    registry.promote("grpo/run-1")
    assert compared_models(checkpoint, registry) == {"baseline": "grpo/run-1", "candidate": "grpo/run-2"}


@pytest.mark.parametrize(("promote", "verdict"), [(True, "promoted"), (False, "kept baseline")])
def test_the_record_of_a_decision(promote: bool, verdict: str) -> None:
    decision = PromotionDecision(promote=promote, reasons=["enough", "better"], numbers={"difference": 0.1})
    failures = {"tasks": 1, "fixed": ["f1"], "broken": [], "summary": "fixed 1"}
    record = promotion_record(decision, {"baseline": "base", "candidate": "ckpt"}, failures)
    # The promotion table's one row, its columns in this order.
    assert list(record.items()) == [
        ("decision", verdict),
        ("candidate", "ckpt"),
        ("baseline", "base"),
        ("reasons", ["enough", "better"]),
        ("numbers", {"difference": 0.1}),
        ("failure_eval", failures),
    ]


def test_in_the_database_the_registry_writes_no_file(tmp_path: Path, postgres_url) -> None:
    registry = PromotionRegistry(tmp_path / "promoted.json", StateStore(fresh_database(postgres_url)))
    registry.promote("ckpt-1", run_id="run-1")
    assert list(tmp_path.iterdir()) == [] and registry.current().model == "ckpt-1"


@pytest.mark.parametrize(
    "content",
    [
        # Truncated by hand or by a crash of some other writer.
        '{"format": 1, "current": ',
        # Another tool's JSON file at the same path.
        '{"models": []}',
    ],
)
def test_registry_refuses_a_file_it_cannot_read(tmp_path: Path, content: str) -> None:
    path = tmp_path / "promoted.json"
    path.write_text(content)

    with pytest.raises(PromotionRegistryError, match=str(path)):
        PromotionRegistry(path).current()


def test_registry_refuses_numbers_that_are_not_json(tmp_path: Path, state_store) -> None:
    registry = PromotionRegistry(tmp_path / "promoted.json", state_store)

    with pytest.raises(ValueError, match="not JSON compliant"):
        registry.promote("ckpt", numbers={"difference": float("nan")})
    # The failed write left nothing behind (but the file backend's lock file): still no promotion.
    assert registry.current() is None and registry.history() == []
    assert [p.name for p in tmp_path.iterdir()] == ([] if state_store.in_database else [".promoted.json.lock"])


def test_promotions_at_the_same_time_all_land_in_the_history(tmp_path: Path, state_store) -> None:
    # Runs that overlap (threads here, processes below) each read, append and write the record.
    registry = PromotionRegistry(tmp_path / "promoted.json", state_store)
    start = threading.Barrier(8)

    def promote(n: int) -> None:
        start.wait()
        PromotionRegistry(registry.path, state_store).promote(f"ckpt-{n}", run_id=f"run-{n}")

    threads = [threading.Thread(target=promote, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    history = registry.history()
    assert sorted(entry.model for entry in history) == [f"ckpt-{n}" for n in range(8)]
    # Each promotion's baseline is the one before it: one chain, no two read the same "current".
    assert [entry.baseline for entry in history] == [None, *(entry.model for entry in history[:-1])]
    assert registry.current() == history[-1]


# Promotes `count` checkpoints named after argv[3] once the parent says go. argv: file, database URL ("" for files).
PROMOTER = """
import sys
from core.state import StateStore
from training.promotion import PromotionRegistry
registry = PromotionRegistry(sys.argv[1], StateStore(sys.argv[2]))
print("ready", flush=True)
sys.stdin.readline()
for n in range(int(sys.argv[4])):
    registry.promote(f"{sys.argv[3]}-{n}", run_id=sys.argv[3], numbers={"n": n})
"""


def test_two_processes_promoting_at_once_lose_neither(tmp_path: Path, state_store) -> None:
    # Without the run-level lock both read the same history: the file keeps one process's write, the table
    # refuses the second row in the same place.
    count, path = 15, tmp_path / "promoted.json"
    released_together(
        [[PROMOTER, str(path), state_store.database_url, name, str(count)] for name in ("left", "right")]
    )

    history = PromotionRegistry(path, state_store).history()
    names = ("left", "right")
    assert sorted(e.model for e in history) == sorted(f"{name}-{n}" for name in names for n in range(count))
    assert [e.baseline for e in history] == [None, *(e.model for e in history[:-1])]  # one chain
    for name in names:  # each process's promotions in the order it made them
        assert [e.numbers["n"] for e in history if e.run_id == name] == list(range(count))
