"""The statistics the promotion gate reads: pass@k with task-bootstrap intervals, and paired comparisons.

1. `evaluate(verdicts, families)` turns `{task_id: [passed, ...]}` into pass@1 / pass@k per family and overall
   (the unbiased estimator of `validators.passk`), each with a bootstrap confidence interval.
2. `compare(candidate, baseline, families)` pairs two models on the same tasks: the per-task difference in
   pass@1 and its mean, with a paired bootstrap interval, overall and per family. `training.promotion` gates
   on it.

The verdicts come from `training.evaluation.sample_and_score` (or any other scorer): this module only counts.

The bootstrap resamples *tasks*, not samples: the question is how much the number would move on another draw
of tasks from the same distribution, and a task's k samples are not independent evidence about that (a model
that always fails one task fails it k times). Intervals are percentile intervals of the resampled mean.
The paired comparison resamples the same task indices for both models, so between-task variance (some tasks
are just hard) cancels out of the difference instead of widening its interval.

Speed: the mean of a resample depends only on how many times each distinct value was drawn, and per-task
pass@1 values with n samples per task take at most n + 1 distinct values (differences at most 2n + 1). For
few distinct values the resample counts come straight from one multinomial draw per resample (~10 ms for
10,000 resamples, whatever the number of tasks); otherwise task indices are drawn and gathered in chunks
(~0.3 s for 10,000 resamples of 3,000 tasks on one core). Both are exactly the task bootstrap, and both are
deterministic for a seed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from core import SeedwheelError
from validators.passk import pass_at_k_estimate

Verdicts = Mapping[str, Sequence[bool]]
BootstrapMethod = Literal["auto", "multinomial", "gather"]

DEFAULT_RESAMPLES = 10_000
DEFAULT_CONFIDENCE = 0.95
# Resamples per chunk on the gather path: bounds memory at chunk * tasks indices (500 x 3,000 x 8 B = 12 MB).
_GATHER_CHUNK = 500
# The multinomial path costs ~8x more per distinct value than the gather path per task; switch accordingly.
_MULTINOMIAL_COST_RATIO = 8


class EvaluationError(SeedwheelError, ValueError):
    """Evaluation inputs that cannot give an answer: no tasks, a task without family or samples, mismatched sets."""


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its bootstrap percentile interval.

    Example:
        >>> str(Estimate(0.42, 0.351, 0.49))
        '0.42 [0.35, 0.49]'
    """

    value: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.value:.2f} [{self.low:.2f}, {self.high:.2f}]"

    def signed(self) -> str:
        """As a difference: `+0.12 [0.05, 0.19]`."""
        return f"{self.value:+.2f} [{self.low:.2f}, {self.high:.2f}]"


@dataclass(frozen=True)
class EvalReport:
    """One model's pass@k over a task set: overall and per family, each with its interval.

    Attributes:
        tasks: number of tasks scored.
        completions: number of sampled completions over all tasks.
        overall: metric (`pass@1`, `pass@5`, ...) -> estimate over every task.
        families: family -> metric -> estimate over that family's tasks.
        family_tasks: family -> number of tasks.
        confidence, resamples, seed: how the intervals were made.
    """

    tasks: int
    completions: int
    overall: dict[str, Estimate]
    families: dict[str, dict[str, Estimate]]
    family_tasks: dict[str, int]
    confidence: float
    resamples: int
    seed: int

    def as_metadata(self) -> dict[str, float | int]:
        """Flat numbers for `MaterializeResult(metadata=...)`: `pass@1`, `pass@1_low`, `sql/pass@1`, ...

        Example:
            >>> report = evaluate({"a": [True]}, {"a": "sql"}, resamples=10)
            >>> report.as_metadata()["sql/pass@1"]
            1.0
        """
        out: dict[str, float | int] = {"tasks": self.tasks, "completions": self.completions}
        for prefix, metrics in [("", self.overall), *((f"{f}/", m) for f, m in self.families.items())]:
            for metric, estimate in metrics.items():
                out[f"{prefix}{metric}"] = estimate.value
                out[f"{prefix}{metric}_low"] = estimate.low
                out[f"{prefix}{metric}_high"] = estimate.high
        for family, count in self.family_tasks.items():
            out[f"{family}/tasks"] = count
        return out


