"""Label files beside the seeds: one reviewer's file, stable order, names that can be files, agreement between two
reviewers, and reasons that keep no PII."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from review.labels import (
    JUDGE_KEYS,
    ReviewLabelError,
    check_reviewer,
    label_file,
    load_labels,
    pairwise_agreement,
    read_labels,
    reviewer_agreement,
    save_label,
)


def _label(label_id: str, accept: bool, reviewer: str = "ana") -> dict:
    return {
        "id": label_id,
        "reviewer": reviewer,
        "labelled_at": "2025-01-01T00:00:00+00:00",
        "source": "verdict",
        "model": "judge",
        "task": {"family": "arithmetic", "prompt": [], "reference": None},
        "judge": {"verdict": "accept"},
        "human": {"accept": accept, "reason": "r"},
    }


def test_labels_are_kept_one_per_line_sorted_by_id_and_replaced_by_id(tmp_path: Path) -> None:
    path = label_file(tmp_path, "judge", "ana")
    assert path == tmp_path / "audit" / "review" / "judge" / "ana.jsonl"
    save_label(path, _label("b", True), JUDGE_KEYS)
    save_label(path, _label("a", False), JUDGE_KEYS)
    save_label(path, _label("b", False), JUDGE_KEYS)  # relabelled: replaces, never appends a second line
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["a", "b"]
    assert json.loads(lines[1])["human"]["accept"] is False
    assert list(json.loads(lines[0])) == list(JUDGE_KEYS)  # fixed key order: diffs stay small
    assert [x["id"] for x in load_labels(tmp_path, "judge")["ana"]] == ["a", "b"]


@pytest.mark.parametrize(
    "name",
    [
        "../ana",  # a path out of the label folder
        "Ana",  # upper case: two spellings of one person
        "",  # no name
        "a b",  # a space in a file name
    ],
)
def test_reviewer_names_must_name_a_file(name: str) -> None:
    with pytest.raises(ReviewLabelError, match="lower-case"):
        check_reviewer(name)


def test_a_broken_label_file_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "ana.jsonl"
    path.write_text(json.dumps(_label("a", True)) + "\n" + '{"id": "b"}\n', encoding="utf-8")
    with pytest.raises(ReviewLabelError, match=r"ana.jsonl:2: missing reviewer"):
        read_labels(path, JUDGE_KEYS)


def test_two_reviewers_give_cohens_kappa(tmp_path: Path) -> None:
    # ana and bo agree on 3 of 4 shared ids; c is ana's alone and does not count.
    ana = {"1": True, "2": True, "3": False, "4": False, "c": True}
    bo = {"1": True, "2": False, "3": False, "4": False}
    for name, verdicts in (("ana", ana), ("bo", bo)):
        for key, accept in verdicts.items():
            save_label(label_file(tmp_path, "judge", name), _label(key, accept, name), JUDGE_KEYS)
    (pair,) = pairwise_agreement(load_labels(tmp_path, "judge"))
    assert (pair.shared, pair.agreements) == (4, 3)
    # p_o = 0.75; p_e = (2/4 * 1/4) + (2/4 * 3/4) = 0.5: kappa = 0.25 / 0.5.
    assert pair.kappa == pytest.approx(0.5)
    assert pair.line() == "ana vs bo: 3/4 labels agree, Cohen's kappa 0.50"


def test_kappa_is_undefined_when_both_used_one_label() -> None:
    assert reviewer_agreement({"1": True}, {"1": True}, ("a", "b")).kappa is None
