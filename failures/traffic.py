"""Production traffic: every logged interaction, with the model that served it and its outcome, counted per model.

A traffic log is a failure log whose lines also carry `model` and `outcome` (`failures.log.OUTCOMES`); the
failures among them (`failed`, `corrected`) go on to `failure_tasks` as before. This module keeps one row per
interaction without any of its text (`traffic_rows`), and turns those rows into failure rates with Wilson
intervals, per log file ("night"), model and family (`rate_table`), arranged per model and per night for a
report (`rate_report`): the number a team watches as versions are deployed.

The failure rate counts only interactions whose outcome is known: an `unknown` is neither a failure nor a
success, and it is reported beside the rate (`unknown`), never folded into either side.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from statistics import NormalDist
from typing import Any

from failures.derive import infer_family
from failures.log import FAILED_OUTCOMES

TRAFFIC_COLUMNS = ("interaction_id", "origin", "log", "timestamp", "model", "family", "outcome")
RATE_COLUMNS = (
    "night", "log", "model", "family", "served", "failed", "unknown", "failure_rate", "failure_rate_low",
    "failure_rate_high",
)  # fmt: skip
ALL = "all"
UNKNOWN_MODEL = "unknown"


def is_failure(record: Mapping[str, Any]) -> bool:
    """Whether a log record is a failure (its outcome `failed` or `corrected`), i.e. goes on to `failure_tasks`.

    Example:
        >>> is_failure({"outcome": "passed"}), is_failure({"outcome": "corrected"})
        (False, True)
    """
    return record["outcome"] in FAILED_OUTCOMES


def traffic_rows(records: Iterable[Mapping[str, Any]], log: str) -> list[dict[str, Any]]:
    """One row per logged interaction (`TRAFFIC_COLUMNS`): ids, where, when, which model, family and outcome.

    The rows hold no text of the interaction (the family is inferred from it), so they cannot carry PII.

    Args:
        records: parsed log records (`failures.log.parse_failure_log`), redacted or not.
        log: the log's name (the file name: one file per night, or per any period a team chooses).

    Example:
        >>> record = {"failure_id": "f1", "origin": "n1.jsonl:1", "timestamp": None, "model": "v2", "family": "sql",
        ...           "outcome": "passed"}
        >>> traffic_rows([record], "n1.jsonl")[0]["outcome"]
        'passed'
    """
    return [
        {
            "interaction_id": record["failure_id"],
            "origin": record["origin"],
            "log": log,
            "timestamp": record["timestamp"],
            "model": record["model"] or UNKNOWN_MODEL,
            "family": infer_family(record),
            "outcome": record["outcome"],
        }
        for record in records
    ]


def wilson_interval(failures: int, known: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a rate `failures / known`: honest at 0 of n and n of n, unlike the normal one.

    Args:
        failures: how many of `known` failed.
        known: interactions whose outcome is known; (0, 1) when there are none.
        confidence: the interval's coverage, in (0, 1).

    Raises:
        ValueError: counts out of order, or a confidence outside (0, 1).

    Example:
        >>> [round(x, 3) for x in wilson_interval(0, 20)]
        [0.0, 0.161]
    """
    if not 0 <= failures <= known:
        raise ValueError(f"failures ({failures}) must be between 0 and the known outcomes ({known})")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence ({confidence}) must be between 0 and 1, e.g. 0.95")
    if known == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    rate = failures / known
    centre = (rate + z * z / (2 * known)) / (1 + z * z / known)
    half = z * math.sqrt(rate * (1 - rate) / known + z * z / (4 * known * known)) / (1 + z * z / known)
    # Exact at the ends (0 of n, n of n), where rounding would leave a 1e-17.
    return (0.0 if failures == 0 else centre - half), (1.0 if failures == known else centre + half)


