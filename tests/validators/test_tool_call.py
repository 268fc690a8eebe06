"""tool_call: the expected calls, to the right tools, with acceptable arguments (BFCL's semantics), or none."""

import json

import pytest

from tests.paths import SEEDS
from validators.registry import REGISTRY, Completion, VerifyContext, spec_problems, verify
from validators.seeds import load_seeds
from validators.verifiers.tool_call import gold_calls, json_schema_of

VERIFIER = REGISTRY.get("tool_call")
CONTEXT = VerifyContext(seeds_dir=SEEDS)

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

# BFCL function docs ("dict" for object, python-ish types) with a possible_answer in BFCL's ground-truth format.
AREA = {
    "name": "geometry.area",
    "description": "Area of a shape.",
    "parameters": {
        "type": "dict",
        "required": ["shape", "size"],
        "properties": {
            "shape": {"type": "string", "enum": ["circle", "square"]},
            "size": {"type": "float"},
            "unit": {"type": "string", "description": "Default 'units'."},
            "precise": {"type": "boolean"},
            "corners": {"type": "array", "items": {"type": "tuple"}},
            "style": {"type": "dict", "properties": {"color": {"type": "string"}, "width": {"type": "integer"}}},
            "tag": {"type": "any"},
        },
    },
}
SPOTIFY = {
    "name": "spotify.play",
    "description": "Play an artist for some minutes.",
    "parameters": {
        "type": "dict",
        "required": ["artist", "duration"],
        "properties": {"artist": {"type": "string"}, "duration": {"type": "integer"}},
    },
}
BFCL = {
    "tools": [AREA, SPOTIFY],
    "possible_answer": [
        {
            "geometry.area": {
                "shape": ["circle"],
                "size": [2.0, 2.5],
                "unit": ["units", ""],
                "corners": [[[0, 1], [1, 0]], ""],
                "style": [{"color": ["red", "crimson"], "width": [2, ""]}, ""],
                "tag": ["", 7],
            }
        }
    ],
}
PARALLEL = {
    "tools": [SPOTIFY, AREA],
    "possible_answer": [
        {"spotify.play": {"artist": ["Taylor Swift"], "duration": [20]}},
        {"spotify.play": {"artist": ["Maroon 5", "Maroon Five"], "duration": [15, 20]}},
    ],
    "string_match": "bfcl",
}
TWINS = {
    "tools": [SPOTIFY],
    "possible_answer": [
        {"spotify.play": {"artist": ["Queen"], "duration": [15, 20]}},
        {"spotify.play": {"artist": ["Queen"], "duration": [20]}},
    ],
}
IRRELEVANT = {"tools": [AREA, SPOTIFY], "possible_answer": []}


