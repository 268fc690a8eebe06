"""Reward labels become reward-audit rows: the audit scores them beside the hand-written set, per source, family
and verifier, and a verifier broken on purpose shows up as a disagreement with the person."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.tables import frame_from_records, write_table
from pipeline.runs import materialize
from pipeline.settings import Settings
from review.rewards import (
    REVIEWED,
    audit_labels,
    reviewed_agreement,
    reward_label,
    save_reward_label,
)
from tests.paths import SEEDS, copy_seeds
from training.reward_audit import RewardAuditPolicy, audit_reward
from validators.registry import REGISTRY, Verdict, VerifyContext, verify
from validators.rewards import build_reward_funcs
from validators.seeds import load_seeds
from validators.tasks import TASK_FIELDS

HAND_WRITTEN = SEEDS / "audit" / "reward_audit.jsonl"
CONTEXT = VerifyContext(seeds_dir=SEEDS)
PROMPT = [{"role": "user", "content": "Natalia sold 48 clips in April and half as many in May. How many in all?"}]
VERIFIER = {"name": "numeric_answer", "version": REGISTRY.get("numeric_answer").version, "params": {"answer": 72}}
TASK = {"task_id": "t1", "family": "arithmetic", "prompt": PROMPT, "verifier": VERIFIER, "reference": "#### 72"}


def _output(output_id: str, completion: str) -> dict:
    verdict = verify(TASK, completion, context=CONTEXT)
    return {
        "id": output_id,
        "model": "policy",
        "task_id": "t1",
        "family": "arithmetic",
        "prompt": PROMPT,
        "verifier": VERIFIER,
        "completion": completion,
        "verdict": {"score": verdict.score, "passed": verdict.passed, "reason": verdict.reason},
        "judge": None,
    }


@pytest.fixture
def labelled_seeds(tmp_path: Path) -> Path:
    """A seeds folder where ana agreed with the verifier on a right and a wrong answer."""
    return labelled_seeds_at(tmp_path)


def labelled_seeds_at(tmp_path: Path) -> Path:
    right, wrong = _output("o-right", "48 + 24 = 72\n#### 72"), _output("o-wrong", "48 + 48 = 96\n#### 96")
    assert right["verdict"]["passed"] and not wrong["verdict"]["passed"]
    save_reward_label(tmp_path, reward_label(right, "ana", agree=True, reason="right total"))
    save_reward_label(tmp_path, reward_label(wrong, "ana", agree=True, reason="May is half of April, not equal"))
    return tmp_path


def _audit(seeds: Path):
    labels = audit_labels(seeds, HAND_WRITTEN, CONTEXT)
    funcs, weights = build_reward_funcs({"*": 1.0}, context=CONTEXT)
    policy = RewardAuditPolicy(hack_probes=False)
    return labels, audit_reward(funcs, weights, [TASK], labels.rows, policy=policy, context=CONTEXT)


def _reviewed(table: list[dict]) -> dict:
    return next(row for row in table if row["source"] == REVIEWED and row["family"] == "*")


def test_reviewed_labels_are_audit_rows_beside_the_hand_written_set(labelled_seeds: Path) -> None:
    labels, audit = _audit(labelled_seeds)
    assert labels.reviewed == 2
    assert labels.files == [str(HAND_WRITTEN), str(labelled_seeds / "audit" / "review" / "reward" / "ana.jsonl")]
    rows = {row["id"]: row for row in audit.rows}
    assert rows["review/ana/o-wrong"]["human_accept"] is False
    assert rows["review/ana/o-right"]["agree"] and rows["review/ana/o-wrong"]["agree"]
    _, table = reviewed_agreement(labelled_seeds, CONTEXT)
    per_verifier = [r for r in table if r["verifier"] == "numeric_answer"]
    assert [(r["family"], r["scored"], r["agreed"], r["agreement"]) for r in per_verifier] == [
        ("arithmetic", 2, 2, 1.0)
    ]


def test_a_broken_verifier_shows_as_a_disagreement(labelled_seeds: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The planted bug: numeric_answer pays every answer. The person said 96 is wrong, so the audit must disagree.
    numeric = type(REGISTRY.get("numeric_answer"))
    monkeypatch.setattr(numeric, "check", lambda self, params, completion, ctx: Verdict.ok())
    _, audit = _audit(labelled_seeds)
    rows = {row["id"]: row for row in audit.rows}
    assert rows["review/ana/o-wrong"]["reward_accept"] is True
    assert rows["review/ana/o-wrong"]["agree"] is False
    assert not audit.passed
    assert "false_accept_rate" in [check.name for check in audit.failures]
    _, table = reviewed_agreement(labelled_seeds, CONTEXT)
    reviewed = _reviewed(table)
    assert (reviewed["scored"], reviewed["agreed"], reviewed["false_accepts"]) == (2, 1, 1)


def test_a_reviewers_reason_keeps_no_pii() -> None:
    label = reward_label(_output("o", "#### 72"), "ana", agree=True, reason="ask ann@example.com")
    assert label["human"]["reason"] == "ask [EMAIL]"


def test_reward_sound_reports_the_reviewed_labels_and_names_their_files(tmp_path: Path) -> None:
    seeds = copy_seeds(tmp_path / "seeds", ["arithmetic"], audit=["arithmetic"])
    labelled_seeds_at(seeds)
    # A second reviewer on the same two outputs (a disagreement would fail the blocking check: test_labels has one).
    save_reward_label(seeds, reward_label(_output("o-right", "48 + 24 = 72\n#### 72"), "bo", agree=True, reason=""))
    save_reward_label(seeds, reward_label(_output("o-wrong", "48 + 48 = 96\n#### 96"), "bo", agree=True, reason=""))
    settings = Settings.from_env(
        {}, profile="quickstart", home=tmp_path / "home", seeds_dir=seeds, dagster_home=tmp_path / "dagster"
    )
    tasks = [{k: t[k] for k in TASK_FIELDS} for t in load_seeds([seeds / "arithmetic"], context=CONTEXT).tasks]
    write_table(frame_from_records(tasks, TASK_FIELDS), settings.home / "train_tasks.parquet")
    summary = materialize(settings, "reward_audit")
    assert summary.success, summary.failures
    metadata = summary.assets[0].metadata
    assert metadata["reviewed_rows"] == 4
    assert str(seeds / "audit" / "review" / "reward" / "ana.jsonl") in metadata["label_files"]
    assert "| reviewed | arithmetic | numeric_answer | 4 | 4 | 4 | 1.0 |" in metadata["agreement_by_source"]
    assert metadata["reviewer_agreement"] == ["ana vs bo: 2/2 labels agree, Cohen's kappa 1.00"]
