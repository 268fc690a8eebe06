"""`seedwheel replay`: saved episodes replayed in fresh environments, with verdict, end reason and state diff;
`seedwheel verify` scores the same rows through the registry, with each episode's end reason and state diff."""

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from pipeline.cli import main
from tests.paths import SEEDS, copy_seeds

SEED_FILE = SEEDS / "episode" / "shop.yaml"
CANCEL_1027 = "de5c0eeb338ebc16"  # "Please cancel order 1027, I changed my mind."


def messages(*calls: tuple[str, dict[str, Any]], answer: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, (name, arguments) in enumerate(calls):
        function = {"name": name, "arguments": json.dumps(arguments)}
        out += [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": f"c{i}", "type": "function", "function": function}],
            },
            {"role": "tool", "tool_call_id": f"c{i}", "content": "{}"},
        ]
    return [*out, {"role": "assistant", "content": answer}]


def write_rows(path: Path, *completions: Any) -> Path:
    path.write_text("".join(json.dumps({"task_id": CANCEL_1027, "completion": c}) + "\n" for c in completions))
    return path


def invoke(*args: str, monkeypatch: Any, tmp_path: Path) -> Any:
    # The environments copy the database from a copy of the seeds' sql folder, never from the repository's.
    monkeypatch.setenv("SEEDWHEEL_SEEDS", str(copy_seeds(tmp_path / "seeds", ["sql"])))
    return CliRunner().invoke(main, list(args))


def test_replay_prints_verdict_end_reason_calls_and_diff(tmp_path, monkeypatch):
    rows = write_rows(
        tmp_path / "episodes.jsonl",
        messages(("cancel_order", {"order_id": 1027}), answer="Cancelled."),
        messages(("cancel_order", {"order_id": 1026}), answer="Cancelled."),  # the wrong order: a stale id
    )
    result = invoke("replay", str(SEED_FILE), str(rows), monkeypatch=monkeypatch, tmp_path=tmp_path)
    assert result.exit_code == 1, result.output  # one episode failed
    assert result.stdout.split("\n\n")[:2] == [
        "\n".join(
            [
                f"{rows}:1 task {CANCEL_1027}",
                "verdict: PASS ok (score 1.000)",
                "end: answered after 2 turns",
                """  call 'cancel_order' '{"order_id": 1027}'""",
                """    -> '{"order_id": 1027, "status": "cancelled"}'""",
                "changes: 1",
                "  orders/1027: status 'pending' -> 'cancelled'",
            ]
        ),
        "\n".join(
            [
                f"{rows}:2 task {CANCEL_1027}",
                "verdict: FAIL unexpected_change: orders/1026: status 'pending' -> 'cancelled' (score 0.000)",
                "end: answered after 2 turns",
                """  call 'cancel_order' '{"order_id": 1026}'""",
                """    -> '{"order_id": 1026, "status": "cancelled"}'""",
                "changes: 1",
                "  orders/1026: status 'pending' -> 'cancelled'",
            ]
        ),
    ]


def test_replay_shows_why_a_hostile_episode_ended(tmp_path, monkeypatch):
    rows = write_rows(tmp_path / "episodes.jsonl", messages(("drop_database", {}), answer="Done, all cancelled."))
    result = invoke("replay", str(SEED_FILE), str(rows), monkeypatch=monkeypatch, tmp_path=tmp_path)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[1].startswith("verdict: FAIL invalid_call: unknown tool 'drop_database'")
    assert lines[2].startswith("end: invalid_call after 1 turn (unknown tool 'drop_database'; the tools are ")
    assert lines[-2:] == ["changes: 0", ""]


def test_replay_refuses_a_task_that_is_not_an_episode(tmp_path, monkeypatch):
    rows = tmp_path / "rows.jsonl"
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        json.dumps({"task_id": "t1", "verifier": {"name": "numeric_answer", "params": {"answer": 4}}}) + "\n"
    )
    rows.write_text(json.dumps({"task_id": "t1", "completion": "#### 4"}) + "\n")
    result = invoke("replay", str(tasks), str(rows), monkeypatch=monkeypatch, tmp_path=tmp_path)
    assert result.exit_code == 2
    assert "task t1 is a numeric_answer task; score it with seedwheel verify" in result.output


def test_verify_scores_episode_rows_with_their_end_and_state_diff(tmp_path, monkeypatch):
    rows = write_rows(
        tmp_path / "episodes.jsonl",
        messages(("cancel_order", {"order_id": 1027}), answer="Cancelled."),
        messages(answer="Your order is cancelled!"),  # claims success without a call
    )
    result = invoke("verify", str(SEED_FILE), str(rows), monkeypatch=monkeypatch, tmp_path=tmp_path)
    assert result.exit_code == 0, result.output
    verdicts = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(v["passed"], v["reason"]) for v in verdicts] == [
        (True, "ok"),
        (False, 'missing_change: orders/1027: {"status": "cancelled"}'),
    ]
    assert [(v["end_reason"], v["changes"]) for v in verdicts] == [
        ("answered", ["orders/1027: status 'pending' -> 'cancelled'"]),
        ("answered", []),
    ]