def openai_call(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def text_call(name, arguments):
    return json.dumps({"name": name, "arguments": arguments})


def area(**arguments):
    return text_call("geometry.area", {"shape": "circle", "size": 2.0, **arguments})


def play(*pairs):
    calls = [openai_call("spotify.play", {"artist": artist, "duration": minutes}) for artist, minutes in pairs]
    return {"role": "assistant", "content": "", "tool_calls": calls}


def judge(completion, params=PARAMS):
    return VERIFIER.check(params, Completion.from_any(completion), CONTEXT)


@pytest.mark.parametrize(
    ("completion", "params"),
    [
        # OpenAI message with arguments as a JSON string (the API's wire format).
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [openai_call("get_weather", '{"city": "Paris", "days": 3}')],
            },
            PARAMS,
        ),
        # Arguments already parsed into a dict (TRL's response parser does this).
        (
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [openai_call("get_weather", {"city": "Paris", "days": 3})],
            },
            PARAMS,
        ),
        # Conversational completion: a list with one assistant message.
        (
            [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [openai_call("get_weather", {"city": "Paris", "days": 3})],
                }
            ],
            PARAMS,
        ),
        # A JSON call in plain text.
        ('{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}', PARAMS),
        # Hermes/Qwen style tags around the JSON, prose before them.
        (
            'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>',
            PARAMS,
        ),
        # Llama 3 style "parameters" key, inside a fence.
        ('```json\n{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}\n```', PARAMS),
        # A JSON list holding exactly one call.
        ('[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]', PARAMS),
        # The gold's first acceptable values; optional arguments ("" among the values) left out.
        (area(), BFCL),
        # Another acceptable value; an integer where BFCL declares a float (BFCL converts it).
        (area(size=2.5), BFCL),
        (area(size=2), BFCL),
        # Optional arguments given with acceptable values; a nested object's own optional key left out.
        (area(unit="units", style={"color": "crimson"}, tag=7), BFCL),
        # A list of BFCL "tuple"s as JSON arrays, element by element.
        (area(corners=[[0, 1], [1, 0]]), BFCL),
        # Parallel calls in any order; an acceptable alternative in the second.
        (play(("Maroon Five", 15), ("Taylor Swift", 20)), PARALLEL),
        # Matching is one to one and order-free: (Queen, 20) fits both expected calls, and a first-fit pairing
        # (BFCL's) gives it the first, leaving nothing for (Queen, 15); a maximum matching pairs both.
        (play(("Queen", 20), ("Queen", 15)), TWINS),
        # With string_match: bfcl, strings compare as BFCL does: case, spaces and ,./-_*^ ignored.
        (play(("taylor swift", 20), ("MAROON-5", 15)), PARALLEL),
        # The same two calls as two Hermes blocks in text.
        (
            "<tool_call>"
            + text_call("spotify.play", {"artist": "Maroon 5", "duration": 15})
            + "</tool_call>\n<tool_call>"
            + text_call("spotify.play", {"artist": "Taylor Swift", "duration": 20})
            + "</tool_call>",
            PARALLEL,
        ),
        # No call expected (BFCL's irrelevance): a plain-text answer passes.
        ("None of these tools can tell the time.", IRRELEVANT),
        # ... and so does JSON that is not a call.
        ('{"answer": "no tool applies"}', IRRELEVANT),
    ],
)
def test_accepts(completion, params):
    verdict = judge(completion, params)
    assert verdict.passed, verdict.reason


