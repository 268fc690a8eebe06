"""Real outputs to review: the current policy answers training tasks through the local model server, and each
answer is verified and shown with the judge's verdict on its task.

The current policy (the promoted model, else the base model) is the caller's to name, found as the pipeline finds
it (`pipeline.promoted.current_policy`: the promotion record in its file or in the production database).
`sample_outputs` picks `n` non-episode training tasks (families in turn, each family's tasks in a stable hashed
order), starts `langmodels.launcher.ModelServer` for the model on loopback, asks for one completion per task through
`langmodels.client.LLMClient` (no call cache: a review wants fresh outputs), verifies each with the task's own
verifier and attaches the judge's verdict on the task where `judged_tasks` has one. The batch is stored at
`<home>/review/outputs.jsonl` (the latest batch; labels keep their own copy of what they judged).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from core import SeedwheelError
from core.folders import is_remote
from core.tables import read_table, write_jsonl
from langmodels.client import LLMClient, Progress
from langmodels.launcher import LOCAL_REQUEST_TIMEOUT_S, ModelServer
from langmodels.types import ChatRequest, EndpointConfig
from review.labels import now
from training.evaluation import is_episode
from validators.registry import REGISTRY, VerifyContext, verify

logger = logging.getLogger(__name__)

REVIEW_FOLDER = "review"
OUTPUTS_FILE = "outputs.jsonl"
SAMPLE_TEMPLATE = "review-sample-v1"
DEFAULT_N = 60
JUDGED_VERDICTS = ("accept", "reject", "judge_error")


class ReviewInputError(SeedwheelError, ValueError):
    """The storage root lacks what a review needs (training tasks, a sampled batch); the message says what to run."""


def outputs_path(home: Path) -> Path:
    """`<home>/review/outputs.jsonl`: the batch of outputs under review."""
    return Path(home) / REVIEW_FOLDER / OUTPUTS_FILE


def local_root(home: str | os.PathLike[str]) -> Path:
    """The storage root as the local folder the review reads and writes; an object-store root is refused.

    Raises:
        ReviewInputError: `home` is an object-store URL; the message says what to copy where instead.
    """
    if is_remote(home):
        url = str(home).rstrip("/")
        raise ReviewInputError(
            f"--home {url} is an object store; the review page and review sample read and write a local folder",
            hint=f"copy {url}/{{train_tasks,judged_tasks,judge_calibration,review_queue}}.parquet into a folder "
            "and pass --home FOLDER",
        )
    return Path(home)


def training_tasks(home: Path) -> list[dict[str, Any]]:
    """The stored `train_tasks` of a storage root, as records."""
    path = Path(home) / "train_tasks.parquet"
    if not path.exists():
        raise ReviewInputError(
            f"{path}: no training tasks to sample outputs on", hint="run the flywheel first: seedwheel run --home DIR"
        )
    return read_table(path).to_dict(orient="records")


def judge_verdicts(home: Path) -> dict[str, dict[str, Any]]:
    """`{task_id: {verdict, rationale}}` from the stored `judged_tasks` (none stored yet: empty)."""
    path = Path(home) / "judged_tasks.parquet"
    if not path.exists():
        return {}
    rows = read_table(path)
    return {
        str(row["task_id"]): {"verdict": row["judge_verdict"], "rationale": row.get("judge_rationale")}
        for row in rows.to_dict(orient="records")
        if row.get("judge_verdict") in JUDGED_VERDICTS
    }


def _rank(seed: int, task_id: str) -> str:
    return hashlib.sha256(f"{seed}:{task_id}".encode()).hexdigest()


def pick_tasks(tasks: Sequence[Mapping[str, Any]], n: int, seed: int = 0) -> list[Mapping[str, Any]]:
    """`n` non-episode tasks, families in turn (alphabetical), each family's tasks in a hashed order of `seed`.

    Example:
        >>> tasks = [{"task_id": str(i), "family": "ab"[i % 2], "verifier": {"name": "x"}} for i in range(6)]
        >>> [t["family"] for t in pick_tasks(tasks, 3)]
        ['a', 'b', 'a']
    """
    by_family: dict[str, list[Mapping[str, Any]]] = {}
    for task in tasks:
        if not is_episode(task):
            by_family.setdefault(str(task["family"]), []).append(task)
    queues = [sorted(rows, key=lambda t: _rank(seed, str(t["task_id"]))) for _, rows in sorted(by_family.items())]
    picked: list[Mapping[str, Any]] = []
    while len(picked) < n and any(queues):
        for queue in queues:
            if queue and len(picked) < n:
                picked.append(queue.pop(0))
    return picked


def _spec(task: Mapping[str, Any]) -> dict[str, Any]:
    spec = task["verifier"]
    spec = dict(json.loads(spec) if isinstance(spec, str) else spec)
    spec.setdefault("version", REGISTRY.get(spec["name"]).version)
    return spec


def sample_outputs(
    model: str,
    tasks: Sequence[Mapping[str, Any]],
    *,
    log_dir: Path,
    n: int = DEFAULT_N,
    seed: int = 0,
    max_tokens: int = 256,
    temperature: float = 0.7,
    context: VerifyContext | None = None,
    judged: Mapping[str, Mapping[str, Any]] | None = None,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Sample one output per picked task from `model` on a local server, verify each, attach the judge's verdict.

    Args:
        model: a model directory or id (`current_policy`).
        tasks: task records (`training_tasks`).
        log_dir: where the server's log goes.
        n: outputs to sample (the practice: 50 to 100).
        seed: picks the tasks and seeds the sampling.
        max_tokens, temperature: the sampling.
        context: where verifier fixtures resolve.
        judged: `judge_verdicts(home)`.
        progress: called as `progress(done, total)` as outputs come back.

    Returns:
        One record per output: `id`, `model`, `sampled_at`, `task_id`, `family`, `prompt`, `verifier` (with its
        version), `completion`, `verdict` (`score`, `passed`, `reason`) and `judge` (None where none exists).
    """
    picked = pick_tasks(tasks, n, seed)
    if not picked:
        raise ReviewInputError("no non-episode training task to sample on", hint="run the flywheel on more seeds")
    with ModelServer(model, log_dir=log_dir) as server:
        config = EndpointConfig(server.base_url, server.model, max_concurrency=8, timeout_s=LOCAL_REQUEST_TIMEOUT_S)
        client = LLMClient(config, None)
        params = {"temperature": temperature, "max_tokens": max_tokens}
        requests = [
            ChatRequest(list(task["prompt"]), SAMPLE_TEMPLATE, params={**params, "seed": seed + i})
            for i, task in enumerate(picked)
        ]
        results = client.complete_many_sync(requests, progress)
    sampled_at = now()
    records = []
    for task, result in zip(picked, results, strict=True):
        completion = result.text or ""
        spec = _spec(task)
        verdict = verify({**task, "verifier": spec}, completion, context=context)
        reason = verdict.reason if result.error is None else f"no_output: {result.error}"
        records.append(
            {
                "id": _rank(seed, f"{model}:{task['task_id']}")[:16],
                "model": str(model),
                "sampled_at": sampled_at,
                "task_id": str(task["task_id"]),
                "family": str(task["family"]),
                "prompt": list(task["prompt"]),
                "verifier": spec,
                "completion": completion,
                "verdict": {"score": verdict.score, "passed": verdict.passed, "reason": reason},
                "judge": dict(judged[str(task["task_id"])]) if judged and str(task["task_id"]) in judged else None,
            }
        )
    logger.info("sampled %d outputs of %s", len(records), model)
    return records


def write_outputs(home: Path, records: Sequence[Mapping[str, Any]]) -> Path:
    """Store a batch as `<home>/review/outputs.jsonl` (atomically; it replaces the previous batch)."""
    path = outputs_path(home)
    write_jsonl(records, path)
    return path


def read_outputs(home: Path) -> list[dict[str, Any]]:
    """The batch under review (none sampled yet: empty)."""
    path = outputs_path(home)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
