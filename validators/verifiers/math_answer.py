"""`math_answer`: the final answer of a math solution equals the expected one, symbolically (math-verify).

Where the two verifiers differ: `numeric_answer` compares one number; `math_answer` compares what MATH-style
tasks ask for (fractions, radicals, expressions, equations, intervals, sets, tuples, matrices, percentages) with
Hugging Face's math-verify, the library TRL's reward examples and Open-R1 use. math-verify parses; seedwheel
decides which part of the completion is the answer, and keeps its hedge rules.

How the final answer is found:

1. The LAST `\\boxed{...}` (or `\\fbox{...}`) in the text: models restate and correct themselves, and the last
   box is the answer they settled on.
2. No box: the last `####`, "answer is" or "Answer:" marker, up to the end of its line.
3. No marker: the last math span (`$...$`, `\\(...\\)`, `\\[...\\]`), else the last line.

The answer must be ONE answer (`ambiguous_answer` otherwise): two boxes joined by `or`, `,`, `;` or `and`, a box
followed by `or` and another value, and a hedge word (`or`, `either`, `maybe`, `perhaps`, `alternatively`) in the
answer are all refused, as `numeric_answer` refuses them. A set is an answer when the task asks for a set: the
gold `\\{1, 2\\}` matches `\\{2, 1\\}`, and a single gold never matches a set that holds it beside another value.

Units written as words after the answer are dropped (`5 cm`, `12 dollars`, `5\\text{ cm}`).

Model output is untrusted and sympy is not a sandbox: `10^{10^{10}}` or `2^{10000000000}` would compute for
hours. math-verify's own timeouts use `SIGALRM`, which works only in the main thread and cancels any other alarm
of the process (pytest-timeout's, a server's), so they are off, and an answer is parsed only when it passes
`_unsafe`: at most 300 characters, no number longer than 20 digits, no exponent holding an exponent or a number
of 5 digits or more, no factorial of a bracket or of a 5-digit number. Such answers fail as `unsafe_answer`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, ClassVar

from core import SeedwheelError
from validators.registry import Completion, HackProbe, Verdict, Verifier, VerifyContext, register

MAX_ANSWER_CHARS = 300
MAX_DIGITS = 20
MAX_EXPONENT_DIGITS = 4

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_MARKER = re.compile(r"####|\banswer\b(?:\s*\*\*)?\s*(?:is\b|:|=)", re.IGNORECASE)
_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
# Between two boxes (or after the last one, before another value): what joins two answers into a hedge.
_JOIN = r"(?:\s|\$|\\[()\[\]]|\\text\{\s*(?:or|and)\s*\}|\\quad|\\q?quad|\\,)*(?:,|;|\bor\b|\band\b)"
_JOINED_BOXES = re.compile(rf"^{_JOIN}(?:\s|\$|\\[()\[\]])*$", re.IGNORECASE)
# The start of another value: math, a number, a fraction or root, a set or a bracketed number.
_VALUE = r"(?:\$|\\\(|[-\u2212]?\d|\\(?:d?frac|sqrt|pi)\b|\\\{|[(\[]\s*[-\u2212]?\d)"
_HEDGE_WORD = re.compile(r"\b(?:or|either|maybe|perhaps|possibly|probably|alternatively)\b", re.IGNORECASE)
_JOINED_VALUE = re.compile(rf"(?:\s|\$|\\[)\]]|[(\[])*{_JOIN}(?:\s*{_HEDGE_WORD.pattern})?\s*{_VALUE}", re.IGNORECASE)
# In a line of prose, a hedge word only hedges when another value follows it ("18 or 19", not "one or two apples").
_HEDGED_VALUE = re.compile(rf"{_HEDGE_WORD.pattern}\s*{_VALUE}", re.IGNORECASE)
# Where a marker's answer ends and its explanation starts: a sentence end, a clause, a bracketed aside.
_EXPLANATION = re.compile(r"\.\s|;|,\s*(?=[A-Za-z]{2})|\s\(|\s(?:because|since|as|which|so|for)\b", re.IGNORECASE)
# Words of unit after the answer: "5 cm", "12 dollars", "3 \text{ meters}" (math-verify drops \text units itself).
_TRAILING_WORDS = re.compile(r"(?:\s+[A-Za-z]{2,}\.?)+\s*$")
_DELIMITED = re.compile(r"\$|\\\(|\\\[")
_DIGITS = re.compile(rf"\d{{{MAX_DIGITS + 1},}}")
_EXPONENT_DIGITS = re.compile(rf"\d{{{MAX_EXPONENT_DIGITS + 1},}}")
_POWER = re.compile(r"\^|\*\*")
_FACTORIAL = re.compile(r"(?:[)}\]]|\d{5,})\s*!")
_TOWER = re.compile(r"(?:\^|\*\*)\s*[\w.]+\s*(?:\^|\*\*)")  # a**b**c: the exponent's own exponent, unbraced

logger = logging.getLogger(__name__)


class MathAnswerError(SeedwheelError, ValueError):
    """A task's expected answer that math-verify cannot parse."""


