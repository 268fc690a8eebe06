"""`tool_call`: the completion makes the expected tool calls, in any order, each with acceptable arguments.

The semantics are those of the Berkeley Function Calling Leaderboard's AST checker (BFCL), reimplemented here;
`tests/validators/test_tool_call_bfcl.py` measures the agreement with BFCL's own checker on its data.

**The gold**, one of:

- `expected: {name, arguments}`: one call, every argument exactly this value (objects and lists included).
- `possible_answer`: BFCL's ground-truth format, a list of calls `{tool: {argument: [acceptable values]}}`. A
  `""` among the values means the argument may be left out. An object value lists acceptable values per key
  the same way (`{"unit": ["km", ""]}`); a list value is one acceptable list, compared element by element (its
  object elements list values per key too). `possible_answer: []` expects no call at all (BFCL's
  irrelevance): any call fails, a plain-text answer passes.

**Tools** are OpenAI tool specs (`{"type": "function", "function": {name, parameters}}`) or BFCL function docs
(`{name, description, parameters}`, where `parameters` uses BFCL's types: `dict` for object, `float`, `tuple`,
`any`; a BFCL function takes no parameter it does not declare).

**Where the calls come from.** `Completion.tool_calls` (OpenAI style; arguments a JSON string or an object)
when there are any, the text ignored. Otherwise every JSON object in the text that is a call: `{"name",
"arguments"}`, `{"name", "parameters"}` (Llama 3), the OpenAI item, `{"tool_calls": [...]}`, or a JSON array
of those, so Hermes-style `<tool_call>{...}</tool_call>` tags work, several of them being several calls. A
second call written after the first is a second call, never ignored: a runtime would run it.

**Rules**, in the order they are checked (the first failure is the reason):

1. As many calls as expected (`extra_call`, `missing_call`; with no call at all, `no_tool_call`; when no call is
   expected, any call is `unexpected_tool_call`). Calls pair with expected calls one to one regardless of order
   (a maximum bipartite matching, so a call that fits two expected calls never blocks another).
2. Per call: a tool that was offered (`unknown_tool`), the expected one (`wrong_tool`), arguments that are a
   JSON object (`arguments_invalid`).
3. Every argument the tool requires is given (`missing_argument`). Every argument given is one the gold lists
   (`unknown_argument`): an optional argument nobody asked for fails, as in BFCL, so filling in every optional
   argument is not a way to be paid.
4. Types as the tool declares them (`wrong_type`), nested ones included: an integer where a number (BFCL:
   `float`) is declared is fine, a float where an integer is declared is not (`3.0` included: the tool would
   receive a float), booleans are not numbers, `any` takes anything.
5. The rest of the tool's JSON Schema: enum, pattern, bounds (`arguments_invalid`).
6. Every value is an acceptable one (`argument_mismatch`; an argument or object key of the gold left out
   without `""`: `missing_argument`; an object key the gold does not list: `unknown_argument`). Numbers compare
   numerically; strings exactly, or with `string_match: bfcl`, as BFCL compares them (case, spaces and
   `,./-_*^` ignored, `'` read as `"`); lists element by element, in order; objects key by key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from core import SeedwheelError
from validators.compare import altered, show, values_equal
from validators.extract import balanced_objects, describe_json_error, extract_json, loads_strict
from validators.pointers import json_pointer
from validators.registry import Completion, HackProbe, Verdict, Verifier, VerifyContext, register
from validators.verifiers.json_schema import schema_definition_problems, schema_violation

StringMatch = Literal["exact", "bfcl"]
_NAME_PATTERN = "^[A-Za-z0-9_.-]{1,64}$"
_MISSING = object()
# Alterations of a gold value tried for a known-wrong answer (true -> false -> true: both may be acceptable).
_WRONG_ANSWER_TRIES = 4

_OPENAI_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "function"],
    "additionalProperties": False,
    "properties": {
        "type": {"const": "function"},
        "function": {
            "type": "object",
            "required": ["name"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "pattern": _NAME_PATTERN},
                "description": {"type": "string"},
                "parameters": {"type": "object"},
                "strict": {"type": "boolean"},
            },
        },
    },
}
_BFCL_FUNCTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "parameters"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": _NAME_PATTERN},
        "description": {"type": "string"},
        "parameters": {"type": "object"},
    },
}
# BFCL's python-ish type names in JSON Schema terms; "any" drops the type (anything goes).
_BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array"}
# Keywords whose values are data, not schemas: their "type" keys are left alone.
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})
_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, Mapping),
    "null": lambda v: v is None,
}


@dataclass(frozen=True)
class Acceptable:
    """What one argument (or one key of an object argument) may be: one of `values`, or absent if `optional`.

    A value is a pattern: a scalar, a list of patterns (element by element), or a `{key: Acceptable}` mapping.
    """

    values: tuple[Any, ...]
    optional: bool = False


@dataclass(frozen=True)
class ExpectedCall:
    """One call the task expects: the tool's name and what each argument may be."""

    name: str
    arguments: Mapping[str, Acceptable]