@dataclass(frozen=True)
class PairedDifference:
    """Candidate minus baseline pass@1 on the same tasks: both means and the difference with its interval."""

    tasks: int
    candidate: float
    baseline: float
    difference: Estimate


@dataclass(frozen=True)
class Comparison:
    """A paired comparison of a candidate with a baseline, overall and per family.

    Attributes:
        overall: over every task.
        families: family -> the same over that family's tasks.
        per_task: task_id -> candidate pass@1 minus baseline pass@1 (for previews: the tasks that moved most).
        confidence, resamples, seed: how the intervals were made.
    """

    overall: PairedDifference
    families: dict[str, PairedDifference]
    per_task: dict[str, float] = field(repr=False)
    confidence: float
    resamples: int
    seed: int

    @property
    def tasks(self) -> int:
        return self.overall.tasks

    def as_metadata(self) -> dict[str, float | int]:
        """Flat numbers: `difference`, `difference_low`, `sql/difference`, `sql/candidate`, ...

        Example:
            >>> comparison = compare({"a": [True]}, {"a": [False]}, {"a": "sql"}, resamples=10)
            >>> comparison.as_metadata()["sql/difference"]
            1.0
        """
        out: dict[str, float | int] = {}
        for prefix, paired in [("", self.overall), *((f"{f}/", p) for f, p in self.families.items())]:
            out[f"{prefix}tasks"] = paired.tasks
            out[f"{prefix}candidate"] = paired.candidate
            out[f"{prefix}baseline"] = paired.baseline
            out[f"{prefix}difference"] = paired.difference.value
            out[f"{prefix}difference_low"] = paired.difference.low
            out[f"{prefix}difference_high"] = paired.difference.high
        return out


def _check_bootstrap_args(resamples: int, confidence: float) -> None:
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise EvaluationError(f"resamples must be a positive integer, got {resamples!r}; 10000 is a good default")
    if not 0.0 < confidence < 1.0:
        raise EvaluationError(f"confidence must be strictly between 0 and 1, got {confidence!r}; e.g. 0.95")


