"""`seedwheel judge`: a task file scored against a fake judge, the summary a person reads, and input mistakes."""

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from core.tables import read_table
from pipeline.cli import main
from tests.fake_server import FakeOpenAIServer, Reply

ALL_FIVE = {"clarity": 5, "solvability": 5, "reference_correctness": 5, "on_topic": 5}
WRONG_RATIONALE = "The reference says 9, but 4 + 4 is 8."


def task(task_id: str, question: str, answer: int = 8) -> dict:
    return {
        "task_id": task_id,
        "family": "arithmetic",
        "prompt": [{"role": "user", "content": question}],
        "verifier": {"name": "numeric_answer", "params": {"answer": answer}},
        "reference": f"#### {answer}",
    }


TASKS = [
    task("good-1", "What is 4 + 4?"),
    task("wrong-ref", "WRONG_REF: what is 4 + 4?", answer=9),
    task("garbage", "GARBAGE: what is 2 + 6?"),
    task("good-2", "What is 2 * 4?"),
]


def fake_judge(body: Mapping[str, Any]) -> str:
    """Steered by the task's question (the first user message holds the task, also in a repair request)."""
    data = body["messages"][1]["content"]
    if "GARBAGE" in data:
        return "What a lovely task!"  # no JSON at all, also when asked again: a judge_error
    if "WRONG_REF" in data:
        return json.dumps({"rationale": WRONG_RATIONALE, **ALL_FIVE, "reference_correctness": 1})
    return json.dumps({"rationale": "Clear and correct.", **ALL_FIVE})


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(responder=fake_judge) as fake:
        yield fake


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    return path


def judge(server: FakeOpenAIServer, home: Path, *args: str):
    base = ["judge", "--base-url", server.base_url, "--model", "fake-judge", "--home", str(home)]
    return CliRunner().invoke(main, [*base, *args])


def test_judges_a_file_and_prints_a_readable_summary(server, tasks_file, tmp_path):
    result = judge(server, tmp_path / "home", "--tasks", str(tasks_file))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "judged 4 tasks (4 judgments) with rubric task_quality-r1, model fake-judge" in out
    assert "verdicts: accept 2, reject 1, judge_error 1" in out
    assert "accept rate: 50.0% (2/4)" in out
    assert "judge errors: json_missing 1 (garbage)" in out
    # One row per criterion, counts of scores 1..5 over the three scored tasks.
    assert "reference_correctness     1     0     0     0     2" in out
    assert "clarity                   0     0     0     0     3" in out
    # The worst task comes first, with its failed criterion and the judge's rationale.
    worst = out.split("worst-scored 3:\n")[1].splitlines()
    assert worst[0].startswith("  wrong-ref (arithmetic) 16/20 reject, failed reference_correctness: clarity=5")
    assert worst[1].strip() == WRONG_RATIONALE
    # 4 first-pass calls and 1 repair of the garbage answer.
    assert "LLM: 5 calls made, 0 answered from the cache, 1 repair requests (0 repaired)" in out


def test_a_rerun_is_answered_from_the_pipelines_cache(server, tasks_file, tmp_path):
    home = tmp_path / "home"
    assert judge(server, home, "--tasks", str(tasks_file)).exit_code == 0
    assert (home / "llm_cache" / "llm_cache.sqlite3").exists()  # the cache the pipeline's runs use
    calls = len(server.requests)
    again = judge(server, home, "--tasks", str(tasks_file), "--concurrency", "2")
    assert again.exit_code == 0, again.output
    assert "LLM: 0 calls made, 5 answered from the cache" in again.stdout
    assert len(server.requests) == calls


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_judgments_are_written_by_extension(server, tasks_file, tmp_path, suffix):
    out = tmp_path / "out" / f"judgments{suffix}"
    result = judge(server, tmp_path / "home", "--tasks", str(tasks_file), "--max-tasks", "2", "--out", str(out))
    assert result.exit_code == 0, result.output
    if suffix == ".jsonl":
        rows = [json.loads(line) for line in out.read_text().splitlines()]
    else:
        rows = read_table(out).to_dict(orient="records")
    assert [(r["task_id"], r["family"], r["verdict"]) for r in rows] == [
        ("good-1", "arithmetic", "accept"),
        ("wrong-ref", "arithmetic", "reject"),
    ]
    assert rows[1]["scores"]["reference_correctness"] == 1 and rows[1]["rationale"] == WRONG_RATIONALE
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # written atomically: no temporary file left


def test_a_seeds_folder_can_be_judged(server, tmp_path):
    seeds = Path(__file__).resolve().parents[2] / "seeds" / "arithmetic"
    result = judge(server, tmp_path / "home", "--tasks", str(seeds), "--max-tasks", "3")
    assert result.exit_code == 0, result.output
    assert "verdicts: accept 3, reject 0, judge_error 0" in result.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        # A broken line: the file, the line and the fix.
        ('{"task_id": "a"\n', r"tasks.jsonl:1: not valid JSON .*; write one JSON object per line"),
        # A record without what the judge needs.
        (json.dumps({"task_id": "a"}) + "\n", r"tasks.jsonl:1: missing field 'verifier'"),
        # Valid records without prompt messages: named by position and id.
        (
            json.dumps({**TASKS[0], "prompt": "What is 4 + 4?"}) + "\n",
            r"tasks.jsonl: tasks\[0\] \(task good-1\) has no prompt messages",
        ),
        ("\n", r"tasks.jsonl: no tasks to judge"),
    ],
)
def test_bad_input_is_a_clear_error_without_a_traceback(server, tmp_path, content, message):
    path = tmp_path / "tasks.jsonl"
    path.write_text(content)
    result = judge(server, tmp_path / "home", "--tasks", str(path))
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)  # a ClickException, not a crash
    assert "Traceback" not in result.output
    [error] = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert re.search(message, error), error
    assert server.requests == []  # nothing was sent


def test_a_missing_file_and_a_bad_out_extension_are_refused(server, tasks_file, tmp_path):
    missing = judge(server, tmp_path / "home", "--tasks", str(tmp_path / "nope.jsonl"))
    assert missing.exit_code == 1 and "nope.jsonl: cannot open the tasks file" in missing.stderr
    bad_out = judge(server, tmp_path / "home", "--tasks", str(tasks_file), "--out", str(tmp_path / "j.csv"))
    assert bad_out.exit_code == 2 and "must end in .jsonl or .parquet" in bad_out.stderr


def test_an_endpoint_that_refuses_the_key_is_an_error_naming_the_fix(server, tasks_file, tmp_path):
    server.script("Judge the task", then=Reply.status(401))
    result = judge(server, tmp_path / "home", "--tasks", str(tasks_file))
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit)
    assert "answered 401" in result.stderr and "holds a valid key" in result.stderr