@pytest.mark.parametrize(
    ("completion", "params", "reason"),
    [
        # Prose, no call.
        ("It is sunny in Paris.", PARAMS, "no_tool_call: no tool_calls and no JSON in the text"),
        # JSON that is not a call.
        ('{"city": "Paris"}', PARAMS, "no_tool_call: not a call (no string 'name')"),
        # A tool that was not offered.
        ('{"name": "get_forecast", "arguments": {"city": "Paris"}}', PARAMS, "unknown_tool: get_forecast"),
        # An offered but wrong tool.
        (
            '{"name": "search", "arguments": {"q": "Paris weather"}}',
            PARAMS,
            "wrong_tool: expected get_weather, got search",
        ),
        # Two calls where one is expected: spraying calls is not rewarded.
        (
            {"role": "assistant", "tool_calls": [openai_call("get_weather", {"city": "Paris", "days": 3})] * 2},
            PARAMS,
            "extra_call: expected 1 call, got 2",
        ),
        # The right call and then another one in a second Hermes block: a runtime would run both.
        (
            '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}</tool_call>\n'
            '<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>',
            PARAMS,
            "extra_call: expected 1 call, got 2",
        ),
        # Every object in the text is looked at: a second call behind many junk objects still counts.
        (
            '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
            + " {}" * 40
            + ' {"name": "search", "arguments": {"q": "x"}}',
            PARAMS,
            "extra_call: expected 1 call, got 2",
        ),
        # A draft call and a final call in two fences are two calls, not a final answer and a scratchpad.
        (
            '```json\n{"name": "search", "arguments": {"q": "x"}}\n```\n'
            '```json\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n```',
            PARAMS,
            "extra_call: expected 1 call, got 2",
        ),
        # Arguments as a JSON string with a wrong type.
        (
            {"role": "assistant", "tool_calls": [openai_call("get_weather", '{"city": "Paris", "days": "3"}')]},
            PARAMS,
            "wrong_type: /days expected integer, got string '3'",
        ),
        # An integral float where the tool declares an integer: BFCL's type rule (the tool would get a float).
        (
            '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3.0}}',
            PARAMS,
            "wrong_type: /days expected integer, got number 3.0",
        ),
        # A boolean is not a number, even where the number would be 1.
        (area(size=True), BFCL, "wrong_type: /size expected number, got boolean true"),
        # Nested types are checked too.
        (
            area(style={"color": "red", "width": "2"}),
            BFCL,
            "wrong_type: /style/width expected integer, got string '2'",
        ),
        # Arguments string that is not JSON.
        (
            {"role": "assistant", "tool_calls": [openai_call("get_weather", '{"city": Paris}')]},
            PARAMS,
            "arguments_invalid: arguments are not JSON (line 1 col 10)",
        ),
        # Arguments that are JSON but not an object.
        (
            {"role": "assistant", "tool_calls": [openai_call("get_weather", "[1, 2]")]},
            PARAMS,
            "arguments_invalid: arguments must be an object, got list",
        ),
        # A value outside the tool's enum.
        (area(shape="hexagon"), BFCL, "arguments_invalid: /shape: 'hexagon' is not one of ['circle', 'square']"),
        # An argument the tool does not declare.
        (
            '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "country": "FR"}}',
            PARAMS,
            "unknown_argument: /country is not an expected argument",
        ),
        # An optional argument the schema allows but the task did not ask for (the request did not state it).
        (
            '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "unit": "celsius"}}',
            PARAMS,
            "unknown_argument: /unit is not an expected argument",
        ),
        # ... and in BFCL's format, an optional argument the gold does not list.
        (area(precise=True), BFCL, "unknown_argument: /precise is not an expected argument"),
        # A key of an object argument that the gold does not list.
        (area(style={"color": "red", "dash": "x"}), BFCL, "unknown_argument: /style/dash is not an expected argument"),
        # A required argument is missing.
        (
            '{"name": "get_weather", "arguments": {"days": 3}}',
            PARAMS,
            "missing_argument: /city is required by get_weather",
        ),
        # An expected optional argument left out.
        (
            '{"name": "get_weather", "arguments": {"city": "Paris"}}',
            PARAMS,
            "missing_argument: /days expected 3, got nothing",
        ),
        # A required key of an object argument left out.
        (
            area(style={"width": 2}),
            BFCL,
            "missing_argument: /style/color expected one of 'red', 'crimson', got nothing",
        ),
        # Strings are exact by default: case matters.
        (
            '{"name": "get_weather", "arguments": {"city": "paris", "days": 3}}',
            PARAMS,
            "argument_mismatch: /city expected 'Paris', got 'paris'",
        ),
        # A wrong number.
        (
            '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}',
            PARAMS,
            "argument_mismatch: /days expected 3, got 2",
        ),
        # A value that is none of the acceptable ones.
        (area(size=3.0), BFCL, "argument_mismatch: /size expected one of 2.0, 2.5, got 3.0"),
        # Lists compare in order, element by element.
        (area(corners=[[1, 0], [0, 1]]), BFCL, "argument_mismatch: /corners/0/0 expected 0, got 1"),
        # A list of another length.
        (area(corners=[[0, 1]]), BFCL, "argument_mismatch: /corners expected [[0, 1], [1, 0]], got [[0, 1]]"),
        # Native tool_calls win over text: the text's correct call does not rescue a wrong native one.
        (
            {
                "role": "assistant",
                "content": '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}',
                "tool_calls": [openai_call("search", {"q": "x"})],
            },
            PARAMS,
            "wrong_tool: expected get_weather, got search",
        ),
        # A malformed tool_calls item without a function name.
        (
            {"role": "assistant", "tool_calls": [{"type": "function", "function": {}}]},
            PARAMS,
            "no_tool_call: not a call (no string 'name')",
        ),
        # NaN in text arguments is not JSON, so no call is found; the reason says why.
        (
            '{"name": "get_weather", "arguments": {"city": "Paris", "days": NaN}}',
            PARAMS,
            "no_tool_call: no tool_calls and the text's JSON is invalid (NaN is not valid JSON)",
        ),
        # Parallel: one of two expected calls.
        (play(("Taylor Swift", 20)), PARALLEL, "missing_call: expected 2 calls, got 1"),
        # Parallel: the same call twice does not stand for two different ones.
        (
            play(("Taylor Swift", 20), ("Taylor Swift", 20)),
            PARALLEL,
            "argument_mismatch: /artist expected one of 'Maroon 5', 'Maroon Five', got 'Taylor Swift'",
        ),
        # Parallel: a third call.
        (play(("Taylor Swift", 20), ("Maroon 5", 15), ("Queen", 5)), PARALLEL, "extra_call: expected 2 calls, got 3"),
        # Parallel: a call to another offered tool in place of an expected one.
        (
            {"role": "assistant", "tool_calls": [*play(("Taylor Swift", 20))["tool_calls"], json.loads(area())]},
            PARALLEL,
            "wrong_tool: expected spotify.play, got geometry.area",
        ),
        # No call expected: a call in text fails, also after prose.
        (
            "I will compute it. " + area(),
            IRRELEVANT,
            "unexpected_tool_call: expected no call, got 1: geometry.area",
        ),
        # ... and a native call, even to a tool that was not offered.
        (
            {"role": "assistant", "tool_calls": [openai_call("calculator", {})]},
            IRRELEVANT,
            "unexpected_tool_call: expected no call, got 1: calculator",
        ),
    ],
)
def test_rejects(completion, params, reason):
    verdict = judge(completion, params)
    assert not verdict.passed
    assert verdict.reason == reason


