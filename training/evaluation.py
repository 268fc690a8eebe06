"""Held-out evaluation of a checkpoint: sample, score with the verifier registry, and put numbers on it.

Three steps, each usable alone:

1. `sample_and_score(model, tasks, k=...)` draws k completions per task with the local server's batched engine
   (`llm.generation`: the task's prompt messages through the tokenizer's chat template, prefilled once for its
   k samples) and judges each with the task's own verifier (`validators.batch.verify_many`), the same one
   that validated the data and was the reward.
2. `evaluate(verdicts, families)` turns `{task_id: [passed, ...]}` into pass@1 / pass@k per family and overall
   (the unbiased estimator of `validators.passk`), each with a bootstrap confidence interval.
3. `compare(candidate, baseline, families)` pairs two models on the same tasks: the per-task difference in
   pass@1 and its mean, with a paired bootstrap interval, overall and per family. `training.promotion` gates
   on it.

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

import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from validators.batch import verify_many
from validators.passk import pass_at_k_estimate
from validators.registry import VerifyContext

logger = logging.getLogger(__name__)

Verdicts = Mapping[str, Sequence[bool]]
BootstrapMethod = Literal["auto", "multinomial", "gather"]

DEFAULT_RESAMPLES = 10_000
DEFAULT_CONFIDENCE = 0.95
# Resamples per chunk on the gather path: bounds memory at chunk * tasks indices (500 x 3,000 x 8 B = 12 MB).
_GATHER_CHUNK = 500
# The multinomial path costs ~8x more per distinct value than the gather path per task; switch accordingly.
_MULTINOMIAL_COST_RATIO = 8


class EvaluationError(ValueError):
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


@dataclass(frozen=True)
class SampledVerdicts:
    """What `sample_and_score` produced: pass/fail per sample, each task's family, and one row per completion.

    `rows` hold `task_id`, `family`, `sample` (0..k-1), `completion`, `score`, `passed` and `reason`, so a
    person can read what the model wrote next to why it failed.
    """

    passed: dict[str, list[bool]]
    families: dict[str, str]
    rows: list[dict[str, Any]] = field(repr=False)


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


def _messages(task: Mapping[str, Any]) -> list[dict[str, Any]]:
    prompt = task.get("prompt")
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, Sequence) and prompt and all(isinstance(m, Mapping) for m in prompt):
        return [dict(m) for m in prompt]
    raise EvaluationError(
        f"task {task.get('task_id', '?')}: prompt must be chat messages [{{role, content}}] or a string, "
        f"got {type(prompt).__name__}"
    )


def sample_and_score(
    model_path_or_id: str | os.PathLike[str],
    tasks: Sequence[Mapping[str, Any]],
    *,
    k: int = 1,
    max_new_tokens: int = 256,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 8,
    workers: int | None = None,
    context: VerifyContext | None = None,
) -> SampledVerdicts:
    """Sample k completions per task with the local server's engine and judge each with the task's verifier.

    Each task's prompt messages go through the tokenizer's chat template with the generation prompt, and are
    prefilled once for their k samples (`llm.generation.Engine`; a system message tasks share is prefilled once
    for all). Task i samples from its own random generator seeded `seed + i`, so the caller's global RNG is
    untouched and a rerun with the same arguments gives the same completions, whatever the batch size (on the
    same hardware and library versions). A prompt too long for the model's context gets empty samples, which
    fail, and a warning.

    Args:
        model_path_or_id: a model directory (e.g. a GRPO checkpoint or `build_tiny_model` output) or a hub id.
        tasks: task records with `task_id`, `family`, `prompt` (messages or a string) and `verifier`.
        k: completions per task (draw at least the largest k you will ask pass@k of).
        max_new_tokens: generation length cap.
        temperature: sampling temperature; 0 means greedy decoding (then the k samples are identical).
        seed: seed of the first task's sampling; task i uses `seed + i`.
        batch_size: completions per batch (a task's k samples always share one batch).
        workers: verifier threads (see `verify_many`).
        context: where verifier fixtures (SQLite files) resolve.

    Returns:
        `SampledVerdicts`: `passed` (task_id -> k booleans, ready for `evaluate`/`compare`), `families`, `rows`.

    Raises:
        EvaluationError: bad arguments, a task without `task_id`, a repeated task_id or a malformed prompt.

    Example:
        >>> sampled = sample_and_score(model_dir, eval_tasks, k=4, max_new_tokens=64)  # doctest: +SKIP
        >>> evaluate(sampled.passed, sampled.families, ks=[1, 4]).overall["pass@4"]  # doctest: +SKIP
    """
    if k < 1 or batch_size < 1 or max_new_tokens < 1:
        raise EvaluationError(
            f"k ({k}), batch_size ({batch_size}) and max_new_tokens ({max_new_tokens}) must all be at least 1"
        )
    if not math.isfinite(temperature) or temperature < 0:
        raise EvaluationError(f"temperature must be >= 0 (0 = greedy), got {temperature!r}")
    seen: set[str] = set()
    for task in tasks:
        task_id = task.get("task_id")
        if not task_id:
            raise EvaluationError("every task needs a task_id to be evaluated")
        if task_id in seen:
            raise EvaluationError(f"task {task_id} appears twice; evaluate each task once (use k for more samples)")
        seen.add(task_id)
    jobs = [(task, sample) for task in tasks for sample in range(k)]
    samples = _generate(
        model_path_or_id,
        [_messages(task) for task in tasks],
        k=k,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        seed=seed,
        batch_size=batch_size,
    )
    completions = [text for texts in samples for text in texts]
    verdicts = verify_many([task for task, _ in jobs], completions, workers=workers, context=context)
    families = {task["task_id"]: str(task.get("family") or "unknown") for task in tasks}
    passed: dict[str, list[bool]] = {task["task_id"]: [] for task in tasks}
    rows: list[dict[str, Any]] = []
    for (task, sample), completion, verdict in zip(jobs, completions, verdicts, strict=True):
        passed[task["task_id"]].append(verdict.passed)
        rows.append(
            {
                "task_id": task["task_id"],
                "family": families[task["task_id"]],
                "sample": sample,
                "completion": completion,
                "score": verdict.score,
                "passed": verdict.passed,
                "reason": verdict.reason,
            }
        )
    return SampledVerdicts(passed=passed, families=families, rows=rows)


def _generate(
    model_path_or_id: str | os.PathLike[str],
    conversations: list[list[dict[str, Any]]],
    *,
    k: int,
    max_new_tokens: int,
    temperature: float,
    seed: int,
    batch_size: int,
) -> list[list[str]]:
    """k completion texts per conversation, in order, from the local server's engine (`llm.generation`).

    Each conversation is prefilled once for its k samples, and a system message that conversations share is
    prefilled once for all of them (the engine's prefix cache). Conversation i samples with seed `seed + i`.
    """
    from llm.generation import Engine, GenerationRequest
    from training.tiny_model import load_policy

    if not conversations:
        return []
    model, tokenizer = load_policy(model_path_or_id)
    engine = Engine(model, tokenizer)
    prompts = [engine.prompt_ids(conversation) for conversation in conversations]
    texts: list[list[str]] = [[""] * k for _ in conversations]
    fits = [i for i, prompt in enumerate(prompts) if engine.fits(len(prompt), max_new_tokens)]
    if len(fits) < len(prompts):
        # Such a prompt cannot be read whole by this model, so it cannot be answered: its samples stay empty
        # and fail their verifier.
        logger.warning(
            "%d of %d prompts plus max_new_tokens=%d exceed the model's %s positions: their samples are empty",
            len(prompts) - len(fits),
            len(prompts),
            max_new_tokens,
            engine.context_length,
        )
    # Batches of prompts that start alike: sorted by their tokens, a batch's prompts share their family's system
    # message, which the engine prefills once (rows of very different lengths it prefills apart, so a long tool
    # list does not pad the short prompts beside it).
    order = sorted(fits, key=lambda i: prompts[i])
    per_batch = max(1, batch_size // k)
    done = 0
    for start in range(0, len(order), per_batch):
        indexes = order[start : start + per_batch]
        requests = [
            GenerationRequest(prompts[i], n=k, max_tokens=max_new_tokens, temperature=temperature, seed=seed + i)
            for i in indexes
        ]
        for i, result in zip(indexes, engine.generate(requests), strict=True):
            texts[i] = [completion.text for completion in result.completions]
        done += len(indexes)
        logger.info("sampled %d/%d prompts (%d completions each)", done, len(order), k)
    return texts
