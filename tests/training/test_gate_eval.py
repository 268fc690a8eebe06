"""The checkpoint evaluation table, built from both models' verdicts and read back: verdicts per role, the paired
comparison, the failure report."""

import pandas as pd
import pytest

from training.evaluation import SampledVerdicts
from training.gate_eval import (
    EVAL_COLUMNS,
    FAMILY_COLUMNS,
    eval_table,
    failure_report,
    paired_comparison,
    role_models,
    role_verdicts,
    sample_roles,
)
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


def sampled(verdicts: dict[str, list[bool]]) -> SampledVerdicts:
    """What `play_and_score` returns for task_id -> one verdict per sample (the family is the id's first letter)."""
    rows = [
        {"task_id": task_id, "family": task_id[0], "sample": i, "completion": f"#### {i}", "score": float(ok)}
        | {"passed": ok, "reason": "", "end_reason": None, "turns": None}
        for task_id, samples in verdicts.items()
        for i, ok in enumerate(samples)
    ]
    return SampledVerdicts(passed=verdicts, families={t: t[0] for t in verdicts}, rows=rows)


MODELS = {"baseline": "base-model", "candidate": "ckpt/run-1"}


def test_the_eval_table_holds_both_roles_rows_their_reports_and_their_comparison():
    runs = {
        "baseline": sampled({"a1": [False, False], "a2": [True, False], "b1": [True, True]}),
        "candidate": sampled({"a1": [True, True], "a2": [True, False], "b1": [False, True]}),
    }
    table = eval_table(runs, MODELS, {"b1", "z9"}, samples=2, seed=0)
    rows = table.rows
    assert tuple(rows.columns) == EVAL_COLUMNS and list(rows.index) == list(range(12))
    # The baseline's rows first, each role's in its sampled order, tagged with the role and its model.
    assert list(rows["role"]) == ["baseline"] * 6 + ["candidate"] * 6
    assert list(rows["model"]) == ["base-model"] * 6 + ["ckpt/run-1"] * 6
    assert list(rows["task_id"][:6]) == ["a1", "a1", "a2", "a2", "b1", "b1"] and list(rows["sample"][:2]) == [0, 1]
    assert list(rows["failure_eval"]) == [t == "b1" for t in rows["task_id"]]
    # pass@1 always, and pass@k for the samples drawn; the comparison is the table's own.
    assert list(table.reports) == ["baseline", "candidate"]
    assert table.overall() == {
        "baseline/pass@1": 0.5,
        "baseline/pass@2": pytest.approx(2 / 3),
        "candidate/pass@1": pytest.approx(2 / 3),
        "candidate/pass@2": 1.0,
    }
    assert table.comparison == paired_comparison(rows, seed=0)
    assert table.pass_at_1() == {"baseline": {"a": 0.25, "b": 1.0}, "candidate": {"a": 0.75, "b": 0.5}}
    by_family = table.by_family()
    assert [row["family"] for row in by_family] == ["overall", "a", "b"]
    assert all(list(row) == list(FAMILY_COLUMNS) for row in by_family)
    assert by_family[2] == {
        "family": "b",
        "tasks": 1,
        "baseline pass@1": str(table.reports["baseline"].families["b"]["pass@1"]),
        "candidate pass@1": str(table.reports["candidate"].families["b"]["pass@1"]),
        "difference": table.comparison.families["b"].difference.signed(),
    }
    failed = table.candidate_failures()
    assert list(zip(failed["task_id"], failed["sample"], strict=True)) == [("a2", 1), ("b1", 0)]
    assert set(failed["role"]) == {"candidate"}
    assert role_models(rows) == MODELS


def test_one_sample_per_task_reports_pass_at_1_only():
    runs = {role: sampled({"a1": [True]}) for role in MODELS}
    assert list(eval_table(runs, MODELS, set(), samples=1, seed=0).overall()) == [
        "baseline/pass@1",
        "candidate/pass@1",
    ]


def test_role_models_refuse_a_table_without_both_roles():
    rows = pd.DataFrame({"role": ["candidate"], "model": ["ckpt/run-1"]})
    with pytest.raises(KeyError):
        role_models(rows)


def test_a_candidate_that_is_the_baseline_itself_is_sampled_once() -> None:
    played: list[str] = []

    def play(model: str) -> SampledVerdicts:
        played.append(model)
        return SampledVerdicts({f"{model}-task": [True]}, {f"{model}-task": "sql"}, rows=[])

    said: list[str] = []
    same = sample_roles({"baseline": "grpo/a", "candidate": "grpo/a"}, play, said.append)
    assert played == ["grpo/a"] and same["candidate"] is same["baseline"]
    assert said[-1] == "candidate grpo/a is the baseline itself: the baseline's verdicts"
    apart = sample_roles({"baseline": "base", "candidate": "grpo/a"}, play, said.append)
    assert played == ["grpo/a", "base", "grpo/a"] and apart["candidate"] is not apart["baseline"]
