"""Compare a model's JSON values with expected ones, field by field, for `json_schema` and `tool_call`.

Rules (documented once, used by both verifiers):

- `expected` is a nested object; every leaf (a value that is not an object) is one field, named by its JSON
  pointer (`/customer/name`). Objects recurse; extra fields in the actual value are allowed (the JSON Schema
  decides whether extras are legal).
- Numbers compare numerically (`12` equals `12.0`; relative tolerance 1e-9 absorbs float round-off only).
  Booleans are not numbers: `true` never equals `1`.
- Strings compare exactly, case and whitespace included: normalizing is the prompt's job, and a lenient
  comparison would reward sloppy extraction.
- Lists compare element by element with the same rules, order included.
- A missing field is a mismatch reported as `got nothing`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from validators.pointers import json_pointer

_MISSING = object()


@dataclass(frozen=True)
class Mismatch:
    """One expected field that the actual value gets wrong."""

    pointer: str
    expected: Any
    actual: Any  # `MISSING` when the field is absent

    def describe(self) -> str:
        """`/city expected 'Paris', got 'paris'`."""
        return f"{self.pointer or '/'} expected {show(self.expected)}, got {show(self.actual)}"


MISSING = _MISSING


def show(value: Any) -> str:
    """A short display of a JSON value for reason strings: strings in single quotes, the rest as JSON.

    Example:
        >>> show("Paris"), show(12.5), show(None), show([1, "a"])
        ("'Paris'", '12.5', 'null', '[1, "a"]')
    """
    if value is _MISSING:
        return "nothing"
    text = repr(value) if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def values_equal(expected: Any, actual: Any) -> bool:
    """Equality under this module's rules (numbers numerically, bools apart, strings exactly, lists in order).

    Example:
        >>> values_equal(12, 12.0), values_equal(1, True), values_equal("Paris", "paris")
        (True, False, False)
    """
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return math.isclose(expected, actual, rel_tol=1e-9, abs_tol=0.0)
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        return not any(True for _ in _leaf_mismatches(expected, actual, ""))
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(values_equal(e, a) for e, a in zip(expected, actual, strict=True))
    return type(expected) is type(actual) and expected == actual


def leaf_count(expected: Mapping[str, Any]) -> int:
    """How many fields (leaves) an expected object has; an empty nested object counts as one field.

    Example:
        >>> leaf_count({"a": 1, "b": {"c": 2, "d": 3}})
        3
    """
    return sum(leaf_count(v) if isinstance(v, Mapping) and v else 1 for v in expected.values())


def field_mismatches(expected: Mapping[str, Any], actual: Any) -> list[Mismatch]:
    """Every expected leaf that `actual` gets wrong, in the expected object's key order.

    Args:
        expected: the nested object of expected values.
        actual: the model's value (usually an object; anything else mismatches every field).

    Returns:
        Mismatches with JSON pointers; empty when every expected field matches.

    Example:
        >>> [m.describe() for m in field_mismatches({"total": 12.5, "who": {"name": "Ann"}}, {"total": 12})]
        ['/total expected 12.5, got 12', "/who/name expected 'Ann', got nothing"]
    """
    return list(_leaf_mismatches(expected, actual, ""))


def _leaf_mismatches(expected: Mapping[str, Any], actual: Any, prefix: str) -> Iterator[Mismatch]:
    for key, want in expected.items():
        pointer = json_pointer([key], prefix=prefix)
        got = actual.get(key, _MISSING) if isinstance(actual, Mapping) else _MISSING
        if isinstance(want, Mapping) and want:
            yield from _leaf_mismatches(want, got, pointer)
        elif got is _MISSING or not values_equal(want, got):
            yield Mismatch(pointer, want, got)


def altered(value: Any) -> Any:
    """A value that surely differs from `value` under `values_equal`, for building known-wrong answers.

    Example:
        >>> altered(3), altered("Paris"), altered(True)
        (4, 'Paris_wrong', False)
    """
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        # +1 alone can vanish in float precision for huge values; doubling cannot.
        return value + 1 if not math.isclose(value + 1, value, rel_tol=1e-9) else value * 2
    if isinstance(value, str):
        return value + "_wrong"
    if isinstance(value, list):
        return [*value, None]
    if isinstance(value, Mapping):
        # An empty expected object matches any object, so only a non-object is surely different.
        return _alter_first_leaf(value) if value else []
    return "wrong" if value is None else None


def _alter_first_leaf(value: Mapping[str, Any]) -> dict[str, Any]:
    key = next(iter(value))
    return {**value, key: altered(value[key])}
