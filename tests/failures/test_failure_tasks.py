"""Failure -> candidate task (valid, lineage that splits with its variants) or review item with a seed stub."""

import json

import pytest
import yaml

from curation.splits import SplitConfig, assign_splits, task_roots
from failures import (
    Derived,
    UnredactedRecordError,
    failure_fields,
    failure_task,
    infer_family,
    parse_failure_log,
    process_failure_log,
    redact,
)
from generators.base import derive_task
from tests.paths import SEEDS
from validators.registry import REGISTRY, VerifyContext, verify
from validators.seeds import load_seeds
from validators.tasks import compute_task_id, task_problems

CONTEXT = VerifyContext(seeds_dir=SEEDS)
USER = {"role": "user", "content": "Refund order A-1042, it never arrived."}
REFUND = {
    "type": "function",
    "function": {
        "name": "refund_order",
        "description": "Refund an order.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
            "additionalProperties": False,
        },
        "x-internal": "dropped: the tool_call verifier allows only OpenAI's fields",
    },
}
STATUS = {"type": "function", "function": {"name": "order_status", "parameters": {"type": "object"}}}


def record_from(**fields):
    """A parsed and redacted failure record from native fields."""
    fields.setdefault("messages", [USER])
    fields.setdefault("output", "I can't do that.")
    (parsed,) = parse_failure_log([json.dumps(fields)], "log.jsonl").records
    return redact(parsed)[0]


def derive(**fields):
    return failure_task(record_from(**fields), context=CONTEXT)


def assert_valid_task(task):
    assert task_problems(task, CONTEXT, check_wrong_answer=True) == []
    assert task["task_id"] == compute_task_id(task["prompt"], task["verifier"])
    assert task["lineage"]["source"] == "production_failure"
    assert task["lineage"]["seed_id"] is None and task["lineage"]["parent_id"] is None


def test_numeric_answer():
    derived = derive(
        failure_id="f-num",
        messages=[{"role": "user", "content": "3 mugs at $12.50 and 2 plates at $8.25: total?"}],
        output="$52.00",
        expected={"answer": "54.00"},
        tags=["checkout"],
    )
    assert derived.is_task
    task = derived.task
    assert_valid_task(task)
    assert task["family"] == "arithmetic"
    version = REGISTRY.get("numeric_answer").version  # the latest: a failure task is judged as new tasks are
    assert task["verifier"] == {"name": "numeric_answer", "version": version, "params": {"answer": "54.00"}}
    assert task["reference"] == "#### 54.00"
    assert task["lineage"]["failure_id"] == "f-num"
    assert task["tags"] == ["checkout"]
    assert task["difficulty"] is None


def test_a_short_text_answer_becomes_a_text_answer_task():
    derived = derive(
        messages=[{"role": "user", "content": "CI fails on main and the Slack bot is silent. Which team owns this?"}],
        output="The payments team.",
        expected={"answer": "platform"},
        family="triage",
    )
    task = derived.task
    assert_valid_task(task)  # the reference passes, the known-wrong answer fails
    assert task["family"] == "triage"
    assert task["verifier"] == {"name": "text_answer", "version": 2, "params": {"answers": ["platform"]}}
    assert task["reference"] == "Answer: platform"
    assert not verify(task, "The payments team.").passed  # what the agent said in production still fails


def test_tool_call_puts_api_tools_into_the_system_message():
    derived = derive(
        messages=[{"role": "system", "content": "You help with orders."}, USER],
        tools=[REFUND, STATUS],
        output={"tool_calls": [{"name": "order_status", "arguments": {"order_id": "A-1042"}}]},
        expected={"tool_call": {"name": "refund_order", "arguments": {"order_id": "A-1042"}}},
    )
    task = derived.task
    assert_valid_task(task)
    assert task["family"] == "tool_call"
    system = task["prompt"][0]
    assert system["role"] == "system" and system["content"].startswith("You help with orders.\n\n")
    assert '"name": "refund_order"' in system["content"] and "exactly one tool call" in system["content"]
    assert "x-internal" not in json.dumps(task["verifier"])
    assert json.loads(task["reference"]) == {"name": "refund_order", "arguments": {"order_id": "A-1042"}}
    agent_call = json.dumps({"name": "order_status", "arguments": {"order_id": "A-1042"}})
    assert verify(task, agent_call).reason == "wrong_tool: expected refund_order, got order_status"