def rate_table(rows: Sequence[Mapping[str, Any]], confidence: float = 0.95) -> list[dict[str, Any]]:
    """Failure rates with Wilson intervals per night and model, overall (`family` "all") and per family, plus each
    model over every night (`night` 0, `log` "all").

    Nights are the logs in the order of their first timestamp (then name), numbered from 1.

    Args:
        rows: `traffic_rows` of any number of logs.
        confidence: the intervals' coverage.

    Returns:
        Rows of `RATE_COLUMNS`, nights in order, then the all-night rows; `failure_rate` is None where no
        outcome is known.

    Example:
        >>> rows = [{"log": "n1", "timestamp": None, "model": "v1", "family": "sql", "outcome": o}
        ...         for o in ("failed", "passed", "passed", "unknown")]
        >>> first = rate_table(rows)[0]
        >>> first["night"], first["served"], first["failed"], first["unknown"], first["failure_rate"]
        (1, 4, 1, 1, 0.3333333333333333)
    """
    nights = _night_numbers(rows)
    counts: dict[tuple[int, str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0])  # served, failed, unknown
    for row in rows:
        for night, log in ((nights[row["log"]], row["log"]), (0, ALL)):
            for family in (ALL, row["family"]):
                tally = counts[night, log, row["model"], family]
                tally[0] += 1
                tally[1] += row["outcome"] in FAILED_OUTCOMES
                tally[2] += row["outcome"] == "unknown"
    out = []
    for (night, log, model, family), (served, failed, unknown) in sorted(
        counts.items(), key=lambda item: (item[0][0] == 0, item[0][0], item[0][2], item[0][3] != ALL, item[0][3])
    ):
        known = served - unknown
        low, high = wilson_interval(failed, known, confidence)
        out.append(
            {
                "night": night,
                "log": log,
                "model": model,
                "family": family,
                "served": served,
                "failed": failed,
                "unknown": unknown,
                "failure_rate": failed / known if known else None,
                "failure_rate_low": low,
                "failure_rate_high": high,
            }
        )
    return out


def _night_numbers(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """log -> its night: logs ordered by their first timestamp (a log without any comes last), then by name."""
    never = datetime.max.replace(tzinfo=UTC)
    first: dict[str, datetime] = {}
    for row in rows:
        stamp = _utc(row["timestamp"]) if row["timestamp"] else never
        first[row["log"]] = min(first.get(row["log"], never), stamp)
    order = sorted(first, key=lambda log: (first[log], log))
    return {log: number for number, log in enumerate(order, start=1)}


def _utc(timestamp: str) -> datetime:
    """An ISO 8601 timestamp as an aware UTC time (one without a zone is read as UTC)."""
    moment = datetime.fromisoformat(timestamp)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def rate_text(row: Mapping[str, Any]) -> str:
    """A `rate_table` row's rate as people read it: `0.25 [0.10, 0.49]`.

    Example:
        >>> rate_text({"failure_rate": 0.25, "failure_rate_low": 0.1, "failure_rate_high": 0.494})
        '0.25 [0.10, 0.49]'
    """
    if row["failure_rate"] is None:
        return "unknown (no outcome known)"
    return f"{row['failure_rate']:.2f} [{row['failure_rate_low']:.2f}, {row['failure_rate_high']:.2f}]"


@dataclass(frozen=True)
class RateReport:
    """`rate_table` rows as a team reads them: every family together (`family` "all"), per model and per night.

    Attributes:
        per_model: each model over every night (`night` 0), in `rate_table` order.
        per_night: each night's row per model, nights in order.
        nights: the night numbers that served anything, ascending.
        series: model -> `(rate, low, high)` per night of `nights`, None where the model served nothing that
            night or no outcome is known; models in the order they first served.
    """

    per_model: list[Mapping[str, Any]]
    per_night: list[Mapping[str, Any]]
    nights: list[int]
    series: dict[str, list[tuple[float, float, float] | None]]


def rate_report(rates: Iterable[Mapping[str, Any]]) -> RateReport:
    """The rows of `rate_table` over every family, split into the all-night rows per model and the nights, with
    each model's rate and interval per night (what a plot of the rate across nights draws).

    Example:
        >>> rows = [{"log": f"n{i}", "timestamp": None, "model": f"v{i}", "family": "sql", "outcome": "failed"}
        ...         for i in (1, 2)]
        >>> report = rate_report(rate_table(rows))
        >>> report.nights, [row["model"] for row in report.per_model], report.series["v2"][0]
        ([1, 2], ['v1', 'v2'], None)
    """
    overall = [row for row in rates if row["family"] == ALL]
    per_night = [row for row in overall if row["night"] > 0]
    nights = sorted({row["night"] for row in per_night})
    by_night = {(row["model"], row["night"]): row for row in per_night}
    models = dict.fromkeys(row["model"] for row in per_night)
    series = {model: [_interval(by_night.get((model, night))) for night in nights] for model in models}
    return RateReport([row for row in overall if row["night"] == 0], per_night, nights, series)


def _interval(row: Mapping[str, Any] | None) -> tuple[float, float, float] | None:
    if row is None or row["failure_rate"] is None:
        return None
    return row["failure_rate"], row["failure_rate_low"], row["failure_rate_high"]
