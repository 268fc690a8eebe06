"""The judge's labels as columns of a task table: one row per task, judged or not (label first, filter later).

A task the run did not judge (over `max_per_family`) is labelled `not_judged`, not dropped; a later step
(`JudgePolicy.kept`) decides which verdicts are kept. Every row also carries the verdict on the judge itself
(`judge_calibrated`, from its calibration against human labels): the splits use its labels only if it is True.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from judge.run import NOT_JUDGED, Judgment
from validators.tasks import TASK_FIELDS

LABEL_COLUMNS = ("judge_verdict", "judge_scores", "judge_failed", "judge_error", "judge_rationale")


def label_rows(task_ids: Iterable[str], judgments: Iterable[Judgment]) -> list[dict[str, Any]]:
    """One row of `LABEL_COLUMNS` per task id, in order: its judgment's verdict, scores, failed criteria, error
    and rationale (the raw answer when there is none, as on a judge error), or `not_judged` and empty values.

    With several samples of a task, its last judgment labels it.

    Example:
        >>> label_rows(["t1"], [])[0]["judge_verdict"]
        'not_judged'
    """
    by_id = {j.task_id: j for j in judgments}
    rows = []
    for task_id in task_ids:
        j = by_id.get(task_id)
        rows.append(
            {
                "judge_verdict": j.verdict if j else NOT_JUDGED,
                "judge_scores": j.scores if j else None,
                "judge_failed": list(j.failed_criteria) if j else [],
                "judge_error": j.error if j else None,
                "judge_rationale": (j.rationale or j.raw) if j else None,
            }
        )
    return rows


def tasks_to_label(deduplicated: pd.DataFrame) -> pd.DataFrame:
    """The tasks the judge labels: the rows not labelled `is_duplicate`, in input order, task fields only."""
    kept = ~deduplicated["is_duplicate"].astype(bool)
    return deduplicated.loc[kept, list(TASK_FIELDS)].reset_index(drop=True)


def calibration_verdict(calibration: pd.DataFrame) -> bool:
    """Whether the judge passed its calibration: `calibration_passed` holds on every row of the calibration table.

    An empty table, or one from before the verdict was kept (no column), is an unknown judge: False.

    Example:
        >>> calibration_verdict(pd.DataFrame({"calibration_passed": [True, False]}))
        False
    """
    passed = calibration.get("calibration_passed", pd.Series([], dtype=bool))
    return bool(len(passed)) and bool(passed.all())


def label_table(tasks: pd.DataFrame, judgments: Sequence[Judgment], calibrated: bool) -> pd.DataFrame:
    """`tasks` with the label columns beside them: `LABEL_COLUMNS` (`label_rows`), then `judge_calibrated`.

    Args:
        tasks: the tasks labelled (`tasks_to_label`), with a `task_id` column.
        judgments: the run's judgments (a task without one is `not_judged`).
        calibrated: the verdict on the judge (`calibration_verdict`), the same on every row.

    Returns:
        A new table, one row per task in the order of `tasks`.
    """
    rows = label_rows(tasks["task_id"].tolist(), judgments)
    labelled = pd.concat([tasks, pd.DataFrame(rows, columns=LABEL_COLUMNS)], axis=1)
    labelled["judge_calibrated"] = calibrated
    return labelled
