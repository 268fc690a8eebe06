"""The checkpoint evaluation table read back: verdicts per role, the paired comparison, the failure report."""

import pandas as pd
import pytest

from training.eval_table import failure_report, paired_comparison, role_verdicts
from training.stats import EvaluationError


def table(verdicts: dict[str, dict[str, list[bool]]], failures: frozenset[str] = frozenset()) -> pd.DataFrame:
    """A checkpoint_eval table from role -> task_id -> one verdict per sample; `failures` are production failures."""
    rows = [
        {"role": role, "task_id": task_id, "family": task_id[0], "failure_eval": task_id in failures, "passed": ok}
        for role, by_task in verdicts.items()
        for task_id, samples in by_task.items()
        for ok in samples
    ]
    return pd.DataFrame(rows, columns=["role", "task_id", "family", "failure_eval", "passed"])


def test_role_verdicts_keep_every_sample_in_order():
    rows = table({"candidate": {"a1": [True, False], "b1": [False]}, "baseline": {"a1": [False, False]}})
    assert role_verdicts(rows) == {
        "baseline": {"a1": [False, False]},
        "candidate": {"a1": [True, False], "b1": [False]},
    }


def test_paired_comparison_is_candidate_minus_baseline_per_task_and_family():
    rows = table(
        {
            "candidate": {"a1": [True, True], "a2": [True, False], "b1": [False, False]},
            "baseline": {"a1": [False, False], "a2": [True, False], "b1": [True, True]},
        }
    )
    comparison = paired_comparison(rows, seed=0)
    assert comparison.per_task == {"a1": 1.0, "a2": 0.0, "b1": -1.0}
    assert comparison.families["a"].difference.value == 0.5 and comparison.families["b"].difference.value == -1.0


@pytest.mark.parametrize(
    ("verdicts", "error"),
    [
        # A table with the candidate only cannot be paired.
        ({"candidate": {"a1": [True]}}, KeyError),
        # The two models scored on different tasks.
        ({"candidate": {"a1": [True]}, "baseline": {"a2": [True]}}, EvaluationError),
    ],
)
def test_paired_comparison_refuses_a_table_it_cannot_pair(verdicts, error):
    with pytest.raises(error):
        paired_comparison(table(verdicts), seed=0)


@pytest.mark.parametrize(
    ("candidate", "baseline", "fixed", "broken", "solved"),
    [
        # Solved by the candidate only: fixed.
        ([True], [False], ["f1"], [], "solves 1 of 1 held-out production failure tasks (baseline 0)"),
        # Solved by the baseline only: broken.
        ([False], [True], [], ["f1"], "solves 0 of 1 held-out production failure tasks (baseline 1)"),
        # Half the samples passing counts as solved (>= 0.5), by both: neither fixed nor broken.
        ([True, False], [False, True], [], [], "solves 1 of 1 held-out production failure tasks (baseline 1)"),
        # Fewer than half: not solved by either.
        ([True, False, False], [False, False, False], [], [], "solves 0 of 1"),
    ],
)
def test_failure_report(candidate, baseline, fixed, broken, solved):
    rows = table({"candidate": {"f1": candidate, "a1": [True]}, "baseline": {"f1": baseline, "a1": [False]}}, {"f1"})
    report = failure_report(rows)
    # a1 is no production failure: it is not reported, whatever the models did on it.
    assert (report["tasks"], report["fixed"], report["broken"]) == (1, fixed, broken)
    assert solved in report["summary"]
    assert report["summary"].endswith(f"fixed {len(fixed)}, broken {len(broken)}")


def test_failure_report_without_production_failures():
    rows = table({"candidate": {"a1": [True]}, "baseline": {"a1": [False]}})
    assert failure_report(rows) == {
        "tasks": 0,
        "fixed": [],
        "broken": [],
        "summary": "failure_eval: no held-out production failure",
    }


def test_failure_report_lists_fixed_and_broken_tasks_sorted():
    candidate = {"f3": [True], "f1": [True], "f2": [False], "f4": [False]}
    baseline = {"f3": [False], "f1": [False], "f2": [True], "f4": [False]}
    report = failure_report(table({"candidate": candidate, "baseline": baseline}, frozenset(candidate)))
    assert (report["fixed"], report["broken"], report["tasks"]) == (["f1", "f3"], ["f2"], 4)