def test_tool_call_keeps_a_prompt_that_already_lists_the_tools():
    system = {"role": "system", "content": "Tools: refund_order(order_id), order_status(order_id)."}
    task = derive(
        messages=[system, USER],
        tools=[REFUND, STATUS],
        expected={"tool_call": {"name": "refund_order", "arguments": {"order_id": "A-1042"}}},
    ).task
    assert task["prompt"] == [system, USER]


def test_tool_call_without_logged_tools_gets_a_bare_tool():
    task = derive(expected={"tool_call": {"name": "refund_order", "arguments": {"order_id": "A-1042"}}}).task
    assert_valid_task(task)
    assert task["verifier"]["params"]["tools"] == [
        {"type": "function", "function": {"name": "refund_order", "parameters": {"type": "object"}}}
    ]
    assert task["prompt"][0]["role"] == "system"  # the bare tool is listed for the model


def test_sql_result():
    task = derive(
        messages=[{"role": "user", "content": "How many orders were cancelled? Return one column n."}],
        expected={
            "sql": "SELECT COUNT(*) AS n FROM orders WHERE status = 'cancelled'",
            "database": "sql/shop.sqlite",
            "rows": [[3]],
        },
    ).task
    assert_valid_task(task)
    assert task["family"] == "sql"
    assert task["verifier"]["params"] == {
        "database": "sql/shop.sqlite",
        "gold_query": "SELECT COUNT(*) AS n FROM orders WHERE status = 'cancelled'",
    }
    assert task["reference"].startswith("```sql\n")


def test_python_tests():
    task = derive(
        messages=[{"role": "user", "content": "Write double(x) returning 2 * x."}],
        expected={
            "tests": "assert double(2) == 4\nassert double(-1) == -2",
            "entry_point": "double",
            "code": "def double(x):\n    return 2 * x",
        },
    ).task
    assert_valid_task(task)
    assert task["family"] == "python_function"
    assert task["reference"] == "```python\ndef double(x):\n    return 2 * x\n```"


@pytest.mark.parametrize(
    ("expected", "params", "has_reference"),
    [
        # a schema and the right output: the output is also the expected values
        (
            {"output_schema": {"type": "object", "required": ["total"]}, "output": {"total": 108}},
            {"schema": {"type": "object", "required": ["total"]}, "expected": {"total": 108}},
            True,
        ),
        # only the right output: any object, with these values
        ({"output": {"total": 108}}, {"schema": {"type": "object"}, "expected": {"total": 108}}, True),
        # only a schema: format compliance, no reference
        ({"output_schema": {"type": "object"}}, {"schema": {"type": "object"}}, False),
    ],
)
def test_json_schema(expected, params, has_reference):
    task = derive(expected=expected).task
    assert_valid_task(task)
    assert task["family"] == "json_extraction"
    assert task["verifier"]["params"] == params
    assert (task["reference"] is not None) is has_reference


