"""Held-out evaluation of a checkpoint: sample k completions per task and score each with the verifier registry.

`sample_and_score(model, tasks, k=...)` draws k completions per task with the local server's batched engine
(`langmodels.generation`: the task's prompt messages through the tokenizer's chat template, prefilled once for its
k samples) and judges each with the task's own verifier (`validators.batch.verify_many`), the same one that
validated the data and was the reward. Its verdicts feed the statistics of `training.stats`: `evaluate`
(pass@k per family with task-bootstrap intervals) and `compare` (the paired candidate-vs-baseline difference
`training.promotion` gates on).

This module samples single-turn tasks only: an `episode` task is a conversation with its environment, which
`training.episodes` plays turn by turn. `training.episodes.play_and_score` takes any mix of tasks, sends each kind
to its sampler and merges the verdicts back in task order; the pipeline's profile and gate go through it.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from training.stats import EvaluationError
from validators.batch import verify_many
from validators.registry import VerifyContext
from validators.verifiers.episode import Episode

if TYPE_CHECKING:  # torch and the engine load on first use
    from langmodels.generation import Engine

logger = logging.getLogger(__name__)


def is_episode(task: Mapping[str, Any]) -> bool:
    """Whether a task is a multi-turn episode (`training.episodes` plays it), not a single-turn one."""
    return (task.get("verifier") or {}).get("name") == Episode.name


class EvalTaskCounts(TypedDict):
    """The tasks an evaluation scores: all of them, the held-out production failures among them, and the `episode`
    tasks (played turn by turn in their environments)."""

    tasks: int
    failure_eval_tasks: int
    episode_tasks: int


def eval_task_counts(tasks: Sequence[Mapping[str, Any]], failure_ids: Collection[str]) -> EvalTaskCounts:
    """How many of `tasks` there are, how many are production failures (`failure_ids`), how many are episodes.

    Example:
        >>> tasks = [{"task_id": "a", "verifier": {"name": "episode"}}, {"task_id": "b", "verifier": {"name": "sql"}}]
        >>> eval_task_counts(tasks, {"b", "z"})
        {'tasks': 2, 'failure_eval_tasks': 1, 'episode_tasks': 1}
    """
    return {
        "tasks": len(tasks),
        "failure_eval_tasks": len(set(failure_ids) & {t["task_id"] for t in tasks}),
        "episode_tasks": sum(is_episode(task) for task in tasks),
    }


@dataclass(frozen=True)
class SampledVerdicts:
    """What `sample_and_score` produced: pass/fail per sample, each task's family, and one row per completion.

    `rows` hold `task_id`, `family`, `sample` (0..k-1), `completion`, `score`, `passed` and `reason`, so a
    person can read what the model wrote next to why it failed (`training.episodes.play_and_score` adds an
    episode's `turns` and `end_reason`).
    """

    passed: dict[str, list[bool]]
    families: dict[str, str]
    rows: list[dict[str, Any]] = field(repr=False)


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
    prefilled once for their k samples (`langmodels.generation.Engine`; a system message tasks share is prefilled once
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
        EvaluationError: bad arguments, a task without `task_id`, a repeated task_id, a malformed prompt or an
            `episode` task (`training.episodes.play_and_score` takes any mix of tasks).

    Example:
        >>> sampled = sample_and_score(model_dir, eval_tasks, k=4, max_new_tokens=64)  # doctest: +SKIP
        >>> evaluate(sampled.passed, sampled.families, ks=[1, 4]).overall["pass@4"]  # doctest: +SKIP
    """
    check_sampling(tasks, k=k, batch_size=batch_size, max_new_tokens=max_new_tokens, temperature=temperature)
    episodes = [task["task_id"] for task in tasks if is_episode(task)]
    if episodes:  # in one turn the model would write every call blind, never seeing a tool's result
        raise EvaluationError(
            f"{len(episodes)} `episode` task(s), e.g. {episodes[0]}: an episode is played turn by turn in its "
            "environment, not sampled in one turn; use training.episodes.play_and_score (any mix of tasks)"
        )
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


def check_sampling(
    tasks: Sequence[Mapping[str, Any]], *, k: int, batch_size: int, max_new_tokens: int, temperature: float
) -> None:
    """Refuse sampling arguments that cannot work, before any model loads: counts below 1, a negative or
    non-finite temperature, a task without an id or listed twice (its samples would be counted twice).

    Raises:
        EvaluationError: naming the argument and the fix.
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
            raise EvaluationError("every task needs a task_id to be sampled")
        if task_id in seen:
            raise EvaluationError(f"task {task_id} appears twice; sample each task once (use k for more samples)")
        seen.add(task_id)


def readable_in_order(engine: Engine, prompts: Sequence[list[int]], max_new_tokens: int, what: str) -> list[int]:
    """The indexes of the `prompts` (token ids) the engine's model can read whole with `max_new_tokens` more, sorted
    by their tokens; the others are logged (as `what`: "prompts", "episodes") and cannot be answered.

    Sorted, a batch's prompts start alike and share their family's system message, which the engine prefills once
    (rows of very different lengths it prefills apart, so a long tool list does not pad the short prompts beside
    it).
    """
    fits = [i for i, prompt in enumerate(prompts) if engine.fits(len(prompt), max_new_tokens)]
    if len(fits) < len(prompts):
        logger.warning(
            "%d of %d %s plus max_new_tokens=%d exceed the model's %s positions: their samples are empty",
            len(prompts) - len(fits),
            len(prompts),
            what,
            max_new_tokens,
            engine.context_length,
        )
    return sorted(fits, key=lambda i: prompts[i])


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
    """k completion texts per conversation, in order, from the local server's engine (`langmodels.generation`).

    Each conversation is prefilled once for its k samples, and a system message that conversations share is
    prefilled once for all of them (the engine's prefix cache). Conversation i samples with seed `seed + i`.
    """
    from langmodels.generation import Engine, GenerationRequest
    from training.tiny_model import load_policy

    if not conversations:
        return []
    model, tokenizer = load_policy(model_path_or_id)
    engine = Engine(model, tokenizer)
    prompts = [engine.prompt_ids(conversation) for conversation in conversations]
    texts: list[list[str]] = [[""] * k for _ in conversations]
    order = readable_in_order(engine, prompts, max_new_tokens, "prompts")  # the others' samples stay empty
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
