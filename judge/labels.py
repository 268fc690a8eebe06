"""The judge's labels as columns of a task table: one row per task, judged or not (label first, filter later).

A task the run did not judge (over `max_per_family`) is labelled `not_judged`, not dropped; a later step
(`JudgePolicy.kept`) decides which verdicts are kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from judge.run import NOT_JUDGED, Judgment

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