@pytest.mark.parametrize(
    ("fields", "code", "family"),
    [
        # nothing to build a verifier from
        ({}, "no_expected", "unknown"),
        # tools offered, but no expected call
        ({"tools": [REFUND]}, "no_expected", "tool_call"),
        # prose: a judge's job, not a verifier's
        (
            {"expected": {"answer": "Refund the order, apologise, and offer a voucher for the next purchase today"}},
            "unsupported_expected",
            "unknown",
        ),
        # rows without the query that produced them
        ({"expected": {"rows": [[3]]}}, "unsupported_expected", "sql"),
        # a query without its database
        ({"expected": {"sql": "SELECT 1"}}, "unsupported_expected", "sql"),
        # a database outside seeds/
        ({"expected": {"sql": "SELECT 1", "database": "/etc/passwd"}}, "unsupported_expected", "sql"),
        # a database reached through '..'
        ({"expected": {"sql": "SELECT 1", "database": "sql/../../x.sqlite"}}, "unsupported_expected", "sql"),
        # a schema that refers to another document (nothing is fetched)
        (
            {"expected": {"output_schema": {"$ref": "https://example.com/s.json"}, "output": {"a": 1}}},
            "invalid_task",
            "json_extraction",
        ),
        # tests without the function name
        ({"expected": {"tests": "assert f(1) == 2"}}, "unsupported_expected", "python_function"),
        # an expected output that is text
        ({"expected": {"output": "Refunded."}}, "unsupported_expected", "unknown"),
        # an expected tool that was not offered
        (
            {"tools": [STATUS], "expected": {"tool_call": {"name": "refund_order", "arguments": {}}}},
            "expected_tool_unknown",
            "tool_call",
        ),
        # expected arguments that break the tool's schema: the derived task is invalid
        (
            {"tools": [REFUND], "expected": {"tool_call": {"name": "refund_order", "arguments": {"order_id": 1042}}}},
            "invalid_task",
            "tool_call",
        ),
        # a reference that fails its own verifier
        (
            {"expected": {"tests": "assert f(1) == 2", "entry_point": "f", "code": "def f(x):\n    return x"}},
            "invalid_task",
            "python_function",
        ),
        # only a system message: nothing to use as the prompt's request
        (
            {"messages": [{"role": "system", "content": "Be nice."}], "expected": {"answer": 1}},
            "no_user_message",
            None,
        ),
    ],
)
def test_review_items(fields, code, family):
    record = record_from(failure_id="f-rev", user_correction="It should refund.", **fields)
    derived = failure_task(record, context=CONTEXT)
    assert not derived.is_task and derived.task is None
    review = derived.review
    assert review["reason_code"] == code
    assert review["family"] == (family or infer_family(record))
    assert review["failure_id"] == "f-rev" and review["origin"] == "log.jsonl:1"
    assert review["messages"] == record["messages"]
    assert review["user_correction"] == "It should refund."
    stub = yaml.safe_load(review["seed_stub"])
    assert isinstance(stub, list) and len(stub) == 1
    assert "f-rev" in review["seed_stub"] and "seedwheel seeds validate" in review["seed_stub"]


def test_no_expected_reason_and_stub():
    derived = derive(failure_id="f-stub", messages=[USER], tools=[REFUND], error="called the wrong tool")
    review = derived.review
    assert review["reason"] == "no expected outcome to derive a verifier from"
    assert review["seed_stub"].startswith("# Seed stub from production failure f-stub (log.jsonl:1)")
    assert "# Error: called the wrong tool" in review["seed_stub"]
    (seed,) = yaml.safe_load(review["seed_stub"])
    assert seed["verifier"]["name"] == "tool_call"
    assert seed["verifier"]["params"]["tools"][0]["function"]["name"] == "refund_order"
    assert seed["prompt"][-1] == USER
    assert seed["reference"].startswith("TODO")


def test_review_holds_only_redacted_text():
    derived = derive(
        messages=[{"role": "user", "content": "I am ann.lee@example.com, card 4111 1111 1111 1111"}],
        output="Sure, ann.lee@example.com",
        user_correction="Call me at (202) 555-0143",
    )
    dumped = json.dumps(derived.review)
    for value in ("ann.lee@example.com", "4111 1111 1111 1111", "555-0143"):
        assert value not in dumped


def test_completed_stub_is_a_valid_seed(tmp_path):
    review = derive(messages=[{"role": "user", "content": "What is 6 * 7?"}], output="41", family="arithmetic").review
    (seed,) = yaml.safe_load(review["seed_stub"])
    assert seed["verifier"] == {"name": "numeric_answer", "params": {"answer": "TODO: the expected number"}}
    seed["verifier"]["params"]["answer"] = 42
    seed["reference"] = "6 * 7 = 42\n#### 42"
    (tmp_path / "arithmetic").mkdir()
    (tmp_path / "arithmetic" / "from_failures.yaml").write_text(yaml.safe_dump([seed]))
    loaded = load_seeds([tmp_path])
    assert [str(p) for p in loaded.problems] == []
    assert len(loaded.tasks) == 1


def test_unredacted_record_is_refused():
    (parsed,) = parse_failure_log([json.dumps({"messages": [USER], "expected": {"answer": 1}})], "log.jsonl").records
    with pytest.raises(UnredactedRecordError, match="redact"):
        failure_task(parsed)


