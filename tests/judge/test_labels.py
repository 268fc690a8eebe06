"""The judge's label columns of a task table: every non-duplicate task gets a row, judged or not, and the verdict
on the judge."""

import pandas as pd
import pytest

from judge import Judgment
from judge.labels import LABEL_COLUMNS, NOT_JUDGED, calibration_verdict, label_rows, label_table, tasks_to_label
from validators.tasks import TASK_FIELDS


def judgment(task_id: str, *, accepted: bool | None, rationale: str | None = "why", raw: str | None = "raw", sample=0):
    scored = accepted is not None
    return Judgment(
        task_id=task_id,
        sample=sample,
        rubric="task_quality-r1",
        template_version="judge-task_quality-r1-t1",
        scores={"clarity": 5 if accepted else 2} if scored else None,
        rationale=rationale if scored else None,
        accepted=accepted,
        failed_criteria=() if accepted or not scored else ("clarity",),
        error=None if scored else "json_missing",
        error_detail=None,
        raw=raw,
        first_raw=None,
        repaired=False,
        cached=False,
        tokens_in=0,
        tokens_out=0,
    )


@pytest.mark.parametrize(
    ("judgments", "row"),
    [
        # Accepted: its verdict, scores and rationale.
        (
            [judgment("t1", accepted=True)],
            ("accept", {"clarity": 5}, [], None, "why"),
        ),
        # Rejected: the criteria below their minimum, as a list.
        (
            [judgment("t1", accepted=False)],
            ("reject", {"clarity": 2}, ["clarity"], None, "why"),
        ),
        # A judge error has no rationale: the raw answer explains it.
        (
            [judgment("t1", accepted=None, raw="not json")],
            ("judge_error", None, [], "json_missing", "not json"),
        ),
        # An empty rationale falls back to the raw answer too.
        (
            [judgment("t1", accepted=True, rationale="", raw="{...}")],
            ("accept", {"clarity": 5}, [], None, "{...}"),
        ),
        # Not judged (over max_per_family): labelled, not dropped.
        ([], (NOT_JUDGED, None, [], None, None)),
        # Several samples of one task: the last one labels it.
        (
            [judgment("t1", accepted=False), judgment("t1", accepted=True, sample=1)],
            ("accept", {"clarity": 5}, [], None, "why"),
        ),
    ],
)
def test_label_rows(judgments, row):
    assert label_rows(["t1"], judgments) == [dict(zip(LABEL_COLUMNS, row, strict=True))]


def test_one_row_per_task_in_task_order_whatever_was_judged():
    judged = [judgment("b", accepted=True), judgment("zz", accepted=True)]  # "zz" is no task here: ignored
    rows = label_rows(["a", "b", "c"], judged)
    assert [r["judge_verdict"] for r in rows] == [NOT_JUDGED, "accept", NOT_JUDGED]


def tasks_table(*task_ids: str, duplicates: tuple[str, ...] = ()) -> pd.DataFrame:
    rows = [{**{f: None for f in TASK_FIELDS}, "task_id": t, "family": "sql"} for t in task_ids]
    return pd.DataFrame(rows).assign(is_duplicate=[t in duplicates for t in task_ids], cluster_id="c")


def test_the_judge_labels_the_non_duplicates_in_input_order():
    kept = tasks_to_label(tasks_table("a", "b", "c", duplicates=("b",)))
    assert kept["task_id"].tolist() == ["a", "c"] and kept.index.tolist() == [0, 1]
    assert list(kept.columns) == list(TASK_FIELDS)  # the dedup labels are not carried


@pytest.mark.parametrize(
    ("calibration", "calibrated"),
    [
        # Every audit item's run passed: the judge is calibrated.
        (pd.DataFrame({"calibration_passed": [True, True]}), True),
        # One failed item fails the judge.
        (pd.DataFrame({"calibration_passed": [True, False]}), False),
        # No calibration rows: nothing says the judge is fit.
        (pd.DataFrame({"calibration_passed": pd.Series([], dtype=bool)}), False),
        # A table from before the verdict was kept: an unknown judge, whose labels are not used.
        (pd.DataFrame({"task_id": ["t1"]}), False),
    ],
)
def test_calibration_verdict(calibration, calibrated):
    assert calibration_verdict(calibration) is calibrated


def test_the_label_table_puts_a_label_row_beside_each_task():
    labelled = label_table(tasks_to_label(tasks_table("a", "b")), [judgment("b", accepted=True)], calibrated=False)
    assert list(labelled.columns) == [*TASK_FIELDS, *LABEL_COLUMNS, "judge_calibrated"]
    assert labelled["judge_verdict"].tolist() == [NOT_JUDGED, "accept"]
    assert labelled["judge_calibrated"].tolist() == [False, False]
