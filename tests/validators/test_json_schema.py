"""json_schema: JSON found in free text, validated against a schema, with expected field values."""

import pytest

from tests.paths import SEEDS
from validators.extract import extract_json
from validators.registry import REGISTRY, Completion, VerifyContext, spec_problems
from validators.seeds import discover_seed_files, read_seed_file
from validators.verifiers.json_schema import schema_skeleton

VERIFIER = REGISTRY.get("json_schema")
CONTEXT = VerifyContext()

SCHEMA = {
    "type": "object",
    "required": ["total", "currency"],
    "additionalProperties": False,
    "properties": {
        "total": {"type": "number"},
        "currency": {"type": "string", "enum": ["EUR", "USD"]},
        "customer": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
}
PARAMS = {"schema": SCHEMA, "expected": {"total": 12.5, "currency": "EUR"}}


def judge(text, params=PARAMS):
    return VERIFIER.check(params, Completion(text), CONTEXT)


@pytest.mark.parametrize(
    "text",
    [
        # A bare JSON document.
        '{"total": 12.5, "currency": "EUR"}',
        # Inside a json fence with prose around it.
        'Here you go:\n```json\n{"total": 12.5, "currency": "EUR"}\n```\nAnything else?',
        # An untagged fence.
        '```\n{"total": 12.5, "currency": "EUR"}\n```',
        # The last fence is the answer: a draft first, the fixed version last.
        '```json\n{"total": 1, "currency": "EUR"}\n```\nFixed:\n```json\n{"total": 12.5, "currency": "EUR"}\n```',
        # Trailing prose after a bare object.
        '{"total": 12.5, "currency": "EUR"}\nLet me know if you need more.',
        # Leading prose with braces that are not JSON, then the object.
        'Using {braces} loosely: {"total": 12.5, "currency": "EUR"}',
        # Numbers compare by value: 12.50 is 12.5.
        '{"total": 12.50, "currency": "EUR"}',
        # Braces inside strings do not confuse the scan.
        'Result {"total": 12.5, "currency": "EUR", "customer": {"name": "a}b{c"}} done',
        # A fence with a non-json language is not the answer; the object in prose is.
        '{"total": 12.5, "currency": "EUR"}\n```python\nprint(1)\n```',
    ],
)
def test_accepts(text):
    verdict = judge(text)
    assert verdict.passed, verdict.reason


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        # No JSON at all.
        ("The total is 12.5 euros.", "json_missing"),
        # Empty output.
        ("", "json_missing"),
        # A trailing comma is invalid JSON; the position comes from the parser.
        ('{"total": 12.5,}', "json_invalid: line 1 col 16"),
        # NaN is accepted by Python's json but is not JSON.
        ('{"total": NaN, "currency": "EUR"}', "json_invalid: NaN is not valid JSON"),
        # A truncated generation: the object never closes.
        ('{"total": 12.5, "currency": "E', "json_invalid: line 1 col 29"),
        # A broken last fence is judged as is, not rescued by an earlier good one.
        ('```json\n{"total": 12.5, "currency": "EUR"}\n```\n```json\n{"total": }\n```', "json_invalid: line 1 col 11"),
        # Wrong type for a field.
        ('{"total": "12.5", "currency": "EUR"}', "schema_violation: /total: '12.5' is not of type 'number'"),
        # A required field is missing.
        ('{"total": 12.5}', "schema_violation: /: 'currency' is a required property"),
        # Extra fields are forbidden by this schema.
        (
            '{"total": 12.5, "currency": "EUR", "note": "x"}',
            "schema_violation: /: Additional properties are not allowed ('note' was unexpected)",
        ),
        # Valid but wrong value.
        ('{"total": 12, "currency": "EUR"}', "field_mismatch: /total expected 12.5, got 12"),
        # Strings compare exactly; both fields wrong reports the first and counts the rest.
        ('{"total": 1, "currency": "USD"}', "field_mismatch: /total expected 12.5, got 1 (+1 more)"),
        # Two objects in prose: the first counts, so a second cannot hedge.
        (
            'Maybe {"total": 12, "currency": "EUR"} or {"total": 12.5, "currency": "EUR"}',
            "field_mismatch: /total expected 12.5, got 12",
        ),
        # A JSON array is not the expected object.
        (
            '[{"total": 12.5, "currency": "EUR"}]',
            "schema_violation: /: [{'total': 12.5, 'currency': 'EUR'}] is not of type 'object'",
        ),
    ],
)
def test_rejects(text, reason):
    verdict = judge(text)
    assert not verdict.passed
    assert verdict.reason == reason


