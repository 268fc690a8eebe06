"""Reading the checkpoint evaluation table: the paired comparison the gate decides on, and the failure report.

The table (`checkpoint_eval`) holds one row per sampled completion: `role` (`baseline` or `candidate`),
`model`, `task_id`, `family`, `failure_eval` (the task is a held-out production failure), `sample`, `passed`,
`score`, `reason`, `completion`, and for an `episode` task (one row per episode) its `end_reason` and `turns`.
Every row counts alike: an episode's verdict is one sample's.
"""

from __future__ import annotations

from typing import TypedDict

import pandas as pd

from training.stats import Comparison, compare


class FailureReport(TypedDict):
    """Which held-out production-failure tasks the candidate now solves (`fixed`) or no longer does (`broken`)."""

    tasks: int
    fixed: list[str]
    broken: list[str]
    summary: str


def role_verdicts(rows: pd.DataFrame) -> dict[str, dict[str, list[bool]]]:
    """role -> task_id -> the pass/fail of each of its samples, in row order.

    Example:
        >>> rows = pd.DataFrame({"role": ["candidate", "candidate"], "task_id": ["a", "a"], "passed": [1, 0]})
        >>> role_verdicts(rows)
        {'candidate': {'a': [True, False]}}
    """
    return {
        str(role): part.groupby("task_id")["passed"].apply(lambda s: [bool(v) for v in s]).to_dict()
        for role, part in rows.groupby("role")
    }


def paired_comparison(rows: pd.DataFrame, seed: int) -> Comparison:
    """The paired comparison (`training.stats.compare`) of the candidate's and the baseline's verdicts.

    Raises:
        KeyError: the table lacks one of the two roles.
        training.stats.EvaluationError: the two roles were not scored on the same tasks.
    """
    verdicts = role_verdicts(rows)
    families = dict(zip(rows["task_id"], rows["family"], strict=True))
    return compare(verdicts["candidate"], verdicts["baseline"], families, seed=seed)


def failure_report(rows: pd.DataFrame) -> FailureReport:
    """Per held-out production-failure task: solved (at least half its samples pass) by the baseline, by the
    candidate; the tasks the candidate fixed and broke, and a one-line summary.

    Reported apart from the gate: it is not one of its rules.

    Example:
        >>> rows = pd.DataFrame({"role": ["baseline", "candidate"], "task_id": ["f1", "f1"],
        ...                      "failure_eval": [True, True], "passed": [False, True]})
        >>> failure_report(rows)["fixed"]
        ['f1']
    """
    failures = rows[rows["failure_eval"].astype(bool)]
    solved = failures.groupby(["task_id", "role"])["passed"].mean().unstack("role", fill_value=0.0) >= 0.5
    if solved.empty:
        return {"tasks": 0, "fixed": [], "broken": [], "summary": "failure_eval: no held-out production failure"}
    fixed = sorted(solved.index[solved["candidate"] & ~solved["baseline"]])
    broken = sorted(solved.index[~solved["candidate"] & solved["baseline"]])
    summary = (
        f"failure_eval: the candidate solves {int(solved['candidate'].sum())} of {len(solved)} held-out production "
        f"failure tasks (baseline {int(solved['baseline'].sum())}); fixed {len(fixed)}, broken {len(broken)}"
    )
    return {"tasks": len(solved), "fixed": fixed, "broken": broken, "summary": summary}