def bootstrap_means(
    values: Any, *, resamples: int, rng: np.random.Generator, method: BootstrapMethod = "auto"
) -> np.ndarray:
    """Means of `resamples` bootstrap resamples of the rows of `values` (rows are tasks, columns statistics).

    Args:
        values: shape `(tasks,)` or `(tasks, statistics)`; every column is resampled with the same task draws,
            which is what makes a paired comparison paired.
        resamples: how many resamples.
        rng: the numpy generator to draw from (its state advances).
        method: `multinomial` draws how often each distinct row is picked (fast when rows repeat, as pass@1
            values do), `gather` draws task indices; `auto` picks the cheaper one. Both are the same bootstrap.

    Returns:
        An array `(resamples,)` or `(resamples, statistics)` of resampled means.

    Example:
        >>> import numpy as np
        >>> bootstrap_means([1.0, 1.0], resamples=3, rng=np.random.default_rng(0)).tolist()
        [1.0, 1.0, 1.0]
    """
    data = np.asarray(values, dtype=float)
    if data.ndim == 0 or data.shape[0] == 0:
        raise EvaluationError("cannot bootstrap an empty set of tasks; give one value per task")
    flat = data.ndim == 1
    data = data.reshape(len(data), -1)
    n = data.shape[0]
    distinct, inverse = np.unique(data, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    if method == "auto":
        method = "multinomial" if len(distinct) * _MULTINOMIAL_COST_RATIO <= n else "gather"
    if method == "multinomial":
        counts = rng.multinomial(n, np.bincount(inverse, minlength=len(distinct)) / n, size=resamples)
        means = counts @ distinct / n
    elif method == "gather":
        means = np.empty((resamples, data.shape[1]))
        for start in range(0, resamples, _GATHER_CHUNK):
            size = min(_GATHER_CHUNK, resamples - start)
            means[start : start + size] = data[rng.integers(0, n, size=(size, n))].mean(axis=1)
    else:
        raise EvaluationError(f"unknown bootstrap method {method!r}; use 'auto', 'multinomial' or 'gather'")
    return means[:, 0] if flat else means


def bootstrap_ci(
    values: Sequence[float] | Any,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> Estimate:
    """The mean of per-task values with a percentile bootstrap interval (tasks resampled with replacement).

    Args:
        values: one number per task (a pass@k estimate, or a paired difference).
        resamples: bootstrap resamples.
        confidence: the interval's coverage, e.g. 0.95 for the 2.5th..97.5th percentiles.
        seed: the generator seed; the same seed and values give the same interval.

    Returns:
        `Estimate(mean, low, high)`.

    Raises:
        EvaluationError: no values, or bad `resamples` / `confidence`.

    Example:
        >>> bootstrap_ci([0.0, 1.0] * 50, resamples=2000, seed=1).value
        0.5
    """
    _check_bootstrap_args(resamples, confidence)
    data = np.asarray(values, dtype=float)
    means = bootstrap_means(data, resamples=resamples, rng=np.random.default_rng(seed))
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    # The percentile interval of a mean of bounded values can come out a hair off the mean when every resample
    # equals it (float rounding); clamp so that `low <= value <= high` always holds for readers of reasons.
    value = float(data.mean())
    return Estimate(value=value, low=min(float(low), value), high=max(float(high), value))


def _family_of(task_id: str, families: Mapping[str, str]) -> str:
    try:
        return families[task_id]
    except KeyError:
        raise EvaluationError(
            f"task {task_id} has no family; pass families for every task_id in the verdicts"
        ) from None


def _group_by_family(task_ids: Iterable[str], families: Mapping[str, str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for task_id in task_ids:
        groups.setdefault(_family_of(task_id, families), []).append(task_id)
    return dict(sorted(groups.items()))


def _pass_rate(samples: Sequence[bool], task_id: str) -> float:
    if not samples:
        raise EvaluationError(f"task {task_id} has no sampled verdicts; sample at least one completion per task")
    return sum(bool(s) for s in samples) / len(samples)


def evaluate(
    verdicts: Verdicts,
    families: Mapping[str, str],
    *,
    ks: Iterable[int] = (1,),
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> EvalReport:
    """pass@k per family and overall, with bootstrap intervals over tasks.

    Args:
        verdicts: task_id -> one pass/fail per sampled completion (at least max(ks) each).
        families: task_id -> family (extra entries are ignored).
        ks: the k values; pass@k uses the unbiased estimator (`validators.passk.pass_at_k_estimate`).
        resamples: bootstrap resamples per interval.
        confidence: interval coverage.
        seed: bootstrap seed (each family's interval uses it afresh, so adding a family changes no other's).

    Returns:
        An `EvalReport`.

    Raises:
        EvaluationError: no tasks, a task without a family or samples, bad bootstrap arguments.
        validators.passk.PassAtKError: a task with fewer samples than some k.

    Example:
        >>> report = evaluate({"a": [True, False], "b": [False, False]}, {"a": "sql", "b": "sql"}, ks=[1, 2])
        >>> report.overall["pass@1"].value, report.overall["pass@2"].value
        (0.25, 0.5)
    """
    _check_bootstrap_args(resamples, confidence)
    ks = list(ks)
    if not verdicts:
        raise EvaluationError("no tasks to evaluate; verdicts is empty")
    if not ks:
        raise EvaluationError("ks is empty; ask for at least pass@1")
    metrics = [f"pass@{k}" for k in ks]
    task_ids = list(verdicts)
    per_task: dict[str, list[float]] = {}
    for task_id in task_ids:
        samples = verdicts[task_id]
        _pass_rate(samples, task_id)  # raises on a task without samples
        passed = sum(bool(s) for s in samples)
        per_task[task_id] = [pass_at_k_estimate(len(samples), passed, k) for k in ks]

    def interval_set(ids: list[str]) -> dict[str, Estimate]:
        values = np.array([per_task[t] for t in ids])
        means = bootstrap_means(values, resamples=resamples, rng=np.random.default_rng(seed))
        tail = (1.0 - confidence) / 2.0
        lows, highs = np.quantile(means, [tail, 1.0 - tail], axis=0)
        point = values.mean(axis=0)
        return {
            m: Estimate(float(point[i]), min(float(lows[i]), float(point[i])), max(float(highs[i]), float(point[i])))
            for i, m in enumerate(metrics)
        }

    groups = _group_by_family(task_ids, families)
    return EvalReport(
        tasks=len(task_ids),
        completions=sum(len(verdicts[t]) for t in task_ids),
        overall=interval_set(task_ids),
        families={family: interval_set(ids) for family, ids in groups.items()},
        family_tasks={family: len(ids) for family, ids in groups.items()},
        confidence=confidence,
        resamples=resamples,
        seed=seed,
    )


def compare(
    candidate: Verdicts,
    baseline: Verdicts,
    families: Mapping[str, str],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> Comparison:
    """Paired comparison of pass@1 on the same tasks: per-task differences, their mean and a paired bootstrap CI.

    Args:
        candidate: the new checkpoint's verdicts, task_id -> pass/fail per sample.
        baseline: the current promoted model's (or the base model's) verdicts on the same task_ids; the two may
            have different numbers of samples per task.
        families: task_id -> family.
        resamples: bootstrap resamples per interval.
        confidence: interval coverage.
        seed: bootstrap seed (each interval uses it afresh).

    Returns:
        A `Comparison` (positive differences mean the candidate is better).

    Raises:
        EvaluationError: the two verdict sets cover different tasks (the message names some), no tasks, a
            task without family or samples, bad bootstrap arguments.

    Example:
        >>> fams = {"a": "sql", "b": "sql"}
        >>> c = compare({"a": [True], "b": [True]}, {"a": [False], "b": [True]}, fams, resamples=100)
        >>> c.overall.difference.value
        0.5
    """
    _check_bootstrap_args(resamples, confidence)
    only_candidate = sorted(set(candidate) - set(baseline))
    only_baseline = sorted(set(baseline) - set(candidate))
    if only_candidate or only_baseline:
        raise EvaluationError(
            "a paired comparison needs both models scored on the same tasks: "
            f"{len(only_candidate)} only in the candidate's verdicts {only_candidate[:3]}, "
            f"{len(only_baseline)} only in the baseline's {only_baseline[:3]}; evaluate both on one eval set"
        )
    if not candidate:
        raise EvaluationError("no tasks to compare; the verdicts are empty")
    task_ids = sorted(candidate)
    rates = {t: (_pass_rate(candidate[t], t), _pass_rate(baseline[t], t)) for t in task_ids}

    def paired(ids: list[str]) -> PairedDifference:
        cand = [rates[t][0] for t in ids]
        base = [rates[t][1] for t in ids]
        diffs = [c - b for c, b in zip(cand, base, strict=True)]
        return PairedDifference(
            tasks=len(ids),
            candidate=sum(cand) / len(ids),
            baseline=sum(base) / len(ids),
            difference=bootstrap_ci(diffs, resamples=resamples, confidence=confidence, seed=seed),
        )

    groups = _group_by_family(task_ids, families)
    return Comparison(
        overall=paired(task_ids),
        families={family: paired(ids) for family, ids in groups.items()},
        per_task={t: rates[t][0] - rates[t][1] for t in task_ids},
        confidence=confidence,
        resamples=resamples,
        seed=seed,
    )