@pytest.mark.parametrize(
    ("text", "score", "passed"),
    [
        # All expected fields right: full score, pass.
        ('{"a": 1, "b": {"c": "x", "d": true}}', 1.0, True),
        # Two of three fields right: partial score, still a fail.
        ('{"a": 1, "b": {"c": "x", "d": false}}', 2 / 3, False),
        # A missing nested field counts as wrong.
        ('{"a": 1, "b": {}}', 1 / 3, False),
        # A schema violation scores 0 even with matching fields.
        ('{"a": "1", "b": {"c": "x", "d": true}}', 0.0, False),
        # Booleans are not numbers: true is not 1, so that field is wrong.
        ('{"a": true, "b": {"c": "x", "d": true}}', 2 / 3, False),
    ],
)
def test_partial_credit_scores_fraction_of_fields(text, score, passed):
    params = {
        "schema": {"type": "object", "properties": {"a": {"type": ["number", "boolean"]}}},
        "expected": {"a": 1, "b": {"c": "x", "d": True}},
        "partial_credit": True,
    }
    verdict = VERIFIER.check(params, Completion(text), CONTEXT)
    assert verdict.score == pytest.approx(score)
    assert verdict.passed is passed


def test_without_partial_credit_a_mismatch_scores_zero():
    # The default is all-or-nothing, so a reward never pays for a half-right extraction unless asked to.
    assert judge('{"total": 12, "currency": "EUR"}').score == 0.0


def test_schema_only_task_passes_any_valid_document():
    # Without `expected`, a schema-valid answer is enough.
    params = {"schema": SCHEMA}
    assert VERIFIER.check(params, Completion('{"total": 3, "currency": "USD"}'), CONTEXT).passed
    assert VERIFIER.wrong_answer(params) is None


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        # The schema itself must be a valid JSON Schema; the pointer goes into it.
        ({"schema": {"type": "objekt"}}, "schema is not a valid JSON Schema"),
        # A nested bad keyword value is located precisely.
        ({"schema": {"properties": {"a": {"minimum": "x"}}}}, "/verifier/params/schema/properties/a/minimum"),
        # The schema is required.
        ({"expected": {"a": 1}}, "'schema' is a required property"),
        # partial_credit is a boolean.
        ({"schema": {}, "partial_credit": "yes"}, "is not of type 'boolean'"),
        # Unknown params are typos.
        ({"schema": {}, "expect": {"a": 1}}, "Additional properties"),
        # An empty expected object checks nothing.
        ({"schema": {}, "expected": {}}, "should be non-empty"),
        # A reference to another document: nothing is fetched, so every answer would fail (or the check raise).
        (
            {"schema": {"properties": {"a": {"$ref": "https://example.com/a.json"}}}},
            "schema $ref 'https://example.com/a.json' resolves to nothing in the schema (no other document is "
            "fetched): define it under $defs and refer to it as '#/$defs/...' "
            "(/verifier/params/schema/properties/a/$ref)",
        ),
        # A local reference to a definition that is not there.
        ({"schema": {"$defs": {"b": {}}, "$ref": "#/$defs/a"}}, "$ref '#/$defs/a' resolves to nothing"),
    ],
)
def test_params_problems(params, problem):
    problems = spec_problems({"name": "json_schema", "params": params})
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize(
    "schema",
    [
        # Local definitions, by pointer and by anchor.
        {"$defs": {"money": {"type": "number"}}, "properties": {"total": {"$ref": "#/$defs/money"}}},
        {"$defs": {"money": {"$anchor": "money", "type": "number"}}, "properties": {"total": {"$ref": "#money"}}},
        # A nested $id changes the base its refs resolve against.
        {"properties": {"a": {"$id": "https://example.com/a", "$defs": {"x": {}}, "$ref": "#/$defs/x"}}},
        # "$ref" as data (an enum value) or as a property name is no reference.
        {"enum": [{"$ref": "elsewhere.json"}]},
        {"properties": {"$ref": {"type": "string"}}},
    ],
)
def test_schemas_that_refer_only_inside_themselves_are_accepted(schema):
    assert spec_problems({"name": "json_schema", "params": {"schema": schema}}) == []


def test_wrong_answer_fails_and_is_schema_shaped():
    wrong = VERIFIER.wrong_answer(PARAMS)
    verdict = judge(wrong)
    assert not verdict.passed
    # It is wrong on a value, not merely unparseable, so it exercises the expected-value check.
    assert verdict.code == "field_mismatch"


