"""Defensive parsing of a model's JSON answer (a rewrite, a judgment): find the JSON the way the verifiers do
(`validators.extract`), then check it against a schema."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import jsonschema

from validators.extract import extract_json
from validators.pointers import json_pointer
from validators.tasks import canonical_json


def parse_json_response(text: str | None, schema: Mapping[str, Any] | None = None) -> tuple[Any, str | None]:
    """The JSON value an answer gives, checked against `schema`; an error code instead of an exception.

    Finding the JSON follows `validators.extract.extract_json` (the last fenced json block, else the whole
    text, else the first balanced object in prose), so generators, the judge and the verifiers agree on what
    "the answer's JSON" is.

    Args:
        text: the model's answer (None, e.g. from a failed request, counts as empty).
        schema: a JSON Schema the value must satisfy; None skips validation.

    Returns:
        `(value, None)` on success, else `(None, code)` with code one of `empty`, `json_missing` (no JSON in
        the text), `json_invalid: line L col C`, `schema_violation: <pointer>: <message>`.

    Example:
        >>> parse_json_response('Here you go:\\n```json\\n{"score": 4}\\n```', {"type": "object"})
        ({'score': 4}, None)
        >>> parse_json_response('{"score": "high"}', {"properties": {"score": {"type": "integer"}}})
        (None, "schema_violation: /score: 'high' is not of type 'integer'")
    """
    if text is None or not text.strip():
        return None, "empty"
    extraction = extract_json(text)
    if not extraction.ok:
        return None, extraction.error
    if schema is not None:
        error = jsonschema.exceptions.best_match(_validator(canonical_json(schema)).iter_errors(extraction.value))
        if error is not None:
            message = error.message if len(error.message) <= 160 else error.message[:157] + "..."
            return None, f"schema_violation: {json_pointer(error.absolute_path)}: {message}"
    return extraction.value, None


@lru_cache(maxsize=64)
def _validator(schema_json: str) -> jsonschema.protocols.Validator:
    # Keyed by canonical JSON: a judge parses thousands of answers against the same few schemas.
    schema = json.loads(schema_json)
    return jsonschema.validators.validator_for(schema)(schema)
