"""Stored failure records to tasks and review items: one task per task_id, review items kept in order; the tables
a log stores."""

import json

import pytest

from failures import (
    RECORD_FIELDS,
    UnredactedRecordError,
    derive_failure_tasks,
    log_tables,
    parse_failure_log,
    process_failure_log,
    redact,
)
from failures.batch import REJECT_COLUMNS
from failures.traffic import TRAFFIC_COLUMNS

QUESTION = {"role": "user", "content": "What is 17 * 3?"}


def record(failure_id: str, *, answer: int | None = 51, question: dict = QUESTION) -> dict:
    """A parsed, redacted failure record; with an `answer` a numeric task can be derived from it."""
    fields = {"failure_id": failure_id, "family": "arithmetic", "messages": [question], "output": "#### 50"}
    if answer is not None:
        fields["expected"] = {"answer": answer}
    (parsed,) = parse_failure_log([json.dumps(fields)], "log.jsonl").records
    return redact(parsed)[0]


OTHER = {"role": "user", "content": "What is 18 * 3?"}


@pytest.mark.parametrize(
    ("records", "tasks", "review"),
    [
        # An expected answer gives a task; none gives a review item.
        ([record("f1"), record("f2", answer=None)], ["f1"], ["f2"]),
        # The same failure logged twice (two files, a resent line): one task.
        ([record("f1"), record("f1")], ["f1"], []),
        # The same task under two failure ids (same prompt and gold): one task, the last one read.
        ([record("f1"), record("f2")], ["f2"], []),
        # Different tasks stay apart, in record order.
        ([record("f1", question=OTHER), record("f2")], ["f1", "f2"], []),
        # Review items are never merged: a person looks at each.
        ([record("f1", answer=None), record("f1", answer=None)], [], ["f1", "f1"]),
        # Nothing stored yet.
        ([], [], []),
    ],
)
def test_derive_failure_tasks(records, tasks, review):
    derived, items = derive_failure_tasks(records)
    assert [t["lineage"]["failure_id"] for t in derived] == tasks
    assert [item["failure_id"] for item in items] == review
    assert len({t["task_id"] for t in derived}) == len(derived)


def test_an_unredacted_record_is_refused():
    (parsed,) = parse_failure_log([json.dumps({"messages": [QUESTION], "output": "5"})], "log.jsonl").records
    with pytest.raises(UnredactedRecordError):
        derive_failure_tasks([parsed])


def test_log_tables_store_the_failures_every_interaction_and_the_rejects():
    lines = [
        json.dumps({"messages": [QUESTION], "output": "#### 50", "model": "v1", "outcome": outcome})
        for outcome in ("failed", "passed", "unknown")
    ]
    tables = log_tables(process_failure_log([*lines, "{not json"], "n1.jsonl"), "n1.jsonl")
    assert list(tables.failures.columns) == [*RECORD_FIELDS, "redaction"]
    assert tables.failures["outcome"].tolist() == ["failed"]  # a success or an unknown is traffic only
    assert list(tables.traffic.columns) == list(TRAFFIC_COLUMNS)
    assert tables.traffic["outcome"].tolist() == ["failed", "passed", "unknown"]
    assert set(tables.traffic["log"]) == {"n1.jsonl"}
    assert tables.rejects[["line", "reason_code"]].values.tolist() == [[4, "invalid_json"]]


def test_log_tables_of_an_empty_log_keep_their_columns():
    tables = log_tables(process_failure_log([], "empty.jsonl"), "empty.jsonl")
    assert list(tables.failures.columns) == [*RECORD_FIELDS, "redaction"]
    assert list(tables.traffic.columns) == list(TRAFFIC_COLUMNS)
    assert list(tables.rejects.columns) == list(REJECT_COLUMNS)
    assert (len(tables.failures), len(tables.traffic), len(tables.rejects)) == (0, 0, 0)
