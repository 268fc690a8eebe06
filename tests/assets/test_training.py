"""Training and evaluation assets on planted tables: the reward audit gates training, and the promotion gate decides.

Upstream tables are written as a previous run would have left them, so each test runs only the assets it is
about (the whole chain on the tiny model runs in tests/test_quickstart_graph.py).
"""

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import pandas as pd
import pytest

from pipeline.runs import materialize
from validators.registry import Completion, Verdict, Verifier, VerifyContext
from validators.seeds import load_seeds
from validators.splits import first_per_family
from validators.tables import frame_from_records, read_table, write_table
from validators.tasks import TASK_FIELDS, compute_task_id


class AlwaysPass(Verifier):
    """Test-only: a broken reward that pays full marks for anything (the reward hack the audit must catch)."""

    name = "test_always_pass"
    version = 1

    def check(self, params: Mapping[str, Any], completion: Completion, context: VerifyContext) -> Verdict:
        return Verdict(score=1.0, passed=True, reason="anything goes")


def bundled_tasks(settings, per_family: int | None = None) -> list[dict]:
    """The bundled seeds as training tasks: all of them (the probes need a realistic spread of answers), or a few."""
    tasks = [
        {k: t[k] for k in TASK_FIELDS} for t in load_seeds([settings.seeds_dir], root=settings.seeds_dir.parent).tasks
    ]
    return [tasks[i] for i in first_per_family(tasks, per_family)]


def plant_train_tasks(settings, tasks: list[dict]) -> None:
    write_table(frame_from_records(tasks, TASK_FIELDS), settings.home / "train_tasks.parquet")


def test_the_bundled_reward_passes_its_audit(settings):
    plant_train_tasks(settings, bundled_tasks(settings))
    summary = materialize(settings, "reward_audit")
    assert summary.success, summary.failures
    assert summary.checks == [("reward_sound", True, "passed")]
    metadata = summary.assets[0].metadata
    assert metadata["labelled/agreement"] >= 0.9
    assert metadata["probe/tasks_without_reward"] == 0
    rows = read_table(settings.home / "reward_audit.parquet")
    assert len(rows) == metadata["labelled_rows"] and rows["agree"].notna().all()


def test_a_constant_reward_fails_the_audit_and_training_does_not_start(settings):
    settings = dataclasses.replace(settings, verifier_plugins=(f"{__name__}:AlwaysPass",))
    tasks = []
    for task in bundled_tasks(settings, per_family=2):
        verifier = {"name": "test_always_pass", "version": 1, "params": {}}
        tasks.append({**task, "verifier": verifier, "task_id": compute_task_id(task["prompt"], verifier)})
    plant_train_tasks(settings, tasks)
    summary = materialize(settings, "key:reward_audit or key:sft_checkpoint")
    assert ("reward_sound", False, "ERROR") in summary.checks
    assert [a.key for a in summary.assets] == ["reward_audit"]  # the blocking check stopped sft_checkpoint
    failed = summary.check_metadata["reward_sound"]
    assert failed["probe/constant/mean"] == 1.0  # "42" scores full marks on every task: the hack is named