def test_prompt_turns_are_converted():
    task = derive(
        messages=[
            {"role": "developer", "content": "Use tools."},
            {"role": "user", "content": "Status of A-1?"},
            {"role": "assistant", "content": None, "tool_calls": [{"name": "order_status", "arguments": "{}"}]},
            {"role": "function", "name": "order_status", "content": "shipped"},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": "And 6 * 7?"},
        ],
        expected={"answer": 42},
    ).task
    assert task["prompt"] == [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Status of A-1?"},
        {"role": "assistant", "content": '{"name": "order_status", "arguments": {}}'},
        {"role": "tool", "content": "shipped"},
        {"role": "user", "content": "And 6 * 7?"},
    ]


@pytest.mark.parametrize(
    ("record", "family"),
    [
        ({"family": "triage", "expected": {"answer": 1}}, "triage"),  # the hint wins
        ({"expected": {"tool_call": {"name": "f", "arguments": {}}}}, "tool_call"),  # an expected call
        ({"expected": {"database": "sql/shop.sqlite"}}, "sql"),  # a database
        ({"expected": {"entry_point": "f"}}, "python_function"),  # a function name
        ({"expected": {"output_schema": {}}}, "json_extraction"),  # a schema
        ({"expected": {"answer": "1,234.50"}}, "arithmetic"),  # a numeric string
        ({"expected": {"answer": "Paris"}}, "unknown"),  # text: no family follows
        ({"tools": [STATUS]}, "tool_call"),  # tools offered
        ({"output": {"tool_calls": [{"name": "f"}]}}, "tool_call"),  # tools called
        ({}, "unknown"),  # nothing to go on
    ],
)
def test_infer_family(record, family):
    assert infer_family(record) == family


def test_failure_and_its_variants_split_together():
    task = derive(failure_id="f-split", expected={"answer": 7}).task
    variant = derive_task(
        task,
        prompt=[{"role": "user", "content": "What is 3 + 4?"}],
        verifier_params={"answer": 7},
        reference="#### 7",
        generator={"name": "paraphrase", "version": 1, "params": {}},
    )
    other = derive(failure_id="f-other", expected={"answer": 8}).task
    assert variant["lineage"]["failure_id"] == "f-split" and variant["lineage"]["seed_id"] is None
    assert task_roots([task, variant, other]) == ["f-split", "f-split", "f-other"]
    for salt in ("a", "b", "c", "d"):
        sides = assign_splits([task, variant, other], SplitConfig(eval_fraction=0.5, salt=salt))
        assert sides[0] == sides[1]


def test_derived_is_one_or_the_other():
    assert Derived(task={"task_id": "x"}).is_task and not Derived(review={"failure_id": "f"}).is_task


@pytest.mark.slow  # every bundled seed through the failure path, the code seeds' references in the sandbox: ~10 s
def test_failure_fields_log_a_seed_so_that_its_failure_derives_the_same_task():
    """A stand-in app logs each request with failure_fields: the failure it logs is the task it served."""
    seeds = load_seeds([SEEDS], root=SEEDS.parent, context=CONTEXT).tasks
    logged = 0
    for seed in seeds:
        fields = failure_fields(seed)
        if fields is None:
            assert seed["family"] in ("episode", "tool_call"), seed["task_id"]  # episodes; tools not loggable as given
            continue
        line = json.dumps({"messages": seed["prompt"], "output": "no", "outcome": "failed", **fields})
        batch = process_failure_log([line], context=CONTEXT)
        if batch.redaction.counts or not batch.tasks:
            # Redaction comes first (an email in a tool call's arguments no longer fits its pattern), and a seed's
            # partial expected object is no whole output to be a reference: such failures go to review.
            assert batch.tasks or batch.review[0]["reason_code"] == "invalid_task", seed["task_id"]
            continue
        [task] = batch.tasks
        assert task["verifier"] == seed["verifier"], seed["task_id"]
        assert task["prompt"] == seed["prompt"] and task["task_id"] == seed["task_id"]
        logged += 1
    assert logged >= 0.7 * len([s for s in seeds if s["family"] != "episode"]), logged
