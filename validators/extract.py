"""Find the JSON a model meant to give inside free text: fenced blocks, a bare document, or the first object.

One place for this so `json_schema`, `tool_call` and `json_valid` agree on what "the completion's JSON" is.
The rules, in order:

1. If the text has fenced code blocks tagged `json` (any case) or untagged, the LAST such block is the answer
   (models often show a draft first and the final version last).
2. Else, if the whole stripped text is one JSON document, that is the answer.
3. Else, the FIRST outermost balanced `{...}` in the text that parses. Only the first counts, so emitting several
   candidate objects cannot hedge; trailing prose after the object is ignored.

`NaN`, `Infinity` and `-Infinity` are rejected: Python's `json` accepts them but they are not JSON, and no
downstream consumer of the model's output would.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from core import SeedwheelError

# A fence opens with ``` plus an optional language tag, and closes at the next ``` that starts a line (so inline
# backticks inside code or strings survive). A fence still open at the end of the text (a completion cut off by
# the token limit) runs to the end; group 3 is None for it.
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(?:\r?\n)?(?:^[ \t]*(```)|\Z)", re.DOTALL | re.MULTILINE)
_JSON_LANGS = {"", "json", "jsonc", "json5"}
# Parsing is linear per candidate; a cap keeps a completion of thousands of `{}` from costing thousands of parses.
_MAX_CANDIDATES = 32


class _NonStandardConstant(SeedwheelError, ValueError):
    """Raised while parsing when the text uses NaN/Infinity, which strict JSON forbids."""


def _reject_constant(name: str) -> Any:
    raise _NonStandardConstant(f"{name} is not valid JSON")


def loads_strict(text: str) -> Any:
    """`json.loads` that also rejects `NaN`/`Infinity` and absurd nesting, raising ValueError for every failure.

    Example:
        >>> loads_strict('{"a": 1}')
        {'a': 1}
    """
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        # `[[[[...` thousands deep exhausts the C parser's recursion; it is bad output, not a crash.
        raise ValueError("JSON nested too deeply") from None


def describe_json_error(exc: ValueError) -> str:
    """A short, position-bearing description of a JSON parse error: `line 1 col 9` (or the message).

    Example:
        >>> try:
        ...     loads_strict('{"a": 1,}')
        ... except ValueError as exc:
        ...     describe_json_error(exc)
        'line 1 col 9'
    """
    if isinstance(exc, json.JSONDecodeError):
        return f"line {exc.lineno} col {exc.colno}"
    return str(exc)


def fenced_blocks(text: str, languages: Collection[str] | None = None, *, unclosed: bool = False) -> list[str]:
    """The contents of fenced code blocks, in order; with `languages`, only blocks tagged with one of them.

    Args:
        text: free text, typically a model completion.
        languages: lowercase language tags to keep (`""` is an untagged block); None keeps every block.
        unclosed: also return a final fence that never closes (it runs to the end of the text).

    Returns:
        Block contents without the fences, first to last.

    Example:
        >>> fenced_blocks("a\\n```json\\n{}\\n```\\nb")
        ['{}']
    """
    return [
        m.group(2)
        for m in _FENCE.finditer(text)
        if (unclosed or m.group(3)) and (languages is None or m.group(1).lower() in languages)
    ]


def extract_code(text: str, languages: Collection[str]) -> str:
    """The code a completion means as its answer, for verifiers that run it (`python_tests`, `sql_result`).

    The rules, in order: the LAST fenced block tagged with one of `languages` (models often show a draft, then
    the fix); else the LAST fenced block of any or no language; else the whole text. An unclosed final fence
    counts up to the end of the text, so a truncated answer is judged on what is there.

    Args:
        text: the completion's text.
        languages: fence tags that mark the wanted language, lower case (e.g. `{"python", "py"}`).

    Returns:
        The code, without the fences; may be empty.

    Example:
        >>> extract_code("Draft:\\n```python\\nx = 1\\n```\\nFinal:\\n```python\\nx = 2\\n```", {"python"})
        'x = 2'
    """
    blocks = fenced_blocks(text, languages, unclosed=True) or fenced_blocks(text, unclosed=True)
    return blocks[-1].strip("\n").rstrip() if blocks else text.strip()


def balanced_objects(text: str) -> list[tuple[int, int]]:
    """Spans `(start, end)` of the outermost balanced `{...}` in text, skipping braces inside JSON strings.

    One linear pass with a stack, so a stray `{` in prose that never closes does not hide a later object,
    and adversarial input (`{{{{...`) cannot make extraction quadratic. Quotes count only inside braces,
    so an unbalanced quote in prose does not flip string state.

    Returns:
        Non-overlapping spans in order of position.

    Example:
        >>> text = 'a { stray, then x {"a": "}"} y {}'
        >>> [text[s:e] for s, e in balanced_objects(text)]
        ['{"a": "}"}', '{}']
    """
    stack: list[int] = []
    closed: list[tuple[int, int]] = []
    in_string = False
    escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"' and stack:
            in_string = True
        elif ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            closed.append((stack.pop(), i + 1))
    outermost: list[tuple[int, int]] = []
    for start, end in sorted(closed):
        if not outermost or start >= outermost[-1][1]:
            outermost.append((start, end))
    return outermost


@dataclass(frozen=True)
class JsonExtraction:
    """What `extract_json` found: a value, or an error reason (`json_missing` / `json_invalid: <where>`)."""

    value: Any = None
    error: str | None = None
    source: str = ""  # "fence", "document" or "object": where the value came from, for debugging

    @property
    def ok(self) -> bool:
        return self.error is None


def extract_json(text: str) -> JsonExtraction:
    """The JSON value a completion gives, by the rules in this module's docstring.

    Args:
        text: the completion text.

    Returns:
        A `JsonExtraction`; on failure its `error` is `json_missing` or `json_invalid: line L col C`.

    Example:
        >>> extract_json('Sure! {"total": 12.5} Hope that helps.').value
        {'total': 12.5}
        >>> extract_json("no json here").error
        'json_missing'
    """
    blocks = fenced_blocks(text, _JSON_LANGS)
    if blocks:
        try:
            return JsonExtraction(value=loads_strict(blocks[-1]), source="fence")
        except ValueError as exc:
            return JsonExtraction(error=f"json_invalid: {describe_json_error(exc)}", source="fence")
    stripped = text.strip()
    if not stripped:
        return JsonExtraction(error="json_missing")
    document_error: str | None = None
    try:
        return JsonExtraction(value=loads_strict(stripped), source="document")
    except ValueError as exc:
        # Not a bare document: look for an object inside prose, but keep the error if it looked like one.
        if stripped[0] in "[{":
            document_error = describe_json_error(exc)
    first_error: str | None = None
    for start, end in balanced_objects(text)[:_MAX_CANDIDATES]:
        try:
            return JsonExtraction(value=loads_strict(text[start:end]), source="object")
        except ValueError as exc:
            first_error = first_error or describe_json_error(exc)
    if first_error is None and "{" in text:
        # An object that never closes (often a truncated generation): report where parsing gave up.
        try:
            loads_strict(text[text.index("{") :])
        except ValueError as exc:
            first_error = describe_json_error(exc)
    if first_error is not None or document_error is not None:
        return JsonExtraction(error=f"json_invalid: {first_error or document_error}", source="object")
    return JsonExtraction(error="json_missing")
