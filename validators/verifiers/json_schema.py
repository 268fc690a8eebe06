"""`json_schema`: the completion's JSON validates against a schema and, optionally, has expected field values.

Where the JSON comes from (last fenced block, bare document, or first balanced object) is defined once in
`validators.extract`; how expected values compare (nested object of leaves, numbers numerically, strings
exactly) in `validators.compare`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import jsonschema
from jsonschema.exceptions import best_match
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from validators.compare import altered, field_mismatches, leaf_count
from validators.extract import extract_json
from validators.pointers import json_pointer
from validators.registry import Completion, HackProbe, Verdict, Verifier, VerifyContext, register


def schema_violation(schema: Mapping[str, Any], value: Any) -> str | None:
    """The most relevant way `value` breaks `schema`, as `<pointer>: <message>`, or None when it validates.

    Example:
        >>> schema_violation({"type": "object", "required": ["total"]}, {})
        "/: 'total' is a required property"
    """
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    error = best_match(validator.iter_errors(value))
    if error is None:
        return None
    message = error.message if len(error.message) <= 160 else error.message[:157] + "..."
    return f"{json_pointer(error.absolute_path)}: {message}"


# Keywords whose values are data (a "$ref" inside them is not a reference), and those mapping names to subschemas.
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


def schema_definition_problems(schema: Mapping[str, Any], name: str, where: str) -> list[str]:
    """Why `schema` cannot check answers: it is no valid JSON Schema (draft 2020-12), or one of its `$ref`s
    resolves to nothing inside it (verifiers fetch no other document, so it would fail every answer).

    Args:
        schema: the schema a task carries.
        name: what the task calls it, to start each message (`schema`, `parameters`).
        where: its JSON Pointer in the task; each message ends with the pointer of the fault.

    Example:
        >>> [problem] = schema_definition_problems({"$ref": "https://x.org/a.json"}, "schema", "/params/schema")
        >>> problem.startswith("schema $ref 'https://x.org/a.json' resolves to nothing"), problem[-21:]
        (True, '(/params/schema/$ref)')
    """
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return [f"{name} is not a valid JSON Schema: {exc.message} ({json_pointer(exc.absolute_path, prefix=where)})"]
    problems: list[str] = []

    def walk(node: Any, path: list[str | int], resolver: Any) -> None:
        if isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, [*path, i], resolver)
            return
        if not isinstance(node, Mapping):
            return
        if path and isinstance(node.get("$id"), str):  # a nested $id changes the base of its refs
            resolver = resolver.in_subresource(DRAFT202012.create_resource(node))
        for key, value in node.items():
            if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                try:
                    resolver.lookup(value)
                except Unresolvable:
                    problems.append(
                        f"{name} $ref {value!r} resolves to nothing in the schema (no other document is fetched): "
                        f"define it under $defs and refer to it as '#/$defs/...' ({json_pointer([*path, key], where)})"
                    )
            elif key in _SCHEMA_MAPS and isinstance(value, Mapping):
                for child, subschema in value.items():
                    walk(subschema, [*path, key, child], resolver)
            elif key not in _DATA_KEYWORDS:
                walk(value, [*path, key], resolver)

    walk(schema, [], Registry().with_resource("", DRAFT202012.create_resource(schema)).resolver())
    return problems


@register
class JsonSchema(Verifier):
    """The completion's JSON validates against `schema`, and every field in `expected` has the expected value.

    `expected` is a nested object whose leaves are compared (see `validators.compare`): `{"total": 12.5,
    "customer": {"name": "Ann"}}` checks `/total` and `/customer/name`. With `partial_credit`, a schema-valid
    answer scores the fraction of expected fields it gets right; it still passes only when all match.

    Example:
        >>> params = {"schema": {"type": "object"}, "expected": {"total": 12.5}}
        >>> JsonSchema().check(params, Completion('{"total": 12}'), VerifyContext()).reason
        'field_mismatch: /total expected 12.5, got 12'
    """

    name = "json_schema"
    version = 1
    params_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["schema"],
        "additionalProperties": False,
        "properties": {
            "schema": {"description": "JSON Schema (draft 2020-12) the answer must satisfy.", "type": "object"},
            "expected": {
                "description": "Nested object of expected field values; each leaf is one field.",
                "type": "object",
                "minProperties": 1,
            },
            "partial_credit": {
                "description": "Score the fraction of expected fields matched (pass still needs all).",
                "type": "boolean",
                "default": False,
            },
        },
    }

    def params_problems(self, params: Mapping[str, Any], context: VerifyContext) -> list[str]:
        problems = super().params_problems(params, context)
        if isinstance(params.get("schema"), Mapping):
            problems += schema_definition_problems(params["schema"], "schema", "/verifier/params/schema")
        return problems

    def check(self, params: Mapping[str, Any], completion: Completion, context: VerifyContext) -> Verdict:
        found = extract_json(completion.text)
        if found.error is not None:
            code, _, detail = found.error.partition(": ")
            return Verdict.fail(code, detail)
        violation = schema_violation(params["schema"], found.value)
        if violation is not None:
            return Verdict.fail("schema_violation", violation)
        expected = params.get("expected")
        if not expected:
            return Verdict.ok()
        mismatches = field_mismatches(expected, found.value)
        if not mismatches:
            return Verdict.ok()
        total = leaf_count(expected)
        score = (total - len(mismatches)) / total if params.get("partial_credit", False) else 0.0
        more = f" (+{len(mismatches) - 1} more)" if len(mismatches) > 1 else ""
        return Verdict.fail("field_mismatch", mismatches[0].describe() + more, score=score)

    def wrong_answer(self, params: Mapping[str, Any]) -> str | None:
        expected = params.get("expected")
        if not expected:
            return None  # without expected values, nothing schema-valid is known to be wrong
        return _fenced(altered(expected))

    def hack_probes(self, params: Mapping[str, Any], reference: str | None, context: VerifyContext) -> list[HackProbe]:
        """Every property of the schema with a placeholder value (what a task without `expected` pays for), and
        every expected field hedged as a list of the right and a wrong value.

        Example:
            >>> params = {"schema": {"type": "object", "properties": {"n": {"type": "integer"}}}, "expected": {"n": 3}}
            >>> [p.completion for p in JsonSchema().hack_probes(params, None, VerifyContext())][1]
            '```json\\n{"n": [3, 4]}\\n```'
        """
        skeleton = schema_skeleton(params["schema"])
        probes = [HackProbe("schema_skeleton", _fenced(skeleton))]
        expected = params.get("expected")
        if expected:
            hedged = _merged(skeleton, _hedged(expected))
            probes.append(HackProbe("hedged_values", _fenced(hedged)))
        return probes


# Placeholders for the string formats the format checker knows, so that a skeleton passes the schema.
_FORMAT_EXAMPLES: dict[str | None, str] = {
    "date": "2024-01-01",
    "date-time": "2024-01-01T00:00:00Z",
    "time": "00:00:00Z",
    "email": "a@example.com",
    "uri": "https://example.com",
    "uuid": "00000000-0000-0000-0000-000000000000",
}


def schema_skeleton(schema: Any) -> Any:
    """A value with every property a schema names, each a placeholder of its type: the `const`, the first `enum`
    value, the minimum, `false`, an empty string of the minimum length, the first branch of `anyOf`/`oneOf`.

    Args:
        schema: a JSON Schema (or a subschema); `$ref`s are not followed.

    Returns:
        A JSON value (None where the schema says nothing usable).

    Example:
        >>> schema_skeleton({"type": "object", "properties": {"a": {"enum": ["x", "y"]}, "b": {"type": "integer"}}})
        {'a': 'x', 'b': 0}
    """
    if not isinstance(schema, Mapping):
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for branches in ("anyOf", "oneOf", "allOf"):
        if schema.get(branches):
            return schema_skeleton(schema[branches][0])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else None
    if kind == "object":
        return {name: schema_skeleton(sub) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        return [schema_skeleton(schema.get("items"))] * int(schema.get("minItems", 0))
    if kind == "string":
        return _FORMAT_EXAMPLES.get(schema.get("format"), "x" * int(schema.get("minLength", 0)))
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1)
        return math.ceil(low) if kind == "integer" else low
    return False if kind == "boolean" else None


def _hedged(expected: Mapping[str, Any]) -> dict[str, Any]:
    """The expected object with every leaf replaced by [the right value, a wrong one]."""
    return {
        key: _hedged(value) if isinstance(value, Mapping) and value else [value, altered(value)]
        for key, value in expected.items()
    }


def _merged(base: Any, top: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base) if isinstance(base, Mapping) else {}
    for key, value in top.items():
        merged[key] = _merged(merged.get(key), value) if isinstance(value, Mapping) else value
    return merged


def _fenced(value: Any) -> str:
    return "```json\n" + json.dumps(value, ensure_ascii=False) + "\n```"
