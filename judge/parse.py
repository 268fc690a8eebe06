"""Defensive parsing of a judge answer into scores, or an error code with the exact problem.

Finding the JSON follows `validators.json_answer_json_response` (the last fenced json block, else the whole text,
else the first balanced object in prose), so a fenced answer or one wrapped in prose parses. Then:

| the answer                                  | outcome                                                   |
| ------------------------------------------- | --------------------------------------------------------- |
| integer 1-5 per criterion, string rationale | accepted                                                  |
| integer-valued score as a string (`"4"`)    | coerced to 4 (listed in `coerced`): the value is exact    |
| integer-valued float (`4.0`)                | coerced to 4: JSON Schema counts `4.0` as an integer too  |
| extra keys (`"overall": 5`)                 | ignored (listed in `ignored`): they carry no criterion    |
| a criterion missing                         | `missing_criteria` - never filled with a default          |
| `"high"`, `3.5`, `"4/5"`, `true`, `null`    | `bad_score` - guessing a number would invent a verdict    |
| an integer outside 1-5 (`0`, `7`, `"10"`)   | `score_out_of_range` - never clamped: 7 may mean 7/10     |
| rationale missing or not a string           | `bad_rationale`                                           |
| rationale empty, `...` or a `<...>` slot    | `bad_rationale` - the format's slot copied, not filled in |
| not an object (a list, a number)            | `not_an_object`                                           |
| no text / no JSON / broken or cut-off JSON  | `empty` / `json_missing` / `json_invalid`                 |

Every error comes with a detail naming every problem found, which is what the repair prompt quotes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from judge.rubric import RATIONALE, SCORE_MAX, SCORE_MIN, SCORES, Rubric
from validators.json_answer import parse_json_response

# Error codes of an answer that does not give a usable verdict, in the order they are checked.
PARSE_ERRORS = (
    "empty",
    "json_missing",
    "json_invalid",
    "not_an_object",
    "missing_criteria",
    "bad_score",
    "score_out_of_range",
    "bad_rationale",
)
_INTEGER_STRING = re.compile(r"^\s*[+-]?\d{1,6}\s*$")
# A rationale that is a placeholder copied instead of filled in: one `<...>` slot, or no word (`...`).
_PLACEHOLDER = re.compile(r"^\s*<[^<>]*>\s*$|^[^A-Za-z]*$")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# One decoder for every answer (json.loads with options builds a new one per call); NaN/Infinity are refused as in
# `validators.extract.loads_strict`.
_decode = json.JSONDecoder(parse_constant=_reject_constant).decode


@dataclass(frozen=True)
class ParsedAnswer:
    """A judge answer, parsed: scores and rationale, or an error code and its detail.

    Attributes:
        scores: one integer 1-5 per criterion, in rubric order; None on error.
        rationale: the judge's short explanation; None on error.
        error: None, or one of `PARSE_ERRORS`.
        detail: what exactly was wrong (every problem found), for the repair prompt and the row.
        coerced: criteria whose score arrived as a string or float and was converted (see the module doc).
        ignored: keys of the answer that are neither a criterion nor `rationale`.
    """

    scores: dict[str, int] | None
    rationale: str | None
    error: str | None = None
    detail: str | None = None
    coerced: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def problem(self) -> str:
        """`code: detail`, the sentence a repair prompt quotes (empty when there is no error)."""
        if self.error is None:
            return ""
        return f"{self.error}: {self.detail}" if self.detail else self.error


def _fail(code: str, detail: str) -> ParsedAnswer:
    return ParsedAnswer(None, None, code, detail)


def _score(value: Any) -> tuple[int | None, bool]:
    """`(integer, coerced)` for a usable score value (range not checked), `(None, False)` otherwise."""
    if isinstance(value, bool):  # a bool is an int in Python, but `true` is no score
        return None, False
    if isinstance(value, int):
        return value, False
    if isinstance(value, float) and value.is_integer():
        return int(value), True
    if isinstance(value, str) and _INTEGER_STRING.match(value):
        return int(value), True
    return None, False


def parse_judgment(text: str | None, rubric: Rubric, *, finish_reason: str | None = None) -> ParsedAnswer:
    """Scores and rationale from a judge answer, or an error code and the exact problem; never raises.

    Args:
        text: the judge's answer (None counts as empty).
        rubric: the criteria the answer must score.
        finish_reason: the server's finish reason; `length` adds "cut at max_tokens" to a JSON error's detail.

    Returns:
        A `ParsedAnswer` (see the module doc for what is coerced and what is an error).

    Example:
        >>> from judge.rubric import DEFAULT_RUBRIC
        >>> parse_judgment('{"rationale": "ok", "clarity": 5, "solvability": "4", "reference_correctness": 4, '
        ...                '"on_topic": 5}', DEFAULT_RUBRIC).scores
        {'clarity': 5, 'solvability': 4, 'reference_correctness': 4, 'on_topic': 5}
        >>> parse_judgment('{"rationale": "ok", "clarity": 9}', DEFAULT_RUBRIC).error
        'missing_criteria'
    """
    value, error = _fast_document(text)
    if error is not None:
        value, error = parse_json_response(text)
    if error is not None:
        code, _, where = error.partition(": ")
        detail = {
            "empty": "the answer is empty",
            "json_missing": "the answer contains no JSON object",
        }.get(code, f"the JSON is malformed at {where}" if where else "the JSON is malformed")
        if finish_reason == "length":
            detail += " (the answer was cut at max_tokens)"
        return _fail(code, detail)
    if not isinstance(value, Mapping):
        return _fail("not_an_object", f"the answer is a JSON {type(value).__name__}, not an object")

    names = rubric.names
    missing = [name for name in names if name not in value]
    bad: list[str] = []
    out_of_range: list[str] = []
    scores: dict[str, int] = {}
    coerced: list[str] = []
    for name in names:
        if name not in value:
            continue
        score, was_coerced = _score(value[name])
        if score is None:
            bad.append(f"{name} is {_show(value[name])}")
        elif score not in SCORES:
            out_of_range.append(f"{name} is {_show(value[name])}")
        else:
            scores[name] = score
            if was_coerced:
                coerced.append(name)
    rationale = value.get(RATIONALE)
    problems = []
    if missing:
        problems.append(f"missing criteria: {', '.join(missing)}")
    if bad:
        problems.append(f"not integer scores: {'; '.join(bad)}")
    if out_of_range:
        problems.append(f"outside {SCORE_MIN}-{SCORE_MAX}: {'; '.join(out_of_range)}")
    if not isinstance(rationale, str):
        problems.append(f"{RATIONALE} is {'missing' if rationale is None else _show(rationale)}, not a string")
    elif _PLACEHOLDER.match(rationale):
        problems.append(
            f"{RATIONALE} is {'empty' if not rationale.strip() else 'the placeholder ' + _show(rationale)}: write the "
            "main problems of the task, or why it is sound, in your own words"
        )
    if problems or not isinstance(rationale, str):  # a rationale that is not a string is one of the problems
        # The code names the first kind of problem; the detail lists them all, so one repair can fix them all.
        kinds = (("missing_criteria", missing), ("bad_score", bad), ("score_out_of_range", out_of_range))
        code = next((kind for kind, found in kinds if found), "bad_rationale")
        return _fail(code, "; ".join(problems))
    ignored = tuple(k for k in value if k != RATIONALE and k not in names)
    return ParsedAnswer(scores, rationale.strip(), coerced=tuple(coerced), ignored=ignored)


def _fast_document(text: str | None) -> tuple[Any, str | None]:
    # The common case - a bare JSON object, as a server enforcing the schema returns - without the fence scan of
    # `parse_json_response`. Equivalent to it: with no fence in the text, its rules start with "the whole text".
    if text is None or "```" in text:
        return None, "fallback"
    try:
        return _decode(text.strip()), None
    except (ValueError, RecursionError):  # the full path below reports the error precisely
        return None, "fallback"


def _show(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else _json_like(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _json_like(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
