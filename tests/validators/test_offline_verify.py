"""The offline reward audit: verdict rows, a summary, and input errors that name file, line and fix."""

import json
import re

import pytest
from click.testing import CliRunner

from pipeline.cli import main
from validators.offline_verify import AuditInputError, audit, format_summary, summarize
from validators.registry import REGISTRY, Verdict, Verifier

TASKS = [
    {"task_id": "math1", "verifier": {"name": "numeric_answer", "version": 1, "params": {"answer": 18}}},
    {"task_id": "json1", "verifier": {"name": "json_valid", "params": {}}},
]


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def tasks_file(tmp_path):
    return write_jsonl(tmp_path / "tasks.jsonl", TASKS)


def test_audit_rows_and_summary(tmp_path, tasks_file):
    completions = write_jsonl(
        tmp_path / "completions.jsonl",
        [
            {"task_id": "math1", "completion": "#### 18"},
            {"task_id": "math1", "completion": "#### 16"},
            "",  # blank lines are skipped but still counted, so line numbers match an editor's
            {"task_id": "math1", "completion": [{"role": "assistant", "content": "The answer is 18."}]},
            {"task_id": "json1", "completion": "no json"},
        ],
    )
    report = audit(tasks_file, completions)
    assert [(r["line"], r["task_id"], r["passed"], r["reason"]) for r in report.rows] == [
        (1, "math1", True, "ok"),
        (2, "math1", False, "answer_mismatch: expected 18, got 16"),
        (4, "math1", True, "ok"),
        (5, "json1", False, "json_missing"),
    ]
    summary = report.summary
    assert (summary.rows, summary.passed, summary.pass_rate) == (4, 2, 0.5)
    assert summary.reasons == {"ok": 2, "answer_mismatch": 1, "json_missing": 1}
    assert summary.verifiers["numeric_answer"].pass_rate == pytest.approx(2 / 3)
    assert summary.verifiers["json_valid"].rows == 1
    data = summary.as_dict()
    assert json.dumps(data)  # JSON-ready for metadata or --json output
    assert data["verifiers"]["json_valid"]["pass_rate"] == 0.0

    text = format_summary(summary)
    assert "rows 4, passed 2 (50.0%)" in text
    assert "numeric_answer     3       2      66.7%       0.667" in text
    assert "answer_mismatch      1" in text


@pytest.mark.parametrize(
    ("completion_lines", "message"),
    [
        # Bad JSON: the line and the fix.
        (
            ['{"task_id": "math1", "completion": "x"', ""],
            r"completions\.jsonl:1: not valid JSON .*one JSON object per line",
        ),
        # A task_id the tasks file does not have.
        ([{"task_id": "nope", "completion": "x"}], r"completions\.jsonl:1: task_id nope is not in .*tasks\.jsonl"),
        # A missing field, on the second line.
        (
            [{"task_id": "math1", "completion": "x"}, {"task_id": "math1"}],
            r"completions\.jsonl:2: missing field 'completion'",
        ),
        # A JSON value that is not an object.
        (["[1, 2]"], r"completions\.jsonl:1: expected a JSON object, got list"),
        # A completion of the wrong type.
        ([{"task_id": "math1", "completion": 18}], r"completions\.jsonl:1: completion is a int; give text or chat"),
        # Bytes that are not UTF-8 (a Latin-1 export): the line and the column, not a traceback.
        (
            [b'{"task_id": "math1", "completion": "18 \xb0C"}'],
            r"completions\.jsonl:1: byte 0xb0 at col 40 is not UTF-8",
        ),
    ],
)
def test_completion_input_errors(tmp_path, tasks_file, completion_lines, message):
    # The bad row is reported with its line and fix, and the good row after it is still scored.
    completions = tmp_path / "completions.jsonl"
    good = json.dumps({"task_id": "math1", "completion": "#### 18"}).encode()
    lines = [
        line if isinstance(line, bytes) else (line if isinstance(line, str) else json.dumps(line)).encode()
        for line in completion_lines
    ]
    completions.write_bytes(b"\n".join([*lines, good]) + b"\n")
    report = audit(tasks_file, completions)
    [error] = report.rejected
    assert isinstance(error, AuditInputError)
    assert re.search(message, str(error)), str(error)
    assert (report.rows[-1]["line"], report.rows[-1]["passed"]) == (len(lines) + 1, True)


def test_every_bad_completion_row_is_reported_and_the_command_fails(tmp_path, tasks_file):
    completions = tmp_path / "completions.jsonl"
    rows = [b'{"task_id": "math1"}', b'{"task_id": "math1", "completion": "#### 18"}', b"\xff\xfe", b"[1]"]
    completions.write_bytes(b"\n".join(rows) + b"\n")
    result = CliRunner().invoke(main, ["verify", str(tasks_file), str(completions)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "3 row(s) of" in result.output
    for line in (1, 3, 4):
        assert f"completions.jsonl:{line}: " in result.output
    assert '"line": 2' in result.output and "passed 1" in result.output  # the readable row was scored


@pytest.mark.parametrize(
    ("task_lines", "message"),
    [
        # A task without a verifier.
        ([{"task_id": "a"}], r"tasks\.jsonl:1: missing field 'verifier'; each task record needs a verifier"),
        # A task without an id.
        ([{"verifier": {"name": "json_valid"}}], r"tasks\.jsonl:1: missing field 'task_id'"),
        # The same id twice.
        ([TASKS[0], TASKS[0]], r"tasks\.jsonl:2: task_id math1 repeats line 1"),
        # An unknown verifier lists the registered ones.
        (
            [{"task_id": "a", "verifier": {"name": "nope"}}],
            r"tasks\.jsonl:1: task a: unknown verifier 'nope'; registered: ",
        ),
        # Params that break the verifier's schema.
        (
            [{"task_id": "a", "verifier": {"name": "numeric_answer", "params": {}}}],
            r"tasks\.jsonl:1: task a: 'answer' is a required property",
        ),
    ],
)
def test_task_input_errors(tmp_path, task_lines, message):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", task_lines)
    completions = write_jsonl(tmp_path / "completions.jsonl", [])
    with pytest.raises(AuditInputError, match=message):
        audit(tasks, completions)


def test_missing_file_is_an_input_error(tmp_path, tasks_file):
    with pytest.raises(AuditInputError, match="cannot open the completions file"):
        audit(tasks_file, tmp_path / "absent.jsonl")


class Exploding(Verifier):
    """A verifier that raises on every completion."""

    name = "exploding_audit_verifier"
    version = 1

    def check(self, params, completion, context) -> Verdict:
        raise RuntimeError("boom")


def test_a_raising_verifier_is_a_row_not_a_crash(tmp_path, monkeypatch):
    REGISTRY.names()  # load the built-ins before copying, so the copy is complete
    monkeypatch.setattr(REGISTRY, "_verifiers", dict(REGISTRY._verifiers))
    REGISTRY.register(Exploding)
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [{"task_id": "x", "verifier": {"name": "exploding_audit_verifier"}}])
    completions = write_jsonl(tmp_path / "completions.jsonl", [{"task_id": "x", "completion": "anything"}])
    [row] = audit(tasks, completions).rows
    assert (row["passed"], row["reason"]) == (False, "verifier_error: RuntimeError: boom")


def test_empty_summary_formats():
    # No rows is a valid (if useless) audit; the table must not divide by zero.
    assert format_summary(summarize([])) == "rows 0, passed 0 (0.0%), mean score 0.000"