def eval_rows(candidate: list[bool], baseline: list[bool], families: list[str], failures: int = 0) -> pd.DataFrame:
    """A checkpoint_eval table: one sample per task and model; the last `failures` tasks are production failures."""
    rows = []
    for role, passed, model in (("baseline", baseline, "base-model"), ("candidate", candidate, "ckpt/run-1")):
        for i, (ok, family) in enumerate(zip(passed, families, strict=True)):
            rows.append(
                {"role": role, "model": model, "task_id": f"t{i:02d}", "family": family, "sample": 0}
                | {"failure_eval": i >= len(passed) - failures, "passed": ok, "score": float(ok), "reason": ""}
                | {"completion": "#### 1"}
            )
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    ("candidate", "baseline", "promoted"),
    [
        # 30 tasks: the candidate solves 24, the baseline 6, in the same family: clearly better.
        ([True] * 24 + [False] * 6, [True] * 6 + [False] * 24, True),
        # The same pass rate on the same tasks: not shown to be better.
        ([True] * 15 + [False] * 15, [True] * 15 + [False] * 15, False),
        # Better on average, but worse than the baseline on every task of a family: a regression blocks it.
        ([True] * 20 + [False] * 10, [False] * 20 + [True] * 10, False),
    ],
)
def test_promotion_decides_on_the_paired_comparison(settings, candidate, baseline, promoted):
    families = ["arithmetic"] * 20 + ["sql"] * 10
    write_table(eval_rows(candidate, baseline, families), settings.home / "checkpoint_eval.parquet")
    summary = materialize(settings, "promotion")
    assert summary.success, summary.failures
    metadata = summary.assets[0].metadata
    assert metadata["promoted"] is promoted
    decision = read_table(settings.home / "promotion.parquet").iloc[0]
    assert decision["decision"] == ("promoted" if promoted else "kept baseline")
    assert decision["reasons"] and all(isinstance(r, str) for r in decision["reasons"])
    registry = settings.home / "promotion" / "promoted.json"
    if promoted:
        record = json.loads(registry.read_text())
        assert record["current"]["model"] == "ckpt/run-1"
        assert record["current"]["run_id"] == summary.run_id
        assert metadata["promoted_model"] == "ckpt/run-1"  # the next run's baseline
    else:
        assert not registry.exists()
        assert metadata["promoted_model"] == "base-model"


def test_difficulty_profile_leaves_out_tasks_without_signal_and_grpo_refuses_an_empty_set(settings, tiny_model_dir):
    tasks = [t for t in bundled_tasks(settings, per_family=3) if t["family"] in ("arithmetic", "sql")]  # short prompts
    plant_train_tasks(settings, tasks)
    manifest = {"stage": "sft", "trained": False, "checkpoint": str(tiny_model_dir), "base_model": str(tiny_model_dir)}
    write_table(pd.DataFrame([manifest]), settings.home / "sft_checkpoint.parquet")
    overrides = {"training": {"difficulty_profile": True, "difficulty_k": 2, "difficulty_max_new_tokens": 4}}
    summary = materialize(settings, "key:difficulty_profile or key:grpo_checkpoint", resources=overrides)
    profile = read_table(settings.home / "difficulty_profile.parquet")
    assert profile["task_id"].tolist() == [t["task_id"] for t in tasks]
    # A random policy with 4 new tokens solves nothing: every task is never solved, none carries GRPO signal.
    assert set(profile["label"]) == {"never_solved"} and not profile["in_grpo_set"].any()
    assert (profile["samples"] == 2).all()
    metadata = summary.assets[0].metadata
    assert metadata["in_grpo_set"] == 0 and metadata["solved_of_k"].startswith("![")
    assert not summary.success
    assert "no training task is left for GRPO" in summary.failures[0]


def test_promotion_reports_the_production_failures_apart(settings):
    # 30 tasks, the last 4 held-out production failures: the candidate fixes t26 and t27 and breaks t29.
    candidate = [True] * 24 + [False] * 2 + [True, True, False, False]
    baseline = [True] * 6 + [False] * 20 + [False, False, False, True]
    write_table(
        eval_rows(candidate, baseline, ["arithmetic"] * 30, failures=4), settings.home / "checkpoint_eval.parquet"
    )
    summary = materialize(settings, "promotion")
    metadata = summary.assets[0].metadata
    assert metadata["failures_fixed"] == ["t26", "t27"] and metadata["failures_broken"] == ["t29"]
    assert metadata["failure_eval"].startswith("failure_eval: the candidate solves 2 of 4")
    decision = read_table(settings.home / "promotion.parquet").iloc[0]
    assert decision["failure_eval"]["tasks"] == 4
