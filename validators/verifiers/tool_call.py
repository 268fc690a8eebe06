"""`tool_call`: the completion makes exactly one call to the expected tool with valid, expected arguments.

Where the call comes from:

- `Completion.tool_calls` (OpenAI style, as TRL's response parser and vLLM produce):
  `{"type": "function", "function": {"name": ..., "arguments": "<JSON string>" or {...}}}`. When present, the
  text is ignored.
- Otherwise the completion text's JSON (rules in `validators.extract`: last fenced block, bare document, or the
  first balanced object, so a Hermes-style `<tool_call>{...}</tool_call>` works). Accepted shapes:
  `{"name", "arguments"}`, `{"name", "parameters"}` (Llama 3 style), the OpenAI item above, or a JSON list of
  those.

Exactly one call is required: a second call is not "the first plus noise", it is a different behaviour (and
judging only the first would let a model spray calls). Argument values compare by `validators.compare`:
numbers numerically, strings exactly (case-sensitive: `'paris'` is not `'Paris'`), nested objects by leaf.
Arguments the task does not list are allowed unless the tool's schema forbids them; omitted arguments are not
filled with schema defaults.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from validators.compare import altered, field_mismatches
from validators.extract import describe_json_error, extract_json, loads_strict
from validators.registry import Completion, Verdict, Verifier, VerifyContext, register
from validators.verifiers.json_schema import schema_definition_problems, schema_violation

_TOOL_SCHEMA: dict[str, Any] = {
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
                "name": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"},
                "description": {"type": "string"},
                "parameters": {"type": "object"},
                "strict": {"type": "boolean"},
            },
        },
    },
}


def _calls_from_value(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("tool_calls"), list):
        return value["tool_calls"]
    return [value]


def _name_and_arguments(call: Any) -> tuple[str | None, Any]:
    """The (name, raw arguments) of one call in any accepted shape; name None when it has none."""
    if not isinstance(call, Mapping):
        return None, None
    if isinstance(call.get("function"), Mapping):
        call = call["function"]
    name = call.get("name")
    arguments = call["arguments"] if "arguments" in call else call.get("parameters", {})
    return (name if isinstance(name, str) else None), arguments


def _tools_by_name(params: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {tool["function"]["name"]: tool["function"] for tool in params["tools"]}


@register
class ToolCall(Verifier):
    """Exactly one call to `expected.name`, arguments valid for that tool and equal to `expected.arguments`.

    Example:
        >>> tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
        >>> params = {"tools": tools, "expected": {"name": "weather", "arguments": {"city": "Paris"}}}
        >>> text = '{"name": "weather", "arguments": {"city": "paris"}}'
        >>> ToolCall().check(params, Completion(text), VerifyContext()).reason
        "argument_mismatch: /city expected 'Paris', got 'paris'"
    """

    name = "tool_call"
    version = 1
    params_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["tools", "expected"],
        "additionalProperties": False,
        "properties": {
            "tools": {
                "description": "OpenAI tool schemas offered to the model.",
                "type": "array",
                "minItems": 1,
                "items": _TOOL_SCHEMA,
            },
            "expected": {
                "description": "The call the model should make; arguments are compared leaf by leaf.",
                "type": "object",
                "required": ["name", "arguments"],
                "additionalProperties": False,
                "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
            },
        },
    }

    def params_problems(self, params: Mapping[str, Any], context: VerifyContext) -> list[str]:
        problems = super().params_problems(params, context)
        if problems:
            return problems  # the semantic checks below assume the shape is right
        names = [tool["function"]["name"] for tool in params["tools"]]
        for i, tool in enumerate(params["tools"]):
            if names.count(names[i]) > 1 and names.index(names[i]) < i:
                problems.append(f"tool name '{names[i]}' is repeated (/verifier/params/tools/{i}/function/name)")
            parameters = tool["function"].get("parameters", {})
            problems += schema_definition_problems(
                parameters, "parameters", f"/verifier/params/tools/{i}/function/parameters"
            )
        expected = params["expected"]
        tools = _tools_by_name(params)
        if expected["name"] not in tools:
            problems.append(
                f"expected tool '{expected['name']}' is not among tools: {', '.join(names)}"
                " (/verifier/params/expected/name)"
            )
        elif not problems:
            violation = schema_violation(tools[expected["name"]].get("parameters", {}), expected["arguments"])
            if violation is not None:
                problems.append(
                    f"expected arguments break the tool's parameters schema: {violation} "
                    "(/verifier/params/expected/arguments)"
                )
        return problems

    def check(self, params: Mapping[str, Any], completion: Completion, context: VerifyContext) -> Verdict:
        if completion.tool_calls:
            calls = list(completion.tool_calls)
        else:
            found = extract_json(completion.text)
            if found.error == "json_missing":
                return Verdict.fail("no_tool_call", "no tool_calls and no JSON in the text")
            if not found.ok:
                problem = found.error.partition(": ")[2]
                return Verdict.fail("no_tool_call", f"no tool_calls and the text's JSON is invalid ({problem})")
            calls = _calls_from_value(found.value)
        if not calls:
            return Verdict.fail("no_tool_call", "empty list of calls")
        if len(calls) > 1:
            return Verdict.fail("multiple_tool_calls", f"expected exactly 1 call, got {len(calls)}")
        name, arguments = _name_and_arguments(calls[0])
        if name is None:
            return Verdict.fail("no_tool_call", "not a call (no string 'name')")
        tools = _tools_by_name(params)
        if name not in tools:
            return Verdict.fail("unknown_tool", name)
        expected = params["expected"]
        if name != expected["name"]:
            return Verdict.fail("wrong_tool", f"expected {expected['name']}, got {name}")
        if isinstance(arguments, str):
            try:
                arguments = loads_strict(arguments) if arguments.strip() else {}
            except ValueError as exc:
                return Verdict.fail("arguments_invalid", f"arguments are not JSON ({describe_json_error(exc)})")
        if not isinstance(arguments, Mapping):
            return Verdict.fail("arguments_invalid", f"arguments must be an object, got {type(arguments).__name__}")
        violation = schema_violation(tools[name].get("parameters", {}), arguments)
        if violation is not None:
            return Verdict.fail("arguments_invalid", violation)
        mismatches = field_mismatches(expected["arguments"], arguments)
        if mismatches:
            more = f" (+{len(mismatches) - 1} more)" if len(mismatches) > 1 else ""
            return Verdict.fail("argument_mismatch", mismatches[0].describe() + more)
        return Verdict.ok()

    def wrong_answer(self, params: Mapping[str, Any]) -> str | None:
        expected = params["expected"]
        if expected["arguments"]:
            call = {"name": expected["name"], "arguments": altered(expected["arguments"])}
        else:
            # No arguments to get wrong: call a tool that does not exist.
            call = {"name": f"not_{expected['name']}", "arguments": {}}
        return json.dumps(call, ensure_ascii=False)