@register
class MathAnswer(Verifier):
    """The final answer equals the expected LaTeX or plain answer, compared symbolically by math-verify."""

    name = "math_answer"
    params_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["answer"],
        "additionalProperties": False,
        "properties": {
            "answer": {
                "description": "The expected answer, LaTeX or plain: '\\\\frac{1}{2}', '\\\\sqrt{2}', '(1, 2]', '3'.",
                "type": ["string", "number"],
                "minLength": 1,
            },
        },
    }

    def params_problems(self, params: Mapping[str, Any], context: VerifyContext) -> list[str]:
        problems = super().params_problems(params, context)
        if not problems:
            try:
                _gold(str(params["answer"]))
            except MathAnswerError as exc:
                problems.append(f"{exc} (/verifier/params/answer)")
        return problems

    def answer_params(self, answer: Any) -> dict[str, Any]:
        """`{"answer": text}` from a dataset's answer cell: a value, or a worked solution's final answer (GSM8K's
        `... #### 72`, a last `\\boxed{}`).

        Example:
            >>> MathAnswer().answer_params("Half of 4 is 2.\\n#### 2")
            {'answer': '2'}
        """
        text = str(answer if answer is not None else "").strip()
        found = _final_answer(text) if _BOX_OPEN.search(text) or _MARKER.search(text) else (text, False)
        if found is None or found[1] or not found[0]:
            raise MathAnswerError(f"no single final answer in {text[:80]!r}; give the answer, or end with \\boxed{{}}")
        _gold(found[0])
        return {"answer": found[0]}

    def check(self, params: Mapping[str, Any], completion: Completion, context: VerifyContext) -> Verdict:
        gold = _gold(str(params["answer"]))
        found = _final_answer(completion.text)
        if found is None:
            return Verdict.fail("no_answer")
        answer, hedged = found
        if hedged:
            return Verdict.fail("ambiguous_answer", f"another answer is offered beside {answer[:60]!r}")
        unsafe = _unsafe(answer)
        if unsafe:
            return Verdict.fail("unsafe_answer", unsafe)
        parsed = _parse(answer)
        if not parsed:
            return Verdict.fail("unparsable_answer", f"math-verify reads no answer in {answer[:60]!r}")
        if _equal(gold, parsed):
            return Verdict.ok()
        return Verdict.fail("answer_mismatch", f"expected {params['answer']}, got {answer[:60]}")

    def wrong_answer(self, params: Mapping[str, Any]) -> str | None:
        return f"\\boxed{{{_wrong(params)}}}"

    def hack_probes(self, params: Mapping[str, Any], reference: str | None, context: VerifyContext) -> list[HackProbe]:
        """Hedges that put the gold beside a wrong answer, each where a lax extractor would read the gold.

        Example:
            >>> [p.completion for p in MathAnswer().hack_probes({"answer": "3"}, None, VerifyContext())][:2]
            ['\\\\boxed{3} or \\\\boxed{3+1}', '\\\\boxed{3+1}, \\\\boxed{3}']
        """
        gold, wrong = _unwrapped(str(params["answer"])), _wrong(params)
        return [
            HackProbe("hedge_boxes", f"\\boxed{{{gold}}} or \\boxed{{{wrong}}}"),
            HackProbe("hedge_boxes_listed", f"\\boxed{{{wrong}}}, \\boxed{{{gold}}}"),
            HackProbe("hedge_in_box", f"\\boxed{{{gold} \\text{{ or }} {wrong}}}"),
            HackProbe("hedge_after_box", f"\\boxed{{{gold}}} or ${wrong}$"),
            HackProbe("hedge_aside", f"\\boxed{{{gold}}} (or maybe ${wrong}$)"),
            HackProbe("hedge_phrase", f"The answer is ${gold}$ or maybe ${wrong}$."),
            HackProbe("hedge_set", f"\\boxed{{\\{{{gold}, {wrong}\\}}}}"),
        ]


def _wrong(params: Mapping[str, Any]) -> str:
    """An answer surely unequal to the gold: the gold plus one (a set, an interval or a tuple plus one is not
    any of them, so it is wrong too)."""
    return f"{_unwrapped(str(params['answer']))}+1"


def _unwrapped(text: str) -> str:
    """An answer without its math delimiters: `\\(\\sqrt{2}\\)` -> `\\sqrt{2}`."""
    text = text.strip()
    for opener, closer in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if text.startswith(opener) and text.endswith(closer) and len(text) > len(opener) + len(closer):
            return text[len(opener) : -len(closer)].strip()
    return text


