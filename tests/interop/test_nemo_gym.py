"""NeMo Gym rows <-> seedwheel tasks, and Responses API responses as completions, on NeMo Gym's own example files
(nemo-gym 0.4.0, vendored under data/nemo_gym/ with their NOTICE)."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from interop.nemo_gym import (
    completion_from_response,
    export_rows,
    read_jsonl,
    read_seed_records,
    row_verifier,
    strict_schema,
    task_rows,
)
from pipeline.cli import main
from validators.registry import VerifyContext, verify
from validators.seeds import check_seed_records, load_seeds

DATA = Path(__file__).parent / "data" / "nemo_gym"
SEEDS = Path(__file__).parents[2] / "seeds"


def _import(tmp_path: Path, server: str, family: str, *extra: str) -> tuple[Path, object]:
    output = tmp_path / "seeds" / family / f"{server}.jsonl"
    args = ["seeds", "import", str(DATA / server / "example.jsonl"), "--from", "nemo-gym", "--family", family]
    result = CliRunner().invoke(main, [*args, "-o", str(output), *extra])
    return output, result


def test_xlam_fc_rows_become_tool_call_seeds_that_validate(tmp_path: Path) -> None:
    output, result = _import(tmp_path, "xlam_fc", "tool_call")
    # Row 3's gold calls t3ma with time_period 14, an integer, where the tool declares a string: no answer could
    # both follow the tool and match the gold, so the row is left out, named, and the command exits 1.
    assert result.exit_code == 1, result.output
    assert (
        f"{DATA / 'xlam_fc' / 'example.jsonl'}:3: expected arguments break the tool's declared types" in result.stdout
    )
    assert "5 rows: wrote 4 seeds" in result.stderr
    seeds = load_seeds([output.parent], context=VerifyContext(seeds_dir=tmp_path / "seeds"))
    assert [str(p) for p in seeds.problems] == [] and len(seeds.tasks) == 4
    by_line = {int(task["origin"].rsplit(":", 1)[1]): task for task in seeds.tasks}
    # One expected call is `expected`; two (row 1: the same tool for beta and for game) are BFCL's possible_answer.
    assert by_line[2]["verifier"]["params"]["expected"] == {
        "name": "web_chain_details",
        "arguments": {"chain_slug": "ethereum"},
    }
    assert by_line[1]["verifier"]["params"]["possible_answer"] == [
        {"live_giveaways_by_type": {"type": ["beta"]}},
        {"live_giveaways_by_type": {"type": ["game"]}},
    ]
    assert by_line[1]["verifier"]["params"]["tools"][0]["function"]["name"] == "live_giveaways_by_type"
    assert f"source:example.jsonl:{1}" in by_line[1]["tags"]


def test_structured_outputs_rows_take_a_passing_rollout_as_their_reference(tmp_path: Path) -> None:
    rollouts = DATA / "structured_outputs" / "example_rollouts.jsonl"
    output, result = _import(tmp_path, "structured_outputs", "json_extraction", "--rollouts", str(rollouts))
    assert result.exit_code == 1, result.output
    # Rows 4 and 5: no rollout of theirs meets the schema, so nothing shows the task can be passed.
    problems = [line for line in result.stdout.splitlines() if "(/reference)" in line]
    assert [line.split(": ", 1)[0].rsplit(":", 1)[1] for line in problems] == ["4", "5"]
    assert "pass --rollouts" in problems[0]
    seeds = load_seeds([output.parent], context=VerifyContext(seeds_dir=tmp_path / "seeds"))
    assert [str(p) for p in seeds.problems] == [] and len(seeds.tasks) == 3
    schema = seeds.tasks[0]["verifier"]["params"]["schema"]
    assert schema["additionalProperties"] is False and schema["required"] == list(schema["properties"])

    # Without rollouts a schema alone gives no reference: every row is left out, each with the fix.
    _, bare = _import(tmp_path / "bare", "structured_outputs", "json_extraction")
    assert bare.exit_code == 1 and "no rollouts were given" in bare.stdout and "wrote nothing" in bare.stderr


def test_rows_that_cannot_become_seeds_are_named_with_reason_and_fix(tmp_path: Path) -> None:
    source = tmp_path / "rows.jsonl"
    good = json.loads((DATA / "structured_outputs" / "example.jsonl").read_text().splitlines()[0])
    rows = [
        {**good, "schema_type": "yaml"},  # seedwheel's json_schema reads JSON
        {**good, "response_mode": "tool_call"},  # the answer would be a tool call's arguments
        {"responses_create_params": {"input": [{"role": "user", "content": "hi"}]}, "ground_truth": "[1.0]"},
        "not json",
        {"responses_create_params": {"input": []}, "expected_answer": "3"},
    ]
    source.write_text("\n".join(row if isinstance(row, str) else json.dumps(row) for row in rows) + "\n")
    found = read_seed_records(source, family="json_extraction")
    assert found.records == []
    assert [(p.line, p.problem.code) for p in found.problems] == [
        (1, "unsupported_format"),
        (2, "unsupported_format"),
        (3, "unknown_gold"),
        (4, "unreadable_row"),
        (5, "no_input"),
    ]
    assert all(p.problem.fix for p in found.problems)
    assert str(found.problems[2]).startswith(f"{source}:3: no gold seedwheel reads (its fields: ground_truth)")


def test_math_rows_become_math_answer_seeds_that_validate(tmp_path: Path) -> None:
    output, result = _import(tmp_path, "math_with_judge", "math")
    assert "5 rows: wrote 5 seeds" in result.stderr, result.output
    seeds = load_seeds([output.parent], context=VerifyContext(seeds_dir=tmp_path / "seeds"))
    assert [str(p) for p in seeds.problems] == [] and len(seeds.tasks) == 5
    assert {task["verifier"]["name"] for task in seeds.tasks} == {"math_answer"}


@pytest.fixture(scope="module")
def bundled_tasks() -> list[dict]:
    """The repository's seeds of the families NeMo Gym rows carry: tool calls, JSON extraction, arithmetic."""
    paths = [SEEDS / "tool_call", SEEDS / "json_extraction", SEEDS / "arithmetic"]
    seeds = load_seeds(paths, context=VerifyContext(seeds_dir=SEEDS))
    assert seeds.problems == []
    return seeds.tasks


