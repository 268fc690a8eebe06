"""Judge labels: a person labels calibration items and real verdicts, and judge_calibration judges the labelled
verdicts beside the hand-written sample, naming the files its labels came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.tables import frame_from_records, write_table
from judge import audit_labels
from review.judging import (
    CALIBRATION,
    VERDICT,
    calibration_items,
    hand_written_agreement,
    judge_items,
    judge_label,
    label_sources,
    save_judge_label,
)
from tests.paths import copy_seeds

PROMPT = [{"role": "user", "content": "What is 6 times 7?"}]


@pytest.fixture
def home_and_seeds(tmp_path: Path) -> tuple[Path, Path]:
    seeds = copy_seeds(tmp_path / "seeds", [], audit=["arithmetic"])
    home = tmp_path / "home"
    judged = [
        {"task_id": f"t{i}", "family": "arithmetic", "prompt": PROMPT, "reference": f"#### {40 + i}",
         "judge_verdict": verdict, "judge_rationale": "looks fine"}
        for i, verdict in enumerate(["accept", "reject", "accept", "not_judged"])
    ]  # fmt: skip
    write_table(frame_from_records(judged), home / "judged_tasks.parquet")
    return home, seeds


def test_the_page_offers_calibration_items_and_real_verdicts(home_and_seeds: tuple[Path, Path]) -> None:
    home, seeds = home_and_seeds
    items = judge_items(home, seeds)
    assert {i["source"] for i in items} == {CALIBRATION, VERDICT}
    verdicts = [i for i in items if i["source"] == VERDICT]
    assert sorted(i["id"] for i in verdicts) == ["t0", "t1", "t2"]  # not_judged has no verdict to label
    assert {i["id"]: i["judge"]["verdict"] for i in verdicts}["t1"] == "reject"


def test_judge_calibration_judges_the_verdicts_reviewers_labelled(home_and_seeds: tuple[Path, Path]) -> None:
    home, seeds = home_and_seeds
    items = {i["id"]: i for i in judge_items(home, seeds)}
    save_judge_label(seeds, judge_label(items["t0"], "ana", accept=False, reason="42 is the answer, not 40"))
    save_judge_label(seeds, judge_label(items["t1"], "ana", accept=True, reason="41 is fine for this prompt"))
    hand = next(i for i in items.values() if i["source"] == CALIBRATION)
    save_judge_label(seeds, judge_label(hand, "ana", accept=True, reason="fit"))
    chosen = calibration_items(seeds, per_family=2)
    reviewed = [item for item in chosen if "reviewed" in item.tags]
    assert [(i.id, i.accept) for i in reviewed] == [("t0", False), ("t1", True)]  # the person's verdicts
    assert audit_labels(chosen)["t0"] is False
    ana = str(seeds / "audit" / "review" / "judge" / "ana.jsonl")
    assert label_sources(chosen) == [str(seeds / "audit" / "judge_audit.jsonl"), ana]
    # The label on a hand-written item is compared with it, never replaces it.
    assert hand["id"] not in {i.id for i in reviewed}
    (pair,) = hand_written_agreement(seeds)
    assert pair.shared == 1 and pair.reviewers == ("hand-written", "ana")
