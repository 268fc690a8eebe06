"""The stand-in app: answer a night of requests through an OpenAI-compatible endpoint, check each answer with the
task's verifier, and write each interaction as a traffic-log line (the format in `failures/__init__.py`).

What it logs is what a team's app would: the conversation, the answer, the model that served it, the outcome
(the verifier's verdict: `passed` or `failed`; an endpoint error is a `failed` interaction with its `error`), a
timestamp, and the gold data it knows (`failures.failure_fields`), so a failure can become a task again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import PurePath
from typing import Any

from failures import failure_fields
from langmodels import ChatRequest, LLMClient
from training.checkpoints import FINAL_DIRNAME
from validators.batch import verify_many
from validators.registry import VerifyContext

logger = logging.getLogger(__name__)

APP_NAME = "seedwheel-simulate"
# The app's prompt is the task's own; this names how requests are sent, for the call cache.
APP_TEMPLATE = "simulate-app-v1"
# Folder names a training run puts its weights under (its trainer's output_dir, then the final weights), which
# name no model.
_GENERIC_FOLDERS = frozenset({"output", FINAL_DIRNAME})


def model_label(model: str) -> str:
    """The model as a traffic log names it: a training run's stage and digest (`.../grpo/1a2b/output/final` ->
    `grpo-1a2b`), else the last part of its path or id.

    Example:
        >>> model_label("/srv/training/grpo/14b45758/output/final"), model_label("HuggingFaceTB/SmolLM2-135M-Instruct")
        ('grpo-14b45758', 'SmolLM2-135M-Instruct')
    """
    parts = list(PurePath(model).parts)
    generic = 0
    while len(parts) > 2 and parts[-1] in _GENERIC_FOLDERS:
        parts.pop()
        generic += 1
    return "-".join(parts[-2:]) if generic else parts[-1]


def traffic_line(
    task: Mapping[str, Any], answer: str, *, passed: bool, model: str, night: int, when: datetime, error: str | None
) -> dict[str, Any]:
    """One interaction as a traffic-log record.

    Example:
        >>> task = {"task_id": "t1", "family": "arithmetic", "prompt": [{"role": "user", "content": "2+2?"}],
        ...         "verifier": {"name": "numeric_answer", "params": {"answer": 4}}}
        >>> line = traffic_line(task, "5", passed=False, model="base", night=1, when=datetime(2026, 12, 6), error=None)
        >>> line["outcome"], line["expected"], line["source"]["night"]
        ('failed', {'answer': 4}, 1)
    """
    fields = failure_fields(task)
    if fields is None:
        raise ValueError(f"task {task['task_id']}: its verifier cannot be logged (failures.failure_fields is None)")
    record: dict[str, Any] = {
        "messages": [dict(m) for m in task["prompt"]],
        "output": answer,
        "model": model,
        "outcome": "passed" if passed else "failed",
        "timestamp": when.isoformat(),
        "family": task["family"],
        "source": {"app": APP_NAME, "night": night, "request": task["task_id"]},
        "expected": fields["expected"],
    }
    if fields["tools"]:
        record["tools"] = fields["tools"]
    if error is not None:
        record["error"] = error
    return record


def serve_night(
    client: LLMClient,
    tasks: Sequence[Mapping[str, Any]],
    *,
    model: str,
    night: int,
    clock: Callable[[], datetime],
    context: VerifyContext | None = None,
    params: Mapping[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """Answer each task's prompt through `client`, verify each answer, and return the night's traffic-log records.

    Args:
        client: the endpoint the app answers with (its model is the one deployed).
        tasks: the night's requests (pool tasks).
        model: the served model's name in the log (`model_label`).
        night: the night's number, kept in each record's `source`.
        clock: the time each interaction is stamped with, e.g. `lambda: datetime.now(UTC)`.
        context: where the verifiers' fixtures resolve (the seeds folder).
        params: generation overrides per request (`temperature`, `max_tokens`, ...).
        progress: called with (answered, total) as answers arrive.

    Returns:
        One record per task, in task order.
    """
    requests = [ChatRequest(task["prompt"], APP_TEMPLATE, params=dict(params or {})) for task in tasks]
    results = client.complete_many_sync(requests, progress)
    answers = [result.text or "" for result in results]
    verdicts = verify_many(tasks, answers, context=context)
    records = []
    for task, result, answer, verdict in zip(tasks, results, answers, verdicts, strict=True):
        error = None if result.error is None else f"{result.error}: {result.detail or ''}".strip(": ")
        passed = verdict.passed and error is None
        records.append(traffic_line(task, answer, passed=passed, model=model, night=night, when=clock(), error=error))
    failed = sum(record["outcome"] == "failed" for record in records)
    logger.info("night %d: %s answered %d requests, %d failed", night, model, len(records), failed)
    return records
