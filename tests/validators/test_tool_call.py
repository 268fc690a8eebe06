"""tool_call: one call, to the right tool, with schema-valid and expected arguments."""

import json

import pytest

from validators.registry import REGISTRY, Completion, VerifyContext, spec_problems, verify

VERIFIER = REGISTRY.get("tool_call")
CONTEXT = VerifyContext()

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "required": ["city"],
            "additionalProperties": False,
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1},
            },
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
}
PARAMS = {"tools": [WEATHER, SEARCH], "expected": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}}


def openai_call(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def judge(completion, params=PARAMS):
    return VERIFIER.check(params, Completion.from_any(completion), CONTEXT)


@pytest.mark.parametrize(
    "completion",
    [
        # OpenAI message with arguments as a JSON string (the API's wire format).
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [openai_call("get_weather", '{"city": "Paris", "days": 3}')],
        },
        # Arguments already parsed into a dict (TRL's response parser does this).
        {"role": "assistant", "content": "", "tool_calls": [openai_call("get_weather", {"city": "Paris", "days": 3})]},
        # Conversational completion: a list with one assistant message.
        [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [openai_call("get_weather", {"city": "Paris", "days": 3})],
            }
        ],
        # A JSON call in plain text.
        '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}',
        # Hermes/Qwen style tags around the JSON.
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>',
        # Llama 3 style "parameters" key, inside a fence.
        '```json\n{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}\n```',
        # Numbers compare by value: 3.0 is 3 (and the schema's integer type accepts 3.0).
        '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3.0}}',
        # Optional arguments the task does not check are allowed when the schema allows them.
        '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "unit": "celsius"}}',
        # A JSON list holding exactly one call.
        '[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]',
    ],
)
def test_accepts(completion):
    verdict = judge(completion)
    assert verdict.passed, verdict.reason


