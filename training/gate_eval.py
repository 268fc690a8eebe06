"""The checkpoint evaluation table: built from both models' verdicts, and read back for the paired comparison the
gate decides on and the failure report.

The table (`checkpoint_eval`) holds one row per sampled completion: `role` (`baseline` or `candidate`),
`model`, `task_id`, `family`, `failure_eval` (the task is a held-out production failure), `sample`, `passed`,
`score`, `reason`, `completion`, and for an `episode` task (one row per episode) its `end_reason` and `turns`.
Every row counts alike: an episode's verdict is one sample's.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import pandas as pd

from training.evaluation import SampledVerdicts
from training.stats import Comparison, EvalReport, compare, evaluate

ROLES = ("baseline", "candidate")
# `end_reason` and `turns` (the messages) are an episode's; None for a single-turn task's completion.
EVAL_COLUMNS = (
    "role", "model", "task_id", "family", "failure_eval", "sample", "passed", "score", "reason", "completion",
    "end_reason", "turns",
)  # fmt: skip
# The columns of `EvalTable.by_family`.
FAMILY_COLUMNS = ("family", "tasks", *(f"{role} pass@1" for role in ROLES), "difference")


class FailureReport(TypedDict):
    """Which held-out production-failure tasks the candidate now solves (`fixed`) or no longer does (`broken`)."""

    tasks: int
    fixed: list[str]
    broken: list[str]
    summary: str


@dataclass(frozen=True)
class EvalTable:
    """The `checkpoint_eval` table (`rows`, `EVAL_COLUMNS`), each role's pass@k report and their paired comparison."""

    rows: pd.DataFrame
    reports: dict[str, EvalReport]
    comparison: Comparison

    def overall(self) -> dict[str, float]:
        """Each role's overall metrics as flat numbers: `baseline/pass@1`, `candidate/pass@4`, ..."""
        return {
            f"{role}/{metric}": estimate.value
            for role, report in self.reports.items()
            for metric, estimate in report.overall.items()
        }

    def by_family(self) -> list[dict[str, Any]]:
        """pass@1 with its interval per role, and the paired difference, overall and per family (`FAMILY_COLUMNS`)."""
        parts = [("overall", self.comparison.overall, {r: self.reports[r].overall for r in ROLES})]
        parts += [
            (family, paired, {r: self.reports[r].families[family] for r in ROLES})
            for family, paired in self.comparison.families.items()
        ]
        return [
            {
                "family": family,
                "tasks": paired.tasks,
                **{f"{role} pass@1": str(metrics[role]["pass@1"]) for role in ROLES},
                "difference": paired.difference.signed(),
            }
            for family, paired, metrics in parts
        ]

    def pass_at_1(self) -> dict[str, dict[str, float]]:
        """role -> family -> pass@1."""
        return {role: {f: m["pass@1"].value for f, m in self.reports[role].families.items()} for role in ROLES}

    def candidate_failures(self) -> pd.DataFrame:
        """The candidate's rows that did not pass."""
        return self.rows[(self.rows["role"] == "candidate") & ~self.rows["passed"].astype(bool)]


def sample_roles(
    models: Mapping[str, str], play: Callable[[str], SampledVerdicts], log: Callable[[str], object]
) -> dict[str, SampledVerdicts]:
    """Each role's model played once (`play(model)`), in role order.

    A candidate that is the baseline itself (a night whose data and recipe were those of the run that made the
    promoted model, so every training step was reused) takes the baseline's verdicts: sampling it again, with
    the same seeds, would give the same completions at the cost of a second evaluation.

    Example:
        >>> sample_roles({"baseline": "m", "candidate": "m"}, play, print)  # doctest: +SKIP
        baseline m: sampled
        candidate m is the baseline itself: the baseline's verdicts
    """
    sampled: dict[str, SampledVerdicts] = {}
    for role, model in models.items():
        same = next((earlier for earlier, other in models.items() if other == model and earlier in sampled), None)
        if same is not None:
            log(f"{role} {model} is the {same} itself: the {same}'s verdicts")
            sampled[role] = sampled[same]
        else:
            sampled[role] = play(model)
            log(f"{role} {model}: sampled")
    return sampled


def eval_table(
    sampled: Mapping[str, SampledVerdicts],
    models: Mapping[str, str],
    failure_ids: Collection[str],
    *,
    samples: int,
    seed: int,
) -> EvalTable:
    """The `checkpoint_eval` table of the roles' verdicts, their pass@1 and pass@`samples`, and the comparison.

    Args:
        sampled: role -> its verdicts on the eval tasks (`training.episodes.play_and_score`).
        models: role -> the model that played it, in the table's order (`ROLES`).
        failure_ids: the task ids of the held-out production failures (their rows get `failure_eval` True).
        samples: the samples drawn per task (pass@1 is always reported, pass@k for k = samples too).
        seed: the bootstrap seed of the intervals.

    Returns:
        An `EvalTable`: the rows of every role in `models`' order (samples in order, `EVAL_COLUMNS`), each role's
        `training.stats.evaluate` report and `paired_comparison`.
    """
    reports = {
        role: evaluate(sampled[role].passed, sampled[role].families, ks=sorted({1, samples}), seed=seed)
        for role in models
    }
    frames = [pd.DataFrame(sampled[role].rows).assign(role=role, model=model) for role, model in models.items()]
    rows = pd.concat(frames, ignore_index=True)
    rows = rows.assign(failure_eval=rows["task_id"].isin(failure_ids))[list(EVAL_COLUMNS)]
    return EvalTable(rows, reports, paired_comparison(rows, seed))


def role_models(rows: pd.DataFrame) -> dict[str, str]:
    """role -> the model the table evaluated in it (`ROLES`).

    Raises:
        KeyError: the table lacks one of the two roles.
    """
    first = rows.groupby("role")["model"].first()
    return {role: first[role] for role in ROLES}


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