@pytest.mark.parametrize(
    ("text", "value", "error"),
    [
        # A bare scalar is a JSON document too (json_valid accepts it; schemas decide).
        ("42", 42, None),
        # Unclosed fence: falls back to the object in the text.
        ('```json\n{"a": 1}', {"a": 1}, None),
        # Infinity is rejected like NaN.
        ('{"a": Infinity}', None, "json_invalid: Infinity is not valid JSON"),
        # Whitespace only.
        ("  \n ", None, "json_missing"),
        # A broken first object and a good second one: the first that parses counts.
        ('{oops} then {"a": 2}', {"a": 2}, None),
        # A stray opener in prose that never closes does not hide the object after it.
        ('Dicts open with { in Python. Here: {"a": 3}', {"a": 3}, None),
        # An unbalanced quote in prose (outside braces) does not flip string state.
        ('He said "hi. {"a": 4}', {"a": 4}, None),
        # Absurd nesting is reported, not raised.
        ("[" * 5000 + "]" * 5000, None, "json_invalid: JSON nested too deeply"),
    ],
)
def test_extract_json_rules(text, value, error):
    found = extract_json(text)
    assert found.error == error
    assert found.value == value


@pytest.mark.parametrize(
    "text",
    [
        # Thousands of openers that never close.
        "{" * 200_000,
        # Deep nesting exhausts the C parser's recursion: bad output, not a crash.
        "[" * 100_000 + "]" * 100_000,
        # Deeply nested objects.
        "{" * 100_000 + "}" * 100_000,
        # Many small non-JSON objects.
        "{x} " * 50_000,
        # Unbalanced quotes inside braces.
        '{"' * 100_000,
    ],
)
def test_adversarial_inputs_fail_fast(text):
    # A reward function sees whatever a policy emits; extraction must stay linear and never raise.
    # That it stays linear is measured in bench/bench_adversarial_inputs.py, not timed here.
    assert not judge(text).passed


@pytest.mark.parametrize(
    ("schema", "skeleton"),
    [
        # Every property, each with its type's placeholder, the first enum value for an enum.
        (SCHEMA, {"total": 0, "currency": "EUR", "customer": {"name": ""}}),
        # const wins; a nullable type takes its other type; a minimum is respected.
        (
            {"properties": {"k": {"const": 3}, "n": {"type": ["null", "integer"], "minimum": 2}}},
            {"k": 3, "n": 2},
        ),
        # Known string formats get a value of that format; a minimum length is met; no type says nothing.
        (
            {
                "type": "object",
                "properties": {
                    "d": {"type": "string", "format": "date"},
                    "s": {"type": "string", "minLength": 2},
                    "x": {"description": "anything"},
                },
            },
            {"d": "2024-01-01", "s": "xx", "x": None},
        ),
        # The first branch of anyOf; arrays with a minimum length.
        (
            {"anyOf": [{"type": "array", "items": {"type": "boolean"}, "minItems": 2}, {"type": "null"}]},
            [False, False],
        ),
    ],
)
def test_schema_skeleton(schema, skeleton):
    assert schema_skeleton(schema) == skeleton


def test_hack_probes_fail_and_a_schema_only_task_is_exposed():
    # With expected values both probes fail; without any, the skeleton is paid (so the audit names the task).
    for probe in VERIFIER.hack_probes(PARAMS, None, VerifyContext()):
        assert judge(probe.completion).code in ("field_mismatch", "schema_violation"), probe
    [skeleton] = VERIFIER.hack_probes({"schema": SCHEMA}, None, VerifyContext())
    assert judge(skeleton.completion, {"schema": SCHEMA}).passed


def test_hedged_values_put_a_list_where_each_expected_field_is():
    params = {"schema": {"type": "object"}, "expected": {"total": 12.5, "who": {"name": "Ann"}}}
    hedged = VERIFIER.hack_probes(params, None, VerifyContext())[1]
    assert hedged.name == "hedged_values"
    assert extract_json(hedged.completion).value == {"total": [12.5, 13.5], "who": {"name": ["Ann", "Ann_wrong"]}}
    assert judge(hedged.completion, params).reason.startswith("field_mismatch: /total expected 12.5, got [12.5, 13.5]")


def test_hack_probes_fail_on_every_bundled_seed():
    for path in discover_seed_files([SEEDS / "json_extraction"]):
        records, _ = read_seed_file(path)
        for record in records:
            params = record.raw["verifier"]["params"]
            for probe in VERIFIER.hack_probes(params, record.raw["reference"], VerifyContext()):
                assert not judge(probe.completion, params).passed, (record.origin, probe.name)