def test_a_task_exported_as_a_nemo_gym_row_reads_back_as_the_same_task(tmp_path: Path, bundled_tasks) -> None:
    families = ("tool_call", "json_extraction", "arithmetic")
    chosen = [task for family in families for task in [t for t in bundled_tasks if t["family"] == family][:3]]
    path = tmp_path / "rows.jsonl"
    assert export_rows(chosen, path) == len(chosen)
    back = []
    for task in chosen:
        family = task["family"]
        single = tmp_path / f"{task['task_id']}.jsonl"
        single.write_text(json.dumps(task_rows([task])[0]) + "\n")
        found = read_seed_records(single, family=family)
        assert found.problems == []
        checked = check_seed_records(found.records, context=VerifyContext(seeds_dir=SEEDS))
        assert [str(p) for p in checked.problems] == []
        back.extend(checked.tasks)
    for task, again in zip(chosen, back, strict=True):
        for key in ("task_id", "family", "prompt", "verifier", "reference"):
            assert again[key] == task[key], key
    # The file itself holds one row per task, each with NeMo Gym's prompt and seedwheel's spec.
    rows = [row for _, row in read_jsonl(path)]
    assert [row["task_id"] for row in rows] == [task["task_id"] for task in chosen]


def test_exported_rows_carry_the_fields_nemo_gym_servers_read(bundled_tasks) -> None:
    tasks = bundled_tasks
    tool_task = next(t for t in tasks if t["family"] == "tool_call" and "expected" in t["verifier"]["params"])
    json_task = next(t for t in tasks if t["verifier"]["name"] == "json_schema")
    number_task = next(t for t in tasks if t["verifier"]["name"] == "numeric_answer")
    tool_row, json_row, number_row = task_rows([tool_task, json_task, number_task])
    # xlam_fc reads expected_answers and offers the tools in the Responses API's flat shape.
    assert tool_row["expected_answers"] == [tool_task["verifier"]["params"]["expected"]]
    assert all(tool["type"] == "function" and "name" in tool for tool in tool_row["responses_create_params"]["tools"])
    assert "tools" not in json_row["responses_create_params"]
    assert str(number_row["expected_answer"]) == str(number_task["verifier"]["params"]["answer"])
    if "expected" not in json_task["verifier"]["params"]:
        assert json.loads(json_row["schema_str"]) == json_task["verifier"]["params"]["schema"]
    # And each row reads back to its own verifier, whichever fields are present.
    assert row_verifier(tool_row) == tool_task["verifier"]


def _message(text: str) -> dict:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def _call(name: str, arguments: str, call_id: str = "c1") -> dict:
    return {"type": "function_call", "name": name, "arguments": arguments, "call_id": call_id}


@pytest.mark.parametrize(
    ("output", "text", "calls"),
    [
        # The last assistant message is the answer; reasoning items are not.
        ([{"type": "reasoning", "summary": [{"text": "#### 5"}]}, _message("#### 4")], "#### 4", []),
        # A call, its result, then a closing message: the call still counts, the text is the closing message.
        (
            [
                _message("\n\n"),
                _call("f", '{"x": 1}'),
                {"type": "function_call_output", "call_id": "c1", "output": "{}"},
                _message("done"),
            ],
            "done",
            [("f", '{"x": 1}')],
        ),
        # Two calls in one turn are two calls.
        ([_call("f", "{}"), _call("g", "{}", "c2")], "", [("f", "{}"), ("g", "{}")]),
        # Several output_text parts of one message are one text.
        (
            [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "a"}, {"type": "output_text", "text": "b"}],
                }
            ],
            "ab",
            [],
        ),
    ],
)
def test_a_responses_api_response_becomes_a_completion(output: list, text: str, calls: list) -> None:
    completion = completion_from_response({"output": output})
    assert completion.text == text
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in completion.tool_calls] == calls


def test_rollouts_are_judged_by_what_the_response_holds() -> None:
    # xlam_fc's first rollout calls web_chain_details as its row expects, between two messages.
    rows = [row for _, row in read_jsonl(DATA / "xlam_fc" / "example.jsonl")]
    _, rollout = next(read_jsonl(DATA / "xlam_fc" / "example_rollouts.jsonl"))
    row = next(r for r in rows if r["responses_create_params"]["input"][-1]["content"].endswith("'ethereum'?"))
    completion = completion_from_response(rollout["response"])
    assert verify({"verifier": row_verifier(row)}, completion).passed
    assert not verify({"verifier": row_verifier(rows[0])}, completion).passed  # another row's gold


def test_strict_schema_makes_every_listed_property_required_at_every_level() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {}}}}, "required": []}
    strict = strict_schema(schema)
    assert strict["required"] == ["a"] and strict["properties"]["a"]["required"] == ["b"]
    assert strict["properties"]["a"]["additionalProperties"] is False
    assert schema["required"] == []  # a copy: the row's schema is left as it was