def test_the_issues_reykjavik_case_passes_with_the_seeds_alternatives():
    # The tool's description allows the city with its country; the seed lists both spellings (possible_answer).
    seeds = load_seeds([SEEDS / "tool_call"], root=SEEDS.parent, context=CONTEXT)
    [task] = [t for t in seeds.tasks if "Reykjavik" in t["prompt"][-1]["content"]]
    assert verify(task, text_call("get_current_weather", {"location": "Reykjavik, Iceland"}), context=CONTEXT).passed
    assert verify(task, text_call("get_current_weather", {"location": "Reykjavik"}), context=CONTEXT).passed
    wrong = verify(task, text_call("get_current_weather", {"location": "Reykjavik, Norway"}), context=CONTEXT)
    assert wrong.code == "argument_mismatch"


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        # The expected tool must be offered.
        ({**PARAMS, "expected": {"name": "nope", "arguments": {}}}, "expected tool 'nope' is not among tools"),
        # ... in possible_answer too.
        ({**BFCL, "possible_answer": [{"nope": {}}]}, "expected tool 'nope' is not among tools"),
        # Expected arguments must satisfy the tool's own schema.
        (
            {**PARAMS, "expected": {"name": "get_weather", "arguments": {"city": "Paris", "days": 0}}},
            "expected arguments break the tool's parameters schema: /days: 0 is less than the minimum of 1",
        ),
        # Every acceptable value is checked, not only the first.
        (
            {**BFCL, "possible_answer": [{"geometry.area": {"shape": ["circle", "hexagon"], "size": [1]}}]},
            "expected arguments break the tool's parameters schema: /shape: 'hexagon' is not one of",
        ),
        # An acceptable value of the wrong type (BFCL's data has a few: a boolean for a string).
        (
            {**BFCL, "possible_answer": [{"geometry.area": {"shape": ["circle"], "size": [1], "unit": [True]}}]},
            "expected arguments break the tool's declared types: /unit expected string, got boolean true",
        ),
        # An argument the BFCL function does not declare: no call could both give it and be valid.
        (
            {**BFCL, "possible_answer": [{"geometry.area": {"shape": ["circle"], "size": [1], "depth": [2]}}]},
            "Additional properties are not allowed ('depth' was unexpected)",
        ),
        # A required argument the gold leaves out.
        ({**BFCL, "possible_answer": [{"geometry.area": {"shape": ["circle"]}}]}, "'size' is a required property"),
        # An argument with no acceptable value and no "".
        (
            {**BFCL, "possible_answer": [{"geometry.area": {"shape": ["circle"], "size": [1], "tag": []}}]},
            "argument 'tag' has no acceptable value (/verifier/params/possible_answer/0/geometry.area/tag)",
        ),
        # Nested acceptable values must be lists, as at the top.
        (
            {
                **BFCL,
                "possible_answer": [
                    {"geometry.area": {"shape": ["circle"], "size": [1], "style": [{"color": "red"}]}}
                ],
            },
            "acceptable values must be a list, got 'red' (/verifier/params/possible_answer/0/geometry.area/style/0/",
        ),
        # One form of gold, not two, and not none.
        ({**PARAMS, "possible_answer": []}, "give the gold as one of expected (one call) or possible_answer"),
        ({"tools": [WEATHER]}, "give the gold as one of expected (one call) or possible_answer"),
        # string_match is exact or bfcl.
        ({**PARAMS, "string_match": "fuzzy"}, "'fuzzy' is not one of ['exact', 'bfcl']"),
        # A tool's parameters must be a valid JSON Schema.
        (
            {
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}],
                "expected": {"name": "f", "arguments": {}},
            },
            "parameters is not a valid JSON Schema",
        ),
        # ... also a BFCL doc's, once its types are read as JSON Schema ones.
        (
            {
                "tools": [{"name": "f", "parameters": {"type": "dict", "properties": {"x": {"type": "strnig"}}}}],
                "possible_answer": [],
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
        # A tool is an OpenAI spec or a BFCL function doc; a bare name is neither.
        ({**PARAMS, "tools": [{"name": "get_weather"}]}, "'parameters' is a required property"),
        ({**PARAMS, "tools": [{"type": "function", "name": "get_weather"}]}, "'function' is a required property"),
        # No tools at all.
        ({**PARAMS, "tools": []}, "should be non-empty"),
    ],
)
def test_params_problems(params, problem):
    problems = spec_problems({"name": "tool_call", "params": params})
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize("params", [PARAMS, BFCL, PARALLEL, IRRELEVANT])
def test_valid_params_have_no_problems(params):
    assert spec_problems({"name": "tool_call", "params": params}) == []


