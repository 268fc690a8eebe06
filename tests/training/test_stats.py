"""Statistics of the promotion gate: pass@k with task-bootstrap intervals and paired comparisons."""

import numpy as np
import pytest

from training.stats import Estimate, EvaluationError, bootstrap_ci, bootstrap_means, compare, evaluate
from validators.passk import PassAtKError


@pytest.mark.parametrize(
    ("verdicts", "families", "ks", "overall", "by_family"),
    [
        # Every sample passes: pass@1 is 1 and the interval cannot move.
        ({"a": [True, True], "b": [True]}, {"a": "x", "b": "x"}, [1], {"pass@1": 1.0}, {"x": {"pass@1": 1.0}}),
        # The docstring example of validators.passk: the same unbiased numbers come out here.
        (
            {"a": [True, False], "b": [False, False]},
            {"a": "x", "b": "x"},
            [1, 2],
            {"pass@1": 0.25, "pass@2": 0.5},
            {"x": {"pass@1": 0.25, "pass@2": 0.5}},
        ),
        # Families are scored apart; the overall number is the mean over tasks, not over families.
        (
            {"a": [True], "b": [False], "c": [False]},
            {"a": "sql", "b": "sql", "c": "tool_call"},
            [1],
            {"pass@1": 1 / 3},
            {"sql": {"pass@1": 0.5}, "tool_call": {"pass@1": 0.0}},
        ),
        # Tasks may have different sample counts; each contributes its own pass rate.
        (
            {"a": [True, True, False, False], "b": [True]},
            {"a": "x", "b": "x", "extra": "y"},
            [1],
            {"pass@1": 0.75},
            {"x": {"pass@1": 0.75}},
        ),
    ],
)
def test_evaluate_point_estimates(verdicts, families, ks, overall, by_family) -> None:
    report = evaluate(verdicts, families, ks=ks, resamples=200, seed=0)

    assert {m: e.value for m, e in report.overall.items()} == pytest.approx(overall)
    assert set(report.families) == set(by_family)
    for family, expected in by_family.items():
        assert {m: e.value for m, e in report.families[family].items()} == pytest.approx(expected)
    for estimate in [*report.overall.values(), *(e for ms in report.families.values() for e in ms.values())]:
        assert estimate.low <= estimate.value <= estimate.high
    assert report.tasks == len(verdicts) and report.completions == sum(map(len, verdicts.values()))


def synthetic_verdicts(tasks: int, samples: int, rate: float, seed: int) -> dict[str, list[bool]]:
    rng = np.random.default_rng(seed)
    return {f"t{i}": (rng.random(samples) < rate).tolist() for i in range(tasks)}


def test_intervals_are_deterministic_for_a_seed_and_shrink_with_more_tasks() -> None:
    small = synthetic_verdicts(50, 4, 0.4, seed=1)
    large = synthetic_verdicts(2000, 4, 0.4, seed=1)
    families_small = dict.fromkeys(small, "x")
    families_large = dict.fromkeys(large, "x")

    first = evaluate(small, families_small, resamples=2000, seed=7).overall["pass@1"]
    again = evaluate(small, families_small, resamples=2000, seed=7).overall["pass@1"]
    other = evaluate(small, families_small, resamples=2000, seed=8).overall["pass@1"]
    wide = evaluate(large, families_large, resamples=2000, seed=7).overall["pass@1"]

    assert first == again
    assert (first.low, first.high) != (other.low, other.high)
    assert wide.high - wide.low < (first.high - first.low) / 3


def test_both_bootstrap_paths_draw_the_same_distribution() -> None:
    values = np.arange(3000) % 5 / 4  # five distinct pass@1 values, as with four samples per task

    multinomial = bootstrap_means(values, resamples=4000, rng=np.random.default_rng(0), method="multinomial")
    gather = bootstrap_means(values, resamples=4000, rng=np.random.default_rng(0), method="gather")

    assert multinomial.mean() == pytest.approx(values.mean(), abs=1e-3)
    assert gather.mean() == pytest.approx(values.mean(), abs=1e-3)
    assert multinomial.std() == pytest.approx(gather.std(), rel=0.1)
    assert multinomial.std() == pytest.approx(values.std() / np.sqrt(len(values)), rel=0.1)


def test_paired_comparison_per_task_and_per_family() -> None:
    candidate = {"a": [True, True], "b": [True, False], "c": [False, False], "d": [True, True]}
    baseline = {"a": [False, False], "b": [True, False], "c": [True, True], "d": [True, True]}
    families = {"a": "sql", "b": "sql", "c": "tool_call", "d": "tool_call"}

    result = compare(candidate, baseline, families, resamples=500)

    assert result.per_task == {"a": 1.0, "b": 0.0, "c": -1.0, "d": 0.0}
    assert (result.overall.candidate, result.overall.baseline, result.overall.difference.value) == (0.625, 0.625, 0)
    assert result.families["sql"].difference.value == 0.5
    assert result.families["tool_call"].difference.value == -0.5
    assert result.as_metadata()["tool_call/difference"] == -0.5


def test_pairing_removes_task_difficulty_from_the_interval() -> None:
    # Tasks range from easy to hard; the candidate is better by a steady margin on every one.
    rng = np.random.default_rng(4)
    difficulty = rng.random(200)
    baseline = {f"t{i}": (rng.random(32) < d).tolist() for i, d in enumerate(difficulty)}
    candidate = {f"t{i}": (rng.random(32) < min(d + 0.05, 1.0)).tolist() for i, d in enumerate(difficulty)}
    families = dict.fromkeys(baseline, "x")

    paired = compare(candidate, baseline, families, resamples=3000).overall.difference
    cand = evaluate(candidate, families, resamples=3000).overall["pass@1"]
    base = evaluate(baseline, families, resamples=3000).overall["pass@1"]

    assert paired.low > 0  # the paired interval sees the improvement...
    assert cand.low < base.high  # ...which two separate intervals would call an overlap
    assert paired.high - paired.low < (cand.high - cand.low) / 2


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        # Nothing to evaluate.
        (lambda: evaluate({}, {}), EvaluationError, "empty"),
        # A task without a family cannot be placed in a per-family table.
        (lambda: evaluate({"a": [True]}, {}), EvaluationError, "task a has no family"),
        # A task that was never sampled says nothing.
        (lambda: evaluate({"a": []}, {"a": "x"}), EvaluationError, "no sampled verdicts"),
        # pass@4 needs at least four samples per task (the passk module's own error).
        (lambda: evaluate({"a": [True]}, {"a": "x"}, ks=[4]), PassAtKError, "k=4"),
        # Interval settings out of range.
        (lambda: evaluate({"a": [True]}, {"a": "x"}, resamples=0), EvaluationError, "resamples"),
        (lambda: bootstrap_ci([1.0], confidence=1.0), EvaluationError, "confidence"),
        # A paired comparison needs the same tasks on both sides.
        (lambda: compare({"a": [True]}, {"b": [True]}, {"a": "x", "b": "x"}), EvaluationError, "same tasks"),
    ],
)
def test_bad_inputs_raise_with_a_reason(call, error, match) -> None:
    with pytest.raises(error, match=match):
        call()


def test_estimate_formats_as_in_reasons() -> None:
    assert str(Estimate(0.5, 0.4, 0.6)) == "0.50 [0.40, 0.60]"
    assert Estimate(0.12, 0.05, 0.19).signed() == "+0.12 [0.05, 0.19]"