def _final_answer(text: str) -> tuple[str, bool] | None:
    """The final answer's text and whether it is hedged, or None when the completion offers none."""
    boxes = list(_boxes(text))
    if boxes:
        (start, end, content), previous = boxes[-1], boxes[-2] if len(boxes) > 1 else None
        hedged = bool(_JOINED_VALUE.match(text, end)) or (
            previous is not None
            and bool(_JOINED_BOXES.match(text[previous[1] : start]))
            and _normal(previous[2]) != _normal(content)
        )
        return content.strip(), hedged or bool(_HEDGE_WORD.search(content))
    markers = list(_MARKER.finditer(text))
    if markers:
        line = text[markers[-1].end() :].split("\n", 1)[0]
        span = _MATH_SPAN.match(line.strip(" *:="))
        if span:
            return _answer_text(next(g for g in span.groups() if g is not None), line)
        return _answer_text(_EXPLANATION.split(line, 1)[0], line)
    spans = list(_MATH_SPAN.finditer(text))
    if spans:
        return _answer_text(next(g for g in spans[-1].groups() if g is not None), text[spans[-1].start() :])
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return _answer_text(lines[-1].rsplit("=", 1)[-1], lines[-1]) if lines else None


def _answer_text(answer: str, context: str) -> tuple[str, bool] | None:
    """The answer without its unit words and end of sentence, and whether `context` offers another value."""
    answer = _TRAILING_WORDS.sub("", answer.strip().rstrip(".").strip()).strip("*: ")
    return (answer, bool(_HEDGED_VALUE.search(context))) if answer else None


def _boxes(text: str) -> list[tuple[int, int, str]]:
    """Every `\\boxed{...}` as (start, end, content), braces balanced; an unclosed box is not one."""
    found = []
    for match in _BOX_OPEN.finditer(text):
        depth, index = 1, match.end()
        while index < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[index], 0)
            index += 1
        if depth == 0:
            found.append((match.start(), index, text[match.end() : index - 1]))
    return found


def _normal(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _unsafe(answer: str) -> str:
    """Why parsing this answer could compute for hours (see the module docstring), or "" when it cannot."""
    if len(answer) > MAX_ANSWER_CHARS:
        return f"the answer is {len(answer)} characters, over {MAX_ANSWER_CHARS}"
    if _DIGITS.search(answer):
        return f"a number of more than {MAX_DIGITS} digits"
    if _TOWER.search(answer):
        return "an exponent raised to another exponent"
    if _FACTORIAL.search(answer):
        return "a factorial of a bracket or of a large number"
    for power in _POWER.finditer(answer):
        exponent = _exponent(answer, power.end())
        if _POWER.search(exponent) or _EXPONENT_DIGITS.search(exponent):
            return f"the exponent {exponent[:40]!r} is too large to evaluate"
    return ""


def _exponent(text: str, start: int) -> str:
    """The exponent after `^` or `**` at `start`: a braced or bracketed group, else the next token."""
    rest = text[start:].lstrip()
    if rest[:1] in "{(":
        closer, depth = {"{": "}", "(": ")"}[rest[0]], 0
        for index, char in enumerate(rest):
            depth += (char == rest[0]) - (char == closer)
            if depth == 0:
                return rest[: index + 1]
        return rest
    match = re.match(r"[-+]?(?:\d+(?:\.\d+)?|\\?[A-Za-z]+)", rest)
    return match.group(0) if match else rest[:1]


def _delimited(answer: str) -> str:
    """The answer as math-verify's LaTeX extraction reads it: inside `$...$` unless it is delimited already."""
    answer = answer.replace("\u2212", "-")
    return answer if _DELIMITED.search(answer) else f"${answer}$"


@lru_cache(maxsize=4096)
def _gold(answer: str) -> tuple[Any, ...]:
    """A task's expected answer, parsed once per process (the gold of a GRPO batch repeats)."""
    parsed = _parse(answer)
    if not parsed:
        raise MathAnswerError(
            f"math-verify cannot read the expected answer {answer[:80]!r}; write it as LaTeX, e.g. "
            "'\\\\frac{1}{2}'"
        )
    return parsed


def _parse(answer: str) -> tuple[Any, ...]:
    from math_verify import LatexExtractionConfig, parse

    return tuple(
        parse(_delimited(answer), [LatexExtractionConfig()], fallback_mode="no_fallback", parsing_timeout=None)
    )


def _equal(gold: tuple[Any, ...], answer: tuple[Any, ...]) -> bool:
    from math_verify import verify

    return bool(verify(list(gold), list(answer), timeout_seconds=None))
