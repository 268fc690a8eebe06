"""Offline reward audit: judge saved completions with their tasks' verifiers and say how they fared.

This is the function behind `seedwheel verify TASKS COMPLETIONS.jsonl`: before training on a reward, run
it over real model outputs and read the reasons (a reward that fails good answers or passes bad ones shows up
here as a surprising reason count). Inputs are JSON Lines:

- tasks: task records, at least `{"task_id": ..., "verifier": {"name": ..., "params": {...}}}` (or a Parquet
  table of them, or seed files, which the seed loader turns into task records);
- completions: `{"task_id": ..., "completion": "<text>" | {message} | [messages]}`, any number per task.

A row of an `episode` task also says how its episode ended and what it changed (`end_reason`, `changes`: the
state diff, one line per record), from a replay in a fresh environment; `seedwheel replay` prints the whole
transcript.

Input mistakes raise `AuditInputError` naming the file, the line and the fix. A verifier that raises on one
completion does not stop the audit: that row gets `passed: false` and reason `verifier_error: ...`.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core import SeedwheelError
from core.tables import read_table, records_from_frame
from validators.registry import VerifyContext, spec_problems, verify
from validators.seeds import load_seeds
from validators.verifiers.episode import Episode, replay

logger = logging.getLogger(__name__)


class AuditInputError(SeedwheelError, ValueError):
    """A tasks or completions file the audit cannot read; the message names the file, the line and the fix."""

    def __init__(self, path: Path, line: int | None, problem: str, fix: str):
        self.path = path
        self.line = line
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}", hint=fix)


@dataclass(frozen=True)
class VerifierStats:
    """How completions judged by one verifier fared."""

    rows: int
    passed: int
    mean_score: float

    @property
    def pass_rate(self) -> float:
        return self.passed / self.rows if self.rows else 0.0


@dataclass(frozen=True)
class AuditSummary:
    """Totals over an audit: rows, passes, reason codes by count, and the same per verifier."""

    rows: int
    passed: int
    mean_score: float
    reasons: dict[str, int] = field(default_factory=dict)  # reason code -> count, most common first
    verifiers: dict[str, VerifierStats] = field(default_factory=dict)  # by verifier name

    @property
    def pass_rate(self) -> float:
        return self.passed / self.rows if self.rows else 0.0

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data, e.g. for `MaterializeResult(metadata=...)` or `--json` output."""
        data = asdict(self)
        data["pass_rate"] = self.pass_rate
        for name, stats in self.verifiers.items():
            data["verifiers"][name]["pass_rate"] = stats.pass_rate
        return data


@dataclass(frozen=True)
class AuditReport:
    """One verdict row per readable completion row, their summary, and the completion rows that could not be read
    (each an `AuditInputError` naming its file, line and fix), in file order."""

    rows: list[dict[str, Any]]
    summary: AuditSummary
    rejected: list[AuditInputError] = field(default_factory=list)