@pytest.mark.parametrize(
    ("parameters", "schema"),
    [
        # dict -> object, float -> number, and a BFCL function takes no parameter it does not declare.
        (
            {"type": "dict", "properties": {"x": {"type": "float"}}},
            {"type": "object", "properties": {"x": {"type": "number"}}, "additionalProperties": False},
        ),
        # tuple -> array, inside items too; "any" drops the type.
        (
            {"type": "dict", "properties": {"p": {"type": "array", "items": {"type": "tuple"}}, "v": {"type": "any"}}},
            {
                "type": "object",
                "properties": {"p": {"type": "array", "items": {"type": "array"}}, "v": {}},
                "additionalProperties": False,
            },
        ),
        # A property named "type" is a property, and enum values are data.
        (
            {"type": "dict", "properties": {"type": {"type": "string", "enum": ["dict", "float"]}}},
            {
                "type": "object",
                "properties": {"type": {"type": "string", "enum": ["dict", "float"]}},
                "additionalProperties": False,
            },
        ),
    ],
)
def test_bfcl_docs_read_as_json_schema(parameters, schema):
    assert json_schema_of(parameters) == schema


@pytest.mark.parametrize(
    ("params", "gold"),
    [
        # The expected call as it is.
        (PARAMS, [{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]),
        # First acceptable values, optional arguments left out.
        (BFCL, [{"name": "geometry.area", "arguments": {"shape": "circle", "size": 2.0}}]),
        # An optional argument the tool requires stays in.
        (
            {"tools": [SPOTIFY], "possible_answer": [{"spotify.play": {"artist": ["", "Queen"], "duration": [5]}}]},
            [{"name": "spotify.play", "arguments": {"artist": "Queen", "duration": 5}}],
        ),
        # No call expected.
        (IRRELEVANT, []),
    ],
)
def test_gold_calls_pass(params, gold):
    assert gold_calls(params) == gold
    text = json.dumps(gold) if gold else "No tool fits."
    assert judge(text, params).passed


@pytest.mark.parametrize(
    "params",
    [
        # Arguments to get wrong.
        PARAMS,
        # BFCL's format.
        BFCL,
        # The altered value (6) is itself acceptable: it is altered again.
        {"tools": [SPOTIFY], "possible_answer": [{"spotify.play": {"artist": ["Queen"], "duration": [5, 6]}}]},
        # Both booleans are acceptable: nothing to alter, so the wrong answer calls a tool that does not exist.
        {
            "tools": [{"name": "lamp", "parameters": {"type": "dict", "properties": {"on": {"type": "boolean"}}}}],
            "possible_answer": [{"lamp": {"on": [True, False]}}],
        },
        # No arguments: the wrong answer calls a tool that does not exist.
        {"tools": [SEARCH], "expected": {"name": "search", "arguments": {}}},
        # No call expected: any call is wrong.
        IRRELEVANT,
        # Parallel calls.
        PARALLEL,
    ],
)
def test_wrong_answer_fails(params):
    wrong = VERIFIER.wrong_answer(params)
    assert json.loads(wrong)  # a real call, not prose
    assert not judge(wrong, params).passed


@pytest.mark.parametrize(
    ("params", "names"),
    [
        # Another tool is offered; the tool has an optional argument the task does not ask for.
        (PARAMS, ["call_every_tool", "call_every_tool_parallel", "every_optional_argument", "duplicated_call"]),
        # Every declared argument is in the gold: no optional one to add.
        (
            {"tools": [SPOTIFY], "possible_answer": [{"spotify.play": {"artist": ["Queen"], "duration": [5]}}]},
            ["duplicated_call"],
        ),
        # No call expected: calling the tools is the attack.
        (IRRELEVANT, ["call_every_tool", "call_every_tool_parallel"]),
    ],
)
def test_hack_probes_fit_the_task(params, names):
    probes = VERIFIER.hack_probes(params, None, VerifyContext())
    assert [p.name for p in probes] == names
    for probe in probes:
        assert not judge(probe.completion, params).passed, probe.name


def test_every_hack_probe_fails_on_every_bundled_seed():
    seeds = load_seeds([SEEDS / "tool_call"], root=SEEDS.parent, context=CONTEXT)
    assert len(seeds.tasks) >= 20
    seen = []
    for task in seeds.tasks:
        verifier = REGISTRY.get("tool_call", task["verifier"]["version"])
        probes = verifier.hack_probes(task["verifier"]["params"], task["reference"], VerifyContext())
        # Every seed offers several tools, so the spraying attacks always apply.
        assert {"call_every_tool", "call_every_tool_parallel", "duplicated_call"} <= {p.name for p in probes}
        for probe in probes:
            verdict = verify(task, probe.completion, context=CONTEXT)
            assert not verdict.passed, (task["origin"], probe.name)
            seen.append(probe.name)
    # Seeds whose request leaves an optional argument out also get the every-argument attack.
    assert "every_optional_argument" in seen


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
    assert verify(task, [call, result, call]).reason == "extra_call: expected 1 call, got 2"
