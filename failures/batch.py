"""One failure log end to end: parse, redact every record, derive tasks and review items, and the tables it stores
(what an asset calls)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from core.tables import frame_from_records
from failures.derive import failure_task
from failures.log import RECORD_FIELDS, FailureReject, ParseLimits, parse_failure_log
from failures.redaction import RedactionConfig, RedactionReport, redact
from failures.traffic import TRAFFIC_COLUMNS, is_failure, traffic_rows
from validators.registry import VerifyContext

REJECT_COLUMNS = ("source", "line", "reason_code", "reason", "raw")  # `FailureReject`'s fields, a table's columns


@dataclass
class FailureBatch:
    """Everything one log produced: redacted records (every interaction, failed or not), rejects, candidate tasks
    and review items (from the failures), redaction counts."""

    records: list[dict[str, Any]] = field(default_factory=list)
    rejects: list[FailureReject] = field(default_factory=list)
    tasks: list[dict[str, Any]] = field(default_factory=list)
    review: list[dict[str, Any]] = field(default_factory=list)
    redaction: RedactionReport = field(default_factory=RedactionReport)

    @property
    def failures(self) -> list[dict[str, Any]]:
        """The records that are failures (`failures.traffic.is_failure`): what goes on to tasks and review."""
        return [record for record in self.records if is_failure(record)]

    def summary(self) -> dict[str, Any]:
        """Counts for materialization metadata: `records`, `rejects`, `tasks`, `review`, `redacted` (by kind).

        Example:
            >>> FailureBatch().summary()
            {'records': 0, 'rejects': 0, 'tasks': 0, 'review': 0, 'redacted': {}}
        """
        return {
            "records": len(self.records),
            "rejects": len(self.rejects),
            "tasks": len(self.tasks),
            "review": len(self.review),
            "redacted": dict(self.redaction.counts),
        }


def process_failure_log(
    path_or_lines: str | os.PathLike[str] | Iterable[str | bytes],
    source_name: str | None = None,
    *,
    redaction: RedactionConfig | None = None,
    limits: ParseLimits | None = None,
    context: VerifyContext | None = None,
) -> FailureBatch:
    """Parse a failure (or traffic) log, redact each record, and derive a task or a review item from each failure.

    Nothing unredacted leaves this function: records are redacted before derivation, and reject rows carry a
    redacted preview only.

    Args:
        path_or_lines: a JSONL file path, or its lines.
        source_name: the name used in origins (`name:line`); the file name when None.
        redaction: redaction thresholds and the optional name detector.
        limits: line size and nesting limits.
        context: where SQLite fixtures of derived sql tasks resolve (the seeds folder).

    Returns:
        A `FailureBatch`; `redaction` sums the counts of every record.

    Example:
        >>> batch = process_failure_log(['{"messages": [{"role": "user", "content": "Mail ann@example.com"}]}'])
        >>> batch.summary()
        {'records': 1, 'rejects': 0, 'tasks': 0, 'review': 1, 'redacted': {'EMAIL': 1}}
    """
    redaction = redaction or RedactionConfig()
    parsed = parse_failure_log(path_or_lines, source_name, limits=limits, redaction=redaction)
    batch = FailureBatch(rejects=parsed.rejects)
    for raw in parsed.records:
        record, report = redact(raw, redaction)
        batch.records.append(record)
        batch.redaction += report
        if not is_failure(record):
            continue  # a success or an unknown outcome is traffic, not a failure to learn from
        derived = failure_task(record, context=context)
        if derived.task is not None:
            batch.tasks.append(derived.task)
        elif derived.review is not None:  # exactly one of the two is set
            batch.review.append(derived.review)
    return batch


@dataclass(frozen=True)
class LogTables:
    """What one log stores: its failures (redacted records), its traffic (a text-free row per interaction) and its
    rejected lines."""

    failures: pd.DataFrame
    traffic: pd.DataFrame
    rejects: pd.DataFrame


def log_tables(batch: FailureBatch, log: str) -> LogTables:
    """One processed log as the tables stored per log file.

    Args:
        batch: the log's `process_failure_log` result.
        log: the log's name (its file name), which every traffic row carries.

    Returns:
        `failures` (`RECORD_FIELDS` and `redaction`, failures only), `traffic` (`TRAFFIC_COLUMNS`, every
        interaction) and `rejects` (`REJECT_COLUMNS`); each keeps its columns when it has no rows.

    Example:
        >>> batch = process_failure_log(['{"messages": [{"role": "user", "content": "2+2?"}], "output": "5"}', "{"])
        >>> tables = log_tables(batch, "n1.jsonl")
        >>> len(tables.failures), tables.traffic["log"].tolist(), tables.rejects["reason_code"].tolist()
        (1, ['n1.jsonl'], ['invalid_json'])
    """
    return LogTables(
        failures=frame_from_records(batch.failures, (*RECORD_FIELDS, "redaction")),
        traffic=pd.DataFrame(traffic_rows(batch.records, log), columns=TRAFFIC_COLUMNS),
        rejects=pd.DataFrame([vars(r) for r in batch.rejects], columns=REJECT_COLUMNS),
    )


def derive_failure_tasks(
    records: Iterable[Mapping[str, Any]], *, context: VerifyContext | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Candidate tasks and review items from stored (redacted) failure records, e.g. every file's `failure_logs`.

    Each record becomes a task when a verifier can be derived from it (`failure_task`), else a review item. The
    same failure logged twice (in two files, or a line sent again) gives the same task_id and is one task: the
    last one read, in the place of the first.

    Args:
        records: redacted failure records (`redact` output).
        context: where SQLite fixtures of derived sql tasks resolve (the seeds folder).

    Returns:
        `(tasks, review items)`, in record order.

    Raises:
        UnredactedRecordError: a record was never redacted.

    Example:
        >>> batch = process_failure_log(['{"messages": [{"role": "user", "content": "2+2?"}], "output": "5"}'])
        >>> tasks, review = derive_failure_tasks(batch.records)
        >>> len(tasks), [item["reason_code"] for item in review]
        (0, ['no_expected'])
    """
    tasks: dict[str, dict[str, Any]] = {}
    review: list[dict[str, Any]] = []
    for record in records:
        derived = failure_task(record, context=context)
        if derived.task is not None:
            tasks[derived.task["task_id"]] = derived.task
        elif derived.review is not None:  # exactly one of the two is set
            review.append(derived.review)
    return list(tasks.values()), review