def _read_jsonl(
    path: Path, kind: str, rejected: list[AuditInputError] | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line. A line that is not a UTF-8 JSON object is an input error:
    raised, or, given `rejected`, added to it and skipped."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise AuditInputError(path, None, f"cannot open the {kind} file ({exc.strerror})", "check the path") from exc
    with handle:
        for line_no, line in enumerate(handle, start=1):
            try:
                record = _json_object(path, line_no, line)
            except AuditInputError as error:
                _reject(error, rejected)
                continue
            if record is not None:
                yield line_no, record


def _json_object(path: Path, line_no: int, line: bytes) -> dict[str, Any] | None:
    """The JSON object on one line, None for a blank line; anything else is an `AuditInputError`."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        problem = f"byte 0x{line[exc.start : exc.start + 1].hex()} at col {exc.start + 1} is not UTF-8"
        raise AuditInputError(path, line_no, problem, "save the file as UTF-8") from None
    if not text.strip():
        return None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AuditInputError(
            path, line_no, f"not valid JSON ({exc.msg} at col {exc.colno})", "write one JSON object per line"
        ) from None
    if not isinstance(record, dict):
        raise AuditInputError(
            path, line_no, f"expected a JSON object, got {type(record).__name__}", "write one object per line"
        )
    return record


def _reject(error: AuditInputError, rejected: list[AuditInputError] | None) -> None:
    """Raise `error`, or keep it in `rejected` when the caller collects bad rows."""
    if rejected is None:
        raise error
    rejected.append(error)


def _require(record: Mapping[str, Any], key: str, path: Path, line: int, fix: str) -> Any:
    if key not in record:
        raise AuditInputError(path, line, f"missing field '{key}'", fix)
    return record[key]


def load_tasks(path: str | Path, *, context: VerifyContext | None = None) -> dict[str, dict[str, Any]]:
    """Task records by task_id, each verifier spec checked (name registered, params valid).

    Args:
        path: a JSON Lines file of task records, a Parquet table the pipeline wrote (e.g. `seed_tasks.parquet`),
            or seed files: a folder of them, or one `.yaml` file (loaded and checked by the seed loader).
        context: where fixture paths resolve while checking params.

    Returns:
        task_id -> task record.

    Raises:
        AuditInputError: bad JSON, a missing `task_id`/`verifier`, a repeated task_id, a bad verifier spec, or
            a seed file with problems.

    Example:
        >>> tasks = load_tasks("seeds")  # doctest: +SKIP
    """
    path = Path(path)
    if path.is_dir() or path.suffix in (".yaml", ".yml"):
        return _load_seed_tasks(path, context)
    records: Iterable[tuple[int, dict[str, Any]]]
    if path.suffix == ".parquet":
        records = enumerate(records_from_frame(read_table(path)), start=1)
    else:
        records = _read_jsonl(path, "tasks")
    tasks: dict[str, dict[str, Any]] = {}
    first_line: dict[str, int] = {}
    for line, record in records:
        task_id = _require(record, "task_id", path, line, "each task record needs its task_id")
        spec = _require(record, "verifier", path, line, "each task record needs a verifier {name, params}")
        if not isinstance(spec, dict) or "name" not in spec:
            raise AuditInputError(
                path, line, "verifier must be an object with a 'name'", 'e.g. {"name": ..., "params": {...}}'
            )
        if task_id in tasks:
            raise AuditInputError(
                path, line, f"task_id {task_id} repeats line {first_line[task_id]}", "keep one record per task"
            )
        problems = spec_problems(spec, context)
        if problems:
            raise AuditInputError(path, line, f"task {task_id}: " + "; ".join(problems), "fix the verifier spec")
        tasks[task_id] = record
        first_line[task_id] = line
    return tasks


def _load_seed_tasks(path: Path, context: VerifyContext | None) -> dict[str, dict[str, Any]]:
    if not path.exists():
        raise AuditInputError(path, None, "no such tasks file or seeds folder", "check the path")
    seeds_dir = path if path.is_dir() else path.parent.parent
    seed_set = load_seeds([path], context=context or VerifyContext(seeds_dir=seeds_dir))
    if seed_set.problems:
        first = seed_set.problems[0]
        raise AuditInputError(
            Path(first.path),
            first.line,
            f"{first.problem} ({len(seed_set.problems)} problems in all)",
            "run `seedwheel seeds validate` and fix the seeds first",
        )
    return {task["task_id"]: task for task in seed_set.tasks}


def completion_rows(
    completions_path: Path,
    tasks: Mapping[str, Any],
    tasks_path: Path,
    rejected: list[AuditInputError] | None = None,
) -> Iterator[tuple[int, str, str | dict[str, Any] | list[Any]]]:
    """`(line, task_id, completion)` for each row of a completions file, each row checked against `tasks`.

    A bad row is raised, or, given `rejected`, added to it and skipped, so every bad row is reported at once.

    Raises:
        AuditInputError: (without `rejected`) a malformed line, a missing field, a task_id absent from `tasks`
            (read from `tasks_path`), or a completion that is neither text nor chat messages; and, either way, an
            unreadable file.
    """
    for line, record in _read_jsonl(completions_path, "completions", rejected):
        try:
            task_id, completion = _completion(record, completions_path, line, tasks, tasks_path)
        except AuditInputError as error:
            _reject(error, rejected)
            continue
        yield line, task_id, completion


def _completion(
    record: Mapping[str, Any], path: Path, line: int, tasks: Mapping[str, Any], tasks_path: Path
) -> tuple[str, str | dict[str, Any] | list[Any]]:
    fix = 'each row looks like {"task_id": "...", "completion": "..."}'
    task_id = _require(record, "task_id", path, line, fix)
    completion = _require(record, "completion", path, line, fix)
    if task_id not in tasks:
        raise AuditInputError(
            path, line, f"task_id {task_id} is not in {tasks_path}", "audit against the matching tasks file"
        )
    if not isinstance(completion, str | dict | list):
        raise AuditInputError(path, line, f"completion is a {type(completion).__name__}", "give text or chat messages")
    return task_id, completion


def audit(
    tasks_path: str | Path, completions_path: str | Path, *, context: VerifyContext | None = None
) -> AuditReport:
    """Judge every completion row with its task's verifier.

    Args:
        tasks_path: JSON Lines of task records.
        completions_path: JSON Lines of `{"task_id", "completion"}` rows (several per task allowed).
        context: where fixture paths resolve; defaults as in `verify`.

    Returns:
        An `AuditReport`: rows `{"line", "task_id", "verifier", "score", "passed", "reason"}` (plus `end_reason`
        and `changes` for `episode` tasks) in file order, their `AuditSummary`, and every completion row that
        could not be read (not UTF-8 or JSON, a missing field, a task_id absent from the tasks file), with its fix.

    Raises:
        AuditInputError: a tasks file with a bad record, or a file that cannot be opened.

    Example:
        >>> report = audit("tasks.jsonl", "completions.jsonl")  # doctest: +SKIP
        >>> print(format_summary(report.summary))  # doctest: +SKIP
    """
    tasks_path, completions_path = Path(tasks_path), Path(completions_path)
    tasks = load_tasks(tasks_path, context=context)
    rows: list[dict[str, Any]] = []
    rejected: list[AuditInputError] = []
    for line, task_id, completion in completion_rows(completions_path, tasks, tasks_path, rejected):
        task = tasks[task_id]
        try:
            verdict = verify(task, completion, context=context)
            score, passed, reason = verdict.score, verdict.passed, verdict.reason
        except Exception as exc:  # one broken verifier call must not hide the other rows' results
            logger.warning(
                "%s:%d task %s: verifier raised %s: %s", completions_path, line, task_id, type(exc).__name__, exc
            )
            score, passed, reason = 0.0, False, f"verifier_error: {type(exc).__name__}: {exc}"
        row = {
            "line": line,
            "task_id": task_id,
            "verifier": task["verifier"]["name"],
            "score": score,
            "passed": passed,
            "reason": reason,
        }
        if row["verifier"] == Episode.name and not reason.startswith("verifier_error"):
            played = replay(task["verifier"]["params"], completion, context, prompt=task.get("prompt", ()))
            row.update(end_reason=played.end_reason, changes=[change.describe() for change in played.changes])
        rows.append(row)
    return AuditReport(rows=rows, summary=summarize(rows), rejected=rejected)


def summarize(rows: Sequence[Mapping[str, Any]]) -> AuditSummary:
    """Totals over verdict rows (as `audit` makes them).

    Example:
        >>> summarize([{"verifier": "numeric_answer", "score": 1.0, "passed": True, "reason": "ok"}]).pass_rate
        1.0
    """
    reasons = Counter(str(r["reason"]).split(":", 1)[0] for r in rows)
    by_verifier: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_verifier.setdefault(row["verifier"], []).append(row)
    return AuditSummary(
        rows=len(rows),
        passed=sum(bool(r["passed"]) for r in rows),
        mean_score=_mean([float(r["score"]) for r in rows]),
        reasons=dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        verifiers={
            name: VerifierStats(
                rows=len(group),
                passed=sum(bool(r["passed"]) for r in group),
                mean_score=_mean([float(r["score"]) for r in group]),
            )
            for name, group in sorted(by_verifier.items())
        },
    )


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def format_summary(summary: AuditSummary) -> str:
    """The summary as a plain-text table for a terminal.

    Example:
        >>> rows = [{"verifier": "numeric_answer", "score": 1.0, "passed": True, "reason": "ok"}]
        >>> print(format_summary(summarize(rows)))
        rows 1, passed 1 (100.0%), mean score 1.000
        <BLANKLINE>
        verifier        rows  passed  pass rate  mean score
        numeric_answer     1       1     100.0%       1.000
        <BLANKLINE>
        reason  count
        ok          1
    """
    lines = [
        f"rows {summary.rows}, passed {summary.passed} ({summary.pass_rate:.1%}), mean score {summary.mean_score:.3f}"
    ]
    if summary.verifiers:
        width = max(len("verifier"), *(len(n) for n in summary.verifiers))
        lines += ["", f"{'verifier':<{width}}  {'rows':>4}  {'passed':>6}  {'pass rate':>9}  {'mean score':>10}"]
        for name, stats in summary.verifiers.items():
            rates = f"{stats.pass_rate:>9.1%}  {stats.mean_score:>10.3f}"
            lines.append(f"{name:<{width}}  {stats.rows:>4}  {stats.passed:>6}  {rates}")
    if summary.reasons:
        width = max(len("reason"), *(len(r) for r in summary.reasons))
        lines += ["", f"{'reason':<{width}}  {'count':>5}"]
        lines += [f"{reason:<{width}}  {count:>5}" for reason, count in summary.reasons.items()]
    return "\n".join(lines)
