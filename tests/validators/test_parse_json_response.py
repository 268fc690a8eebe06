"""parse_json_response: JSON found wherever a model put it, schema-checked, errors as codes."""

import pytest

from validators.json_answer import parse_json_response

VERDICT = {
    "type": "object",
    "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}, "reason": {"type": "string"}},
    "required": ["score"],
}


@pytest.mark.parametrize(
    ("text", "value", "error"),
    [
        # Bare JSON.
        ('{"score": 4, "reason": "clear"}', {"score": 4, "reason": "clear"}, None),
        # A fenced json block inside prose.
        ('Here is my verdict:\n```json\n{"score": 5}\n```\nThanks!', {"score": 5}, None),
        # An untagged fence counts too.
        ('```\n{"score": 2}\n```', {"score": 2}, None),
        # Leading and trailing prose around a bare object.
        ('I think {"score": 3} is fair. {"score": 1}', {"score": 3}, None),
        # The last fenced block is the final answer (models often show a draft first).
        ('```json\n{"score": 1}\n```\nRevised:\n```json\n{"score": 2}\n```', {"score": 2}, None),
        # Nothing at all (a tiny model, or a failed request).
        ("", None, "empty"),
        ("   \n", None, "empty"),
        (None, None, "empty"),
        # Prose without JSON.
        ("The task is fine.", None, "json_missing"),
        # A truncated answer (max_tokens hit).
        ('{"score": 4, "reason": "cut o', None, "json_invalid: line 1 col 24"),
        # A broken fenced block.
        ("```json\n{score: 4}\n```", None, "json_invalid: line 1 col 2"),
        # NaN is not JSON even though Python's json accepts it.
        ('{"score": NaN}', None, "json_invalid: NaN is not valid JSON"),
        # Valid JSON, wrong type.
        ('{"score": "high"}', None, "schema_violation: /score: 'high' is not of type 'integer'"),
        # Valid JSON, out of range.
        ('{"score": 9}', None, "schema_violation: /score: 9 is greater than the maximum of 5"),
        # Valid JSON, a required field missing.
        ('{"reason": "ok"}', None, "schema_violation: /: 'score' is a required property"),
        # A list where an object was required.
        ("[1, 2]", None, "schema_violation: /: [1, 2] is not of type 'object'"),
    ],
)
def test_parse_json_response(text, value, error):
    assert parse_json_response(text, VERDICT) == (value, error)


def test_without_a_schema_any_json_value_passes():
    assert parse_json_response("[1, 2]") == ([1, 2], None)