@pytest.mark.parametrize(
    ("completion", "reason"),
    [
        # Prose, no call.
        ("It is sunny in Paris.", "no_tool_call: no tool_calls and no JSON in the text"),
        # JSON that is not a call.
        ('{"city": "Paris"}', "no_tool_call: not a call (no string 'name')"),
        # A tool that was not offered.
        ('{"name": "get_forecast", "arguments": {"city": "Paris"}}', "unknown_tool: get_forecast"),
        # An offered but wrong tool.
        ('{"name": "search", "arguments": {"q": "Paris weather"}}', "wrong_tool: expected get_weather, got search"),
        # Two calls where one is expected: spraying calls is not rewarded.
        (
            {"role": "assistant", "tool_calls": [openai_call("get_weather", {"city": "Paris", "days": 3})] * 2},
            "multiple_tool_calls: expected exactly 1 call, got 2",
        ),
        # Arguments as a JSON string with a wrong type.
        (
            {"role": "assistant", "tool_calls": [openai_call("get_weather", '{"city": "Paris", "days": "3"}')]},
            "arguments_invalid: /days: '3' is not of type 'integer'",
        ),
        # Arguments string that is not JSON.
        (
            {"role": "assistant", "tool_calls": [openai_call("get_weather", '{"city": Paris}')]},
            "arguments_invalid: arguments are not JSON (line 1 col 10)",
        ),
        # Arguments that are JSON but not an object.
        (
            {"role": "assistant", "tool_calls": [openai_call("get_weather", "[1, 2]")]},
            "arguments_invalid: arguments must be an object, got list",
        ),
        # An extra argument the schema forbids.
        (
            '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "country": "FR"}}',
            "arguments_invalid: /: Additional properties are not allowed ('country' was unexpected)",
        ),
        # A required argument is missing.
        ('{"name": "get_weather", "arguments": {"days": 3}}', "arguments_invalid: /: 'city' is a required property"),
        # Strings are case-sensitive.
        (
            '{"name": "get_weather", "arguments": {"city": "paris", "days": 3}}',
            "argument_mismatch: /city expected 'Paris', got 'paris'",
        ),
        # A wrong number.
        (
            '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}',
            "argument_mismatch: /days expected 3, got 2",
        ),
        # An expected optional argument left out.
        (
            '{"name": "get_weather", "arguments": {"city": "Paris"}}',
            "argument_mismatch: /days expected 3, got nothing",
        ),
        # Native tool_calls win over text: the text's correct call does not rescue a wrong native one.
        (
            {
                "role": "assistant",
                "content": '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}',
                "tool_calls": [openai_call("search", {"q": "x"})],
            },
            "wrong_tool: expected get_weather, got search",
        ),
        # A malformed tool_calls item without a function name.
        (
            {"role": "assistant", "tool_calls": [{"type": "function", "function": {}}]},
            "no_tool_call: not a call (no string 'name')",
        ),
        # NaN in text arguments is not JSON, so no call is found; the reason says why.
        (
            '{"name": "get_weather", "arguments": {"city": "Paris", "days": NaN}}',
            "no_tool_call: no tool_calls and the text's JSON is invalid (NaN is not valid JSON)",
        ),
    ],
)
def test_rejects(completion, reason):
    verdict = judge(completion)
    assert not verdict.passed
    assert verdict.reason == reason


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        # The expected tool must be offered.
        ({**PARAMS, "expected": {"name": "nope", "arguments": {}}}, "expected tool 'nope' is not among tools"),
        # Expected arguments must satisfy the tool's own schema.
        (
            {**PARAMS, "expected": {"name": "get_weather", "arguments": {"city": "Paris", "days": 0}}},
            "expected arguments break the tool's parameters schema: /days: 0 is less than the minimum of 1",
        ),
        # A tool's parameters must be a valid JSON Schema.
        (
            {
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}],
                "expected": {"name": "f", "arguments": {}},
            },
            "parameters is not a valid JSON Schema",
        ),
        # ... and refer to nothing outside themselves (no other document is fetched).
        (
            {
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"$ref": "shared.json"}}}],
                "expected": {"name": "f", "arguments": {}},
            },
            "parameters $ref 'shared.json' resolves to nothing in the schema",
        ),
        # Tool names must be unique.
        ({**PARAMS, "tools": [WEATHER, WEATHER]}, "tool name 'get_weather' is repeated"),
        # Tools follow the OpenAI shape.
        ({**PARAMS, "tools": [{"name": "get_weather"}]}, "'type' is a required property"),
        # No tools at all.
        ({**PARAMS, "tools": []}, "should be non-empty"),
    ],
)
def test_params_problems(params, problem):
    problems = spec_problems({"name": "tool_call", "params": params})
    assert any(problem in p for p in problems), problems


def test_valid_params_have_no_problems():
    assert spec_problems({"name": "tool_call", "params": PARAMS}) == []


@pytest.mark.parametrize(
    "params",
    [
        # Arguments to get wrong.
        PARAMS,
        # No arguments: the wrong answer calls a tool that does not exist.
        {"tools": [SEARCH], "expected": {"name": "search", "arguments": {}}},
    ],
)
def test_wrong_answer_fails(params):
    wrong = VERIFIER.wrong_answer(params)
    assert json.loads(wrong)  # a real call, not prose
    assert not judge(wrong, params).passed


def test_verify_reads_tool_calls_from_a_conversation():
    # The registry's entry point passes message tool_calls through to the verifier.
    task = {"verifier": {"name": "tool_call", "params": PARAMS}}
    message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [openai_call("get_weather", {"city": "Paris", "days": 3})],
    }
    assert verify(task, [message]).passed


def test_a_call_followed_by_a_final_answer_still_made_the_call():
    # A multi-turn completion (TRL with tools): the call, the tool's result, then the model's closing text.
    task = {"verifier": {"name": "tool_call", "params": PARAMS}}
    weather = openai_call("get_weather", {"city": "Paris", "days": 3})
    call = {"role": "assistant", "content": "", "tool_calls": [weather]}
    result = {"role": "tool", "content": '{"forecast": "sun"}'}
    closing = {"role": "assistant", "content": "Sunny in Paris for the next three days."}
    assert verify(task, [call, result, closing]).passed
    # Calls count over every turn: calling again in a later turn is a second call.
    assert verify(task, [call, result, call]).reason == "multiple_tool_calls: expected exactly 1 call, got 2"