class GoldFormatError(SeedwheelError, ValueError):
    """A `possible_answer` that is not in BFCL's ground-truth format; the message ends with its JSON Pointer."""


def _bfcl_fold(text: str) -> str:
    """BFCL's string normalisation: no spaces or `,./-_*^`, lower case, `'` read as `"`."""
    return re.sub(r"[ ,./\-_*^]", "", text).lower().replace("'", '"')


def _fold_for(string_match: StringMatch) -> Callable[[str], str]:
    return _bfcl_fold if string_match == "bfcl" else str


def json_schema_of(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A BFCL function's `parameters` as JSON Schema: `dict` -> object, `float` -> number, `tuple` -> array,
    `any` -> no type; the top level takes no undeclared parameter (BFCL's rule).

    Args:
        parameters: the `parameters` of a BFCL function doc.

    Returns:
        A JSON Schema (draft 2020-12) for the call's arguments object.

    Example:
        >>> json_schema_of({"type": "dict", "properties": {"x": {"type": "float"}}, "required": ["x"]})
        {'type': 'object', 'properties': {'x': {'type': 'number'}}, 'required': ['x'], 'additionalProperties': False}
    """
    schema = _converted(parameters)
    return {**schema, "additionalProperties": schema.get("additionalProperties", False)}


def _converted(node: Any) -> Any:
    if isinstance(node, list):
        return [_converted(item) for item in node]
    if not isinstance(node, Mapping):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type" and value == "any":
            continue
        if key == "type" and isinstance(value, str):
            out[key] = _BFCL_TYPES.get(value, value)
        elif key == "properties" and isinstance(value, Mapping):
            out[key] = {name: _converted(sub) for name, sub in value.items()}
        else:
            out[key] = value if key in _DATA_KEYWORDS else _converted(value)
    return out


def tool_parameters(params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each offered tool's arguments schema (JSON Schema; BFCL docs converted), by tool name.

    Args:
        params: a `tool_call` task's verifier params.

    Returns:
        `{tool name: JSON Schema of its arguments object}`, in the order offered.

    Example:
        >>> tool_parameters({"tools": [{"name": "f", "parameters": {"type": "dict", "properties": {}}}]})
        {'f': {'type': 'object', 'properties': {}, 'additionalProperties': False}}
    """
    tools: dict[str, dict[str, Any]] = {}
    for tool in params["tools"]:
        if "function" in tool:
            tools[tool["function"]["name"]] = dict(tool["function"].get("parameters", {}))
        else:
            tools[tool["name"]] = json_schema_of(tool["parameters"])
    return tools


def _exact(value: Any) -> Any:
    """An `expected` value as a pattern: objects key by key, each key required and exact."""
    if isinstance(value, Mapping):
        return {key: Acceptable((_exact(v),)) for key, v in value.items()}
    if isinstance(value, list):
        return [_exact(v) for v in value]
    return value


def _is_omission(value: Any) -> bool:
    return isinstance(value, str) and not value


def _acceptable(values: Any, where: str) -> Acceptable:
    """BFCL's `[value, ..., ""]` as an `Acceptable`."""
    if not isinstance(values, list):
        raise GoldFormatError(f"acceptable values must be a list, got {show(values)} ({where})")
    patterns = tuple(_pattern(v, f"{where}/{i}") for i, v in enumerate(values) if not _is_omission(v))
    return Acceptable(patterns, optional=any(_is_omission(v) for v in values))


def _pattern(value: Any, where: str) -> Any:
    if isinstance(value, Mapping):
        return {key: _acceptable(v, json_pointer([key], prefix=where)) for key, v in value.items()}
    if isinstance(value, list):
        return [_pattern(v, f"{where}/{i}") for i, v in enumerate(value)]
    return value


def _gold_pointer(params: Mapping[str, Any], i: int, name: str) -> str:
    if "expected" in params:
        return "/verifier/params/expected/arguments"
    return json_pointer(["possible_answer", i, name], prefix="/verifier/params")


def expected_calls(params: Mapping[str, Any]) -> list[ExpectedCall]:
    """The calls a task expects, from `expected` or `possible_answer`, as patterns of acceptable values.

    Args:
        params: a `tool_call` task's verifier params (already checked against the params schema).

    Returns:
        The expected calls in the gold's order; empty when the task expects no call.

    Raises:
        GoldFormatError: `possible_answer` is not in BFCL's format (the message says where).

    Example:
        >>> expected_calls({"possible_answer": [{"f": {"x": [1, ""]}}]})
        [ExpectedCall(name='f', arguments={'x': Acceptable(values=(1,), optional=True)})]
    """
    if "expected" in params:
        name, arguments = params["expected"]["name"], params["expected"]["arguments"]
        return [ExpectedCall(name, {key: Acceptable((_exact(v),)) for key, v in arguments.items()})]
    calls = []
    for i, call in enumerate(params["possible_answer"]):
        ((name, arguments),) = call.items()
        where = _gold_pointer(params, i, name)
        calls.append(ExpectedCall(name, {k: _acceptable(v, json_pointer([k], where)) for k, v in arguments.items()}))
    return calls


def _instance(pattern: Any, k: int = 0) -> Any:
    """A plain value the pattern accepts: the k-th acceptable value at every level (the last where fewer)."""
    if isinstance(pattern, Mapping):
        return {
            key: _instance(acc.values[min(k, len(acc.values) - 1)], k) for key, acc in pattern.items() if acc.values
        }
    if isinstance(pattern, list):
        return [_instance(p, k) for p in pattern]
    return pattern


def _alternatives(pattern: Any) -> int:
    """The most acceptable values at any one place in a pattern: that many instances show every one of them."""
    if isinstance(pattern, Mapping):
        counts = [max(len(acc.values), *map(_alternatives, acc.values)) for acc in pattern.values() if acc.values]
        return max([1, *counts])
    if isinstance(pattern, list):
        return max([1, *map(_alternatives, pattern)])
    return 1


def _gold_arguments(call: ExpectedCall, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The first acceptable value of every argument, leaving out those the gold and the tool let go."""
    required = schema.get("required", [])
    return {
        name: _instance(acc.values[0])
        for name, acc in call.arguments.items()
        if acc.values and (not acc.optional or name in required)
    }


def gold_calls(params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Plain calls `{name, arguments}` that pass: each argument's first acceptable value, optional ones left out.

    Args:
        params: a `tool_call` task's verifier params.

    Returns:
        One call per expected call, in the gold's order (empty when no call is expected).

    Example:
        >>> tools = [{"name": "f", "parameters": {"type": "dict", "properties": {}}}]
        >>> gold_calls({"tools": tools, "possible_answer": [{"f": {"city": ["Oslo", "Oslo, Norway"], "km": ["", 1]}}]})
        [{'name': 'f', 'arguments': {'city': 'Oslo'}}]
    """
    tools = tool_parameters(params)
    return [
        {"name": call.name, "arguments": _gold_arguments(call, tools.get(call.name, {}))}
        for call in expected_calls(params)
    ]


def _is_type(value: Any, declared: Any) -> bool:
    names = [declared] if isinstance(declared, str) else declared
    return any(_JSON_TYPES[name](value) if name in _JSON_TYPES else True for name in names)


def _json_type(value: Any) -> str:
    kinds = ("boolean", "integer", "number", "string", "array", "object", "null")
    return next((kind for kind in kinds if _JSON_TYPES[kind](value)), type(value).__name__)


def _type_problem(value: Any, schema: Any, pointer: str) -> str | None:
    """Where `value` is not of the type its schema declares (inside arrays and objects too), or None."""
    if not isinstance(schema, Mapping):
        return None
    declared = schema.get("type")
    if declared is not None and not _is_type(value, declared):
        wanted = declared if isinstance(declared, str) else " or ".join(declared)
        return f"{pointer or '/'} expected {wanted}, got {_json_type(value)} {show(value)}"
    if isinstance(value, list):
        for i, item in enumerate(value):
            problem = _type_problem(item, schema.get("items"), f"{pointer}/{i}")
            if problem:
                return problem
    if isinstance(value, Mapping) and isinstance(schema.get("properties"), Mapping):
        for key, item in value.items():
            problem = _type_problem(item, schema["properties"].get(key), json_pointer([key], pointer))
            if problem:
                return problem
    return None


def _matches(value: Any, pattern: Any, fold: Callable[[str], str]) -> bool:
    if isinstance(pattern, Mapping):
        return (
            isinstance(value, Mapping)
            and all(key in pattern for key in value)
            and all(_fits(value.get(key, _MISSING), acc, fold) for key, acc in pattern.items())
        )
    if isinstance(pattern, list):
        return (
            isinstance(value, list)
            and len(value) == len(pattern)
            and all(_matches(v, p, fold) for v, p in zip(value, pattern, strict=True))
        )
    if isinstance(pattern, str):
        return isinstance(value, str) and fold(value) == fold(pattern)
    return values_equal(pattern, value)


def _fits(value: Any, acceptable: Acceptable, fold: Callable[[str], str]) -> bool:
    if value is _MISSING:
        return acceptable.optional
    return any(_matches(value, pattern, fold) for pattern in acceptable.values)


def _describe(acceptable: Acceptable) -> str:
    shown = [show(_instance(pattern)) for pattern in acceptable.values]
    return shown[0] if len(shown) == 1 else f"one of {', '.join(shown)}"


def _mismatch(value: Any, acceptable: Acceptable, pointer: str, fold: Callable[[str], str]) -> Verdict | None:
    """Why `value` (or `_MISSING`) is not acceptable, as a failed verdict; None when it is."""
    if _fits(value, acceptable, fold):
        return None
    if value is _MISSING:
        return Verdict.fail("missing_argument", f"{pointer} expected {_describe(acceptable)}, got nothing")
    if len(acceptable.values) == 1:
        return _pattern_mismatch(value, acceptable.values[0], pointer, fold)
    return Verdict.fail("argument_mismatch", f"{pointer} expected {_describe(acceptable)}, got {show(value)}")


def _pattern_mismatch(value: Any, pattern: Any, pointer: str, fold: Callable[[str], str]) -> Verdict:
    """The first place where `value` departs from a pattern it does not match."""
    if isinstance(pattern, Mapping) and isinstance(value, Mapping):
        for key in value:
            if key not in pattern:
                return Verdict.fail("unknown_argument", f"{json_pointer([key], pointer)} is not an expected argument")
        for key, acceptable in pattern.items():
            verdict = _mismatch(value.get(key, _MISSING), acceptable, json_pointer([key], pointer), fold)
            if verdict is not None:
                return verdict
    if isinstance(pattern, list) and isinstance(value, list) and len(pattern) == len(value):
        for i, (item, item_pattern) in enumerate(zip(value, pattern, strict=True)):
            if not _matches(item, item_pattern, fold):
                return _pattern_mismatch(item, item_pattern, f"{pointer}/{i}", fold)
    return Verdict.fail(
        "argument_mismatch", f"{pointer or '/'} expected {show(_instance(pattern))}, got {show(value)}"
    )


@dataclass(frozen=True)
class CheckedCall:
    """One call of the completion, and what its tool's schema alone says about it (no gold needed)."""

    name: str
    arguments: Mapping[str, Any]
    missing: Verdict | None  # a required argument left out
    invalid: Verdict | None  # a value of the wrong type, or against the rest of the schema


def parse_arguments(arguments: Any) -> Mapping[str, Any] | Verdict:
    """A call's arguments as an object: a JSON string is parsed (an empty one is `{}`), an object is kept.

    Returns:
        The arguments, or an `arguments_invalid` verdict saying why they are not a JSON object.

    Example:
        >>> parse_arguments('{"city": "Oslo"}'), parse_arguments("[1]").reason
        ({'city': 'Oslo'}, 'arguments_invalid: arguments must be an object, got list')
    """
    if isinstance(arguments, str):
        try:
            arguments = loads_strict(arguments) if arguments.strip() else {}
        except ValueError as exc:
            return Verdict.fail("arguments_invalid", f"arguments are not JSON ({describe_json_error(exc)})")
    if not isinstance(arguments, Mapping):
        return Verdict.fail("arguments_invalid", f"arguments must be an object, got {type(arguments).__name__}")
    return arguments


def check_call(name: str, arguments: Mapping[str, Any], schema: Mapping[str, Any]) -> CheckedCall:
    """What the tool's arguments schema alone says about a call: a required argument left out, a wrong type, a
    value against the rest of the schema (no gold needed)."""
    missing = invalid = None
    required = next((key for key in schema.get("required", []) if key not in arguments), None)
    if required is not None:
        missing = Verdict.fail("missing_argument", f"{json_pointer([required])} is required by {name}")
    problem = _type_problem(arguments, schema, "")
    if problem is not None:
        invalid = Verdict.fail("wrong_type", problem)
    elif (violation := schema_violation(schema, arguments)) is not None:
        invalid = Verdict.fail("arguments_invalid", violation)
    return CheckedCall(name, arguments, missing, invalid)


def _call_problem(call: CheckedCall, expected: ExpectedCall, fold: Callable[[str], str]) -> Verdict | None:
    """Why one call is not the expected one (rules 2-6 of the module docstring), or None when it is."""
    if call.name != expected.name:
        return Verdict.fail("wrong_tool", f"expected {expected.name}, got {call.name}")
    if call.missing is not None:
        return call.missing
    for key in call.arguments:
        if key not in expected.arguments:
            return Verdict.fail("unknown_argument", f"{json_pointer([key])} is not an expected argument")
    if call.invalid is not None:
        return call.invalid
    if _matches(call.arguments, expected.arguments, fold):
        return None
    return _pattern_mismatch(call.arguments, expected.arguments, "", fold)


def max_matching(fits: list[list[bool]]) -> list[int | None]:
    """For each row (a call), the column (an expected call) it pairs with in a maximum bipartite matching of
    `fits[row][column]` (None: unpaired)."""
    owner: dict[int, int] = {}  # expected call -> call

    def augment(i: int, seen: set[int]) -> bool:
        for j, ok in enumerate(fits[i]):
            if ok and j not in seen:
                seen.add(j)
                if j not in owner or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(len(fits)):
        augment(i, set())
    pairs: list[int | None] = [None] * len(fits)
    for j, i in owner.items():
        pairs[i] = j
    return pairs


def _calls_from_value(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("tool_calls"), list):
        return value["tool_calls"]
    return [value]


def name_and_arguments(call: Any) -> tuple[str | None, Any]:
    """The (name, raw arguments) of one call in any accepted shape; name None when it has none."""
    if not isinstance(call, Mapping):
        return None, None
    if isinstance(call.get("function"), Mapping):
        call = call["function"]
    name = call.get("name")
    arguments = call["arguments"] if "arguments" in call else call.get("parameters", {})
    return (name if isinstance(name, str) else None), arguments


def text_calls(text: str) -> list[Any]:
    """Every call in the text's JSON objects, in order (a second `<tool_call>` block is a second call).

    All of them: a cap would let a call hide behind enough junk objects. The outermost objects do not overlap,
    so parsing them all costs one pass over the text.
    """
    calls = []
    for start, end in balanced_objects(text):
        try:
            value = loads_strict(text[start:end])
        except ValueError:
            continue
        calls += [call for call in _calls_from_value(value) if name_and_arguments(call)[0] is not None]
    return calls


def _completion_calls(completion: Completion) -> list[Any] | Verdict:
    """The completion's calls (rules in the module docstring), or `no_tool_call` saying why there are none."""
    if completion.tool_calls:
        return list(completion.tool_calls)
    calls = text_calls(completion.text)
    if calls:
        return calls
    found = extract_json(completion.text)
    if found.error == "json_missing":
        return Verdict.fail("no_tool_call", "no tool_calls and no JSON in the text")
    if found.error is not None:
        problem = found.error.partition(": ")[2]
        return Verdict.fail("no_tool_call", f"no tool_calls and the text's JSON is invalid ({problem})")
    return _calls_from_value(found.value)


def placeholder(schema: Any) -> Any:
    """A value of the declared kind for an argument nobody asked for (its default, else the first enum value).

    Example:
        >>> placeholder({"type": "integer"}), placeholder({"enum": ["a", "b"]})
        (1, 'a')
    """
    if not isinstance(schema, Mapping):
        return "x"
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    declared = schema.get("type")
    kind = declared if isinstance(declared, str) else (declared or ["string"])[0]
    return {"integer": 1, "number": 1, "boolean": True, "array": [], "object": {}, "null": None}.get(kind, "x")


def _openai_message(calls: list[dict[str, Any]]) -> dict[str, Any]:
    items = [
        {"type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}} for c in calls
    ]
    return {"role": "assistant", "content": "", "tool_calls": items}


def tagged_calls(calls: list[dict[str, Any]]) -> str:
    """Calls `{name, arguments}` written as text, one `<tool_call>` block each (how a reference writes them)."""
    return "\n".join(f"<tool_call>\n{json.dumps(call, ensure_ascii=False)}\n</tool_call>" for call in calls)


@register
class ToolCall(Verifier):
    """The expected calls, in any order, each to the right tool with acceptable arguments (BFCL's semantics).

    Example:
        >>> tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
        >>> params = {"tools": tools, "expected": {"name": "weather", "arguments": {"city": "Paris"}}}
        >>> text = '{"name": "weather", "arguments": {"city": "paris"}}'
        >>> ToolCall().check(params, Completion(text), VerifyContext()).reason
        "argument_mismatch: /city expected 'Paris', got 'paris'"
    """

    name = "tool_call"
    version = 2
    params_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["tools"],
        "additionalProperties": False,
        "properties": {
            "tools": {
                "description": "The tools offered: OpenAI tool specs or BFCL function docs.",
                "type": "array",
                "minItems": 1,
                "items": {
                    "if": {"anyOf": [{"required": ["type"]}, {"required": ["function"]}]},
                    "then": _OPENAI_TOOL_SCHEMA,
                    "else": _BFCL_FUNCTION_SCHEMA,
                },
            },
            "expected": {
                "description": "The one call the model should make, every argument exactly this value.",
                "type": "object",
                "required": ["name", "arguments"],
                "additionalProperties": False,
                "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
            },
            "possible_answer": {
                "description": "BFCL's ground truth: [{tool: {argument: [acceptable values, '' = may be omitted]}}].",
                "type": "array",
                "items": {
                    "type": "object",
                    "minProperties": 1,
                    "maxProperties": 1,
                    "additionalProperties": {"type": "object", "additionalProperties": {"type": "array"}},
                },
            },
            "string_match": {
                "description": "exact (default), or bfcl: case, spaces and ,./-_*^ ignored, as BFCL compares strings.",
                "enum": ["exact", "bfcl"],
            },
        },
    }

    def params_problems(self, params: Mapping[str, Any], context: VerifyContext) -> list[str]:
        problems = super().params_problems(params, context)
        if problems:
            return problems  # the semantic checks below assume the shape is right
        if ("expected" in params) == ("possible_answer" in params):
            return [
                "give the gold as one of expected (one call) or possible_answer (BFCL's format) (/verifier/params)"
            ]
        tools = tool_parameters(params)
        names = [tool["function"]["name"] if "function" in tool else tool["name"] for tool in params["tools"]]
        for i, name in enumerate(names):
            where = f"/verifier/params/tools/{i}" + ("/function" if "function" in params["tools"][i] else "")
            if names.index(name) < i:
                problems.append(f"tool name '{name}' is repeated ({where}/name)")
            elif names.index(name) == i:
                problems += schema_definition_problems(tools[name], "parameters", f"{where}/parameters")
        try:
            calls = expected_calls(params)
        except GoldFormatError as exc:
            return [*problems, str(exc)]
        for i, call in enumerate(calls):
            where = _gold_pointer(params, i, call.name)
            if call.name not in tools:
                problems.append(
                    f"expected tool '{call.name}' is not among tools: {', '.join(names)} ({where.rsplit('/', 1)[0]})"
                )
            elif not problems:
                problems += _gold_problems(call, tools[call.name], where)
        return list(dict.fromkeys(problems))

    def check(self, params: Mapping[str, Any], completion: Completion, context: VerifyContext) -> Verdict:
        expected = expected_calls(params)
        if not expected:
            unexpected = list(completion.tool_calls) or text_calls(completion.text)
            if unexpected:
                names = ", ".join(str(name_and_arguments(call)[0]) for call in unexpected)
                return Verdict.fail("unexpected_tool_call", f"expected no call, got {len(unexpected)}: {names}")
            return Verdict.ok()
        calls = _completion_calls(completion)
        if isinstance(calls, Verdict):
            return calls
        if not calls:
            return Verdict.fail("no_tool_call", "empty list of calls")
        tools = tool_parameters(params)
        parsed: list[tuple[str, Mapping[str, Any]]] = []
        for call in calls:
            name, arguments = name_and_arguments(call)
            if name is None:
                return Verdict.fail("no_tool_call", "not a call (no string 'name')")
            if name not in tools:
                return Verdict.fail("unknown_tool", name)
            arguments = parse_arguments(arguments)
            if isinstance(arguments, Verdict):
                return arguments
            parsed.append((name, arguments))
        if len(parsed) != len(expected):
            code = "extra_call" if len(parsed) > len(expected) else "missing_call"
            return Verdict.fail(code, f"expected {len(expected)} call{'s' * (len(expected) > 1)}, got {len(parsed)}")
        fold = _fold_for(params.get("string_match", "exact"))
        judged = [check_call(name, arguments, tools[name]) for name, arguments in parsed]
        problems = [[_call_problem(call, e, fold) for e in expected] for call in judged]
        pairs = max_matching([[problem is None for problem in row] for row in problems])
        if None not in pairs:
            return Verdict.ok()
        i = pairs.index(None)
        free = [j for j in range(len(expected)) if j not in pairs]
        j = next((j for j in free if expected[j].name == parsed[i][0]), free[0])
        verdict = problems[i][j]
        assert verdict is not None, "a free pair that fits would extend a maximum matching"
        return verdict

    def wrong_answer(self, params: Mapping[str, Any]) -> str | None:
        calls = gold_calls(params)
        if not calls:
            # No call expected: any call is wrong.
            return json.dumps({"name": next(iter(tool_parameters(params))), "arguments": {}}, ensure_ascii=False)
        call, expected = calls[0], expected_calls(params)[0]
        fold = _fold_for(params.get("string_match", "exact"))
        key = next(iter(call["arguments"]), None)
        value = call["arguments"].get(key)
        for _ in range(_WRONG_ANSWER_TRIES):
            value = altered(value)
            if key is not None and not _fits(value, expected.arguments[key], fold):
                call["arguments"][key] = value
                break
        else:
            # No argument to get wrong (none, or every altered value is acceptable too): an unknown tool.
            call["name"] = f"not_{call['name']}"
        return json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False)

    def hack_probes(self, params: Mapping[str, Any], reference: str | None, context: VerifyContext) -> list[HackProbe]:
        """Calls a policy could spray to be paid without choosing: every tool, every argument, the call twice.

        Args:
            params: the task's verifier params.
            reference: unused; the probes are built from the gold itself.

        Returns:
            `call_every_tool` (one tool per turn, the gold last) and `call_every_tool_parallel` (all in one
            message) when other tools are offered; `every_optional_argument` (the gold plus every argument
            the tool declares and the gold does not ask for) when there is one; `duplicated_call` (the gold
            calls twice, as `<tool_call>` blocks).

        Example:
            >>> tools = [{"name": "f", "parameters": {"type": "dict", "properties": {"x": {"type": "integer"}}}}]
            >>> params = {"tools": tools, "possible_answer": [{"f": {}}]}
            >>> [p.name for p in ToolCall().hack_probes(params, None, VerifyContext())]
            ['every_optional_argument', 'duplicated_call']
        """
        tools = tool_parameters(params)
        gold = gold_calls(params)
        others = [
            {
                "name": name,
                "arguments": {
                    key: placeholder(schema.get("properties", {}).get(key)) for key in schema.get("required", [])
                },
            }
            for name, schema in tools.items()
            if name not in {call["name"] for call in gold}
        ]
        probes = []
        if others:
            turns = [m for call in others for m in (_openai_message([call]), {"role": "tool", "content": "{}"})]
            probes.append(HackProbe("call_every_tool", [*turns, *([_openai_message(gold)] if gold else [])]))
            probes.append(HackProbe("call_every_tool_parallel", [_openai_message([*others, *gold])]))
        if gold:
            filled = []
            for call, expected in zip(gold, expected_calls(params), strict=True):
                declared = tools[call["name"]].get("properties", {})
                unasked = {
                    k: placeholder(s)
                    for k, s in declared.items()
                    if not expected.arguments.get(k, Acceptable(())).values
                }
                filled.append({**call, "arguments": {**call["arguments"], **unasked}})
            if filled != gold:
                probes.append(HackProbe("every_optional_argument", tagged_calls(filled)))
            probes.append(HackProbe("duplicated_call", tagged_calls([*gold, *gold])))
        return probes


def _gold_problems(call: ExpectedCall, schema: Mapping[str, Any], where: str) -> list[str]:
    """Why the gold of one call cannot be met: a value of the wrong type or against the tool's schema, an
    argument with no acceptable value. Every acceptable value is tried in one of a few instances."""
    problems = [
        f"argument '{name}' has no acceptable value ({json_pointer([name], where)})"
        for name, acceptable in call.arguments.items()
        if not acceptable.values and not acceptable.optional
    ]
    for k in range(_alternatives(call.arguments)):
        instance = _instance(call.arguments, k)
        problem = _type_problem(instance, schema, "")
        if problem is not None:
            problems.append(f"expected arguments break the tool's declared types: {problem} ({where})")
        violation = schema_violation(schema, instance)
        if violation is not None:
            problems.append(f"expected arguments break the tool's parameters schema: {violation} ({where})")
    return problems
