"""`numeric_answer`: the final number in a free-text answer equals the expected one (GSM8K-style tasks).

How the final answer is found, in order:

1. Explicit markers: `#### 42`, `\\boxed{42}` (`\\fbox`), and "answer is 42" / "Answer: 42" / "**Final Answer:** 42".
   A marker counts only when a number follows it directly (formatting such as `**`, `:`, `$`, `\\(` may sit
   between), so "Let me find the answer: first, 16 - 3 = 13" is not a marker. When several markers occur, the
   LAST one wins, whatever its kind: models restate and correct themselves, and the last statement is the
   answer. A marker inside a quotation still counts (we cannot tell quoting from answering reliably). A marker
   followed by an equation names its result: "The answer is 3 + 4 = 7" answers 7, not 3.
2. No marker: the last number in the text.

The final answer must be ONE number (`ambiguous_answer` otherwise): a hedge joins it to another number on
either side with `or`, `and`, `,`, `;`, `/`, `to`, `vs` or bare spaces, after at most three words of unit and
closing formatting, and with any opening formatting or marker before the other number. So `#### 72 or 73`,
`#### 72, 73, 74`, "the answer is 72 or 73", `\\boxed{72} or \\boxed{73}`, `\\boxed{72, 73}` and "either 72 or
73" are ambiguous, and so is an aside that offers another number (`#### 72 (or 73)`, `72 [maybe 73]`), while an
explanation after the answer ("18 dollars (9 eggs at $2)", "18, since 9 * 2 = 18") is not an alternative, and
`1,234` is one number where `1, 234` is two.

Numbers may carry a sign, a `$`, thousands separators (`1,234.50`), a fraction (`3/4`, `1 1/2`, `\\frac{3}{4}`,
`\\dfrac12`), an exponent (`1e-3`), a power (`10^3`, `2^{10}`, `10**-2`: the power is the number, not its
base), a trailing `%` or "percent" and trailing units ("18 dollars"); a unit's exponent (`25 m^2`, `m**2`,
`cm^{2}`) is not a number. A number past ~1,200 digits (`1e999999999`) is not an answer. A percentage
matches when either its number or its number / 100 matches (`25%` answers both 25 and 0.25). `rel_tol` absorbs
rounding of decimals and fractions; two integers compare exactly (an off-by-one in a large count is wrong, not
rounding).
With a marker, numbers elsewhere (the reasoning, a check after the answer) are ignored.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

from core import SeedwheelError
from validators.registry import Completion, HackProbe, Verdict, Verifier, VerifyContext, register

DEFAULT_REL_TOL = 1e-6

_NUMBER = re.compile(
    r"""
    (?<![\w./^])(?<!\^\{)(?<![\w)]\*\*)           # not the tail of a word, a decimal, a date or an exponent
    (?P<neg>[-\u2212](?=\s?\$?\s?[\d.]))?           # a minus sign (ASCII or Unicode) right before the number
    \$?\s?
    (?:
        (?P<whole>\d+)[ ](?P<mnum>\d+)/(?P<mden>\d+)  # mixed fraction: 1 1/2
      | (?P<num>\d+)/(?P<den>\d+)                     # fraction: 3/4
      | (?P<dec>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:[eE](?P<exp>[-+]?\d+))?
        (?![\d/])                                   # a longer number or a date is not this number
        (?:[ ]?(?:\^|\*\*)[ ]?\{?[ ]?(?P<pow>[-+]?\d+)[ ]?\}?)?  # a power: 10^3, 2^{10}, 10**-2
    )
    (?![\d/])
    (?P<pct>\s?(?:%|percent\b))?
    """,
    re.VERBOSE | re.ASCII | re.IGNORECASE,
)

# What may sit between a marker and its number: spaces, markdown bold, colons, `=`, `$` and LaTeX math openers.
_FILLER = re.compile(r"(?:\s|\*|:|=|\$|`|\\\(|\\\[)*")
_HASH_MARKER = re.compile(r"####")
_PHRASE_MARKER = re.compile(r"\banswer\b(?:\s*\*\*)?\s*(?:is\b|:|=)", re.IGNORECASE)
# The box's content may hold one level of braces (`\text{...}`); the regex is linear per match attempt, so
# `\boxed{\boxed{...` spam cannot make extraction quadratic.
BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
# After a marker's number, arithmetic up to an `=`: the number after it is the answer (`3 + 4 = 7`, `2 x 9 = $18`).
_WORKING = re.compile(r"(?:[ \t]*[-+*/x\u00d7\u00f7][ \t]*\$?[\d.,]+)+[ \t]*=[ \t]*(?=[-\u2212$\d.])")
# A markdown heading like "#### 2. Compute the total" numbers a step; it is not an answer.
_STEP_NUMBER = re.compile(r"[.)]\s+[A-Za-z]")

# Hedges: the final number joined to another one (see the module docstring). The pieces: formatting that closes
# a number, a word of unit, the joining words, what may open the other number, and the start of a number.
_CLOSE = r"(?:\*\*|\$|\\\)|\\\]|\}|`|%)"
_UNIT = r"[A-Za-z][A-Za-z'-]*"
_JOIN = r"(?:,|;|/|&|\bor\b|\band\b|\bnor\b|\bto\b|\bvs\b\.?|\bversus\b)"
_HEDGE_WORD = r"\b(?:either|maybe|perhaps|possibly|probably|alternatively)\b"
_OPEN = rf"(?:\*\*|\$|`|\\\(|\\\[|\\(?:boxed|fbox)\s*\{{|####|\banswer\b\s*(?:is\b|:|=)?|{_HEDGE_WORD})"
# An aside in brackets that offers another number: `18 (or 19)`, `18 [maybe 19]`; a bare bracketed number explains.
_ASIDE = rf"[ \t]*[(\[][ \t]*(?:{_JOIN}|{_HEDGE_WORD})"
_LINK = (
    rf"(?:{_CLOSE})*(?:(?:[ \t]+{_UNIT}){{0,3}}?(?:[ \t]*{_CLOSE})*(?:(?:[ \t]*{_JOIN}){{1,2}}[ \t]*|{_ASIDE}[ \t]*)"
    rf"|[ \t]+)(?:{_OPEN}[ \t]*)*"
)
# Matched at the end of the final number / searched for at the end of the text before it (a bounded window,
# so a long completion costs no more than a short one).
_HEDGE_AFTER = re.compile(rf"{_LINK}[-\u2212]?\$?\s?\.?\d", re.IGNORECASE)
_HEDGE_BEFORE = re.compile(rf"\d{_LINK}\Z", re.IGNORECASE)
_HEDGE_WINDOW = 160

# A fraction's two arguments are braced, or single digits as TeX reads them: `\frac{3}{4}`, `\dfrac12`, `\frac1{2}`.
_LATEX_FRAC = re.compile(
    r"\\[dt]?frac\s*(?:\{\s*(?P<num>-?[\d.,]+)\s*\}|(?P<num_digit>\d))\s*(?:\{\s*(?P<den>[\d.,]+)\s*\}|(?P<den_digit>\d))"
)
# The largest power a number may name, in bits of its base times its exponent (~1,200 decimal digits).
_MAX_POWER_BITS = 4096
LATEX_TEXT = re.compile(r"\\(?:text|textbf|textrm|mathrm|mbox)\s*\{([^{}]*)\}")
_LATEX_THOUSANDS = re.compile(r"(?<=\d)(?:\{,\}|\\[,!]\s?)(?=\d{3})")


@dataclass(frozen=True)
class _Number:
    """A number found in text: its exact value, the raw text, and whether it was written as a percentage."""

    value: Fraction
    raw: str
    percent: bool

    def candidates(self) -> tuple[Fraction, ...]:
        return (self.value, self.value / 100) if self.percent else (self.value,)


def _plain_fraction(match: re.Match[str]) -> str:
    """`n/d` for a LaTeX fraction; a digit right after `\\frac12` stays a number of its own (TeX reads `\\frac123`
    as a half, then 3), so it is not read as `1/23`."""
    numerator = match["num"] if match["num"] is not None else match["num_digit"]
    denominator = match["den"] if match["den"] is not None else match["den_digit"]
    apart = " " if match.string[match.end() : match.end() + 1].isdigit() else ""
    return f"{numerator}/{denominator}{apart}"


def _normalize_latex(text: str) -> str:
    """Rewrite the LaTeX that models use around numbers into plain text, keeping everything else."""
    text = _LATEX_FRAC.sub(_plain_fraction, text)
    text = LATEX_TEXT.sub(r"\1", text)
    text = _LATEX_THOUSANDS.sub(",", text)
    return text.replace("\\%", "%").replace("\\$", "$").replace("\\!", "")


def _power(base: Fraction, exponent: int) -> Fraction:
    """`base ** exponent`, exactly; OverflowError past `_MAX_POWER_BITS` (`1e999999999` would take minutes and
    gigabytes to compute, and names no answer a task expects)."""
    size = max(base.numerator.bit_length(), base.denominator.bit_length())
    if abs(exponent) * size > _MAX_POWER_BITS:
        raise OverflowError(f"{base}^{exponent} is too large to be an answer")
    return base**exponent


def _number_from_match(match: re.Match[str]) -> _Number | None:
    try:
        if match["whole"] is not None:
            value = Fraction(int(match["whole"])) + Fraction(int(match["mnum"]), int(match["mden"]))
        elif match["num"] is not None:
            value = Fraction(int(match["num"]), int(match["den"]))
        else:
            value = Fraction(match["dec"].replace(",", ""))
            if match["exp"] is not None:
                value *= _power(Fraction(10), int(match["exp"]))
            if match["pow"] is not None:
                value = _power(value, int(match["pow"]))
    except (ZeroDivisionError, ValueError, OverflowError):
        return None  # "3/0" or an absurd exponent is not an answer
    if match["neg"]:
        value = -value
    raw = " ".join(match.group(0).replace("$", "").split())
    return _Number(value=value, raw=raw, percent=match["pct"] is not None)


@dataclass(frozen=True)
class _Answer:
    """The final answer: its number, and whether the text joins another number to it (a hedge)."""

    number: _Number
    hedged: bool


def _hedged(text: str, start: int, end: int) -> bool:
    """Whether another number is joined to the answer written at `text[start:end]`, after it or before it."""
    after = _HEDGE_AFTER.match(text[end : end + _HEDGE_WINDOW])
    return bool(after or _HEDGE_BEFORE.search(text[max(0, start - _HEDGE_WINDOW) : start]))


def _number_at(text: str, match: re.Match[str] | None) -> _Answer | None:
    number = None if match is None else _number_from_match(match)
    if match is None or number is None:
        return None
    return _Answer(number, hedged=_hedged(text, *match.span()))


def _number_right_after(text: str, pos: int, *, reject_step: bool = False) -> _Answer | None:
    filler = _FILLER.match(text, pos)
    assert filler is not None  # a run of zero or more filler characters matches anywhere
    pos = filler.end()
    match = _NUMBER.match(text, pos)
    if match is not None and reject_step and _STEP_NUMBER.match(text, match.end()):
        return None
    # "The answer is 3 + 4 = 7": the marker states an equation, and the answer is its result.
    while match is not None and (equals := _WORKING.match(text, match.end())) is not None:
        match = _NUMBER.match(text, equals.end())
    return _number_at(text, match)


def _boxed_number(text: str, box: re.Match[str]) -> _Answer | None:
    # `\boxed{x = 5}` boxes an equation; the answer is its right-hand side. A hedge may sit inside the box
    # (`\boxed{72, 73}`) or around it (`\boxed{72} or \boxed{73}`).
    content = box.group(1).rsplit("=", 1)[-1]
    inside = _number_at(content, next(_NUMBER.finditer(content), None))
    if inside is None:
        return None
    return _Answer(inside.number, hedged=inside.hedged or _hedged(text, *box.span()))


def find_final_answer(text: str) -> tuple[Fraction, ...] | None:
    """The value(s) the completion gives as its final answer, by the rules in the module docstring.

    Args:
        text: the completion text.

    Returns:
        The candidate values (two for a percentage: n and n/100), or None when no number is found or the
        answer is hedged (`ambiguous_answer`).

    Example:
        >>> find_final_answer("16 - 3 - 4 = 9 eggs, 9 * 2 = 18.\\n#### 18")
        (Fraction(18, 1),)
        >>> find_final_answer("#### 18 or 19") is None
        True
    """
    answer = _final_answer(_normalize_latex(text))
    return None if answer is None or answer.hedged else answer.number.candidates()


def _final_answer(text: str) -> _Answer | None:
    marked: list[tuple[int, _Answer]] = []
    for m in _HASH_MARKER.finditer(text):
        if (answer := _number_right_after(text, m.end(), reject_step=True)) is not None:
            marked.append((m.start(), answer))
    for m in _PHRASE_MARKER.finditer(text):
        if (answer := _number_right_after(text, m.end())) is not None:
            marked.append((m.start(), answer))
    for m in BOXED.finditer(text):
        if (answer := _boxed_number(text, m)) is not None:
            marked.append((m.start(), answer))
    if marked:
        return max(marked, key=lambda pair: pair[0])[1]
    last = None
    for match in _NUMBER.finditer(text):
        if _number_from_match(match) is not None:
            last = match
    return _number_at(text, last)


class NumberFormatError(SeedwheelError, ValueError):
    """A task's expected answer is not a single number."""


def parse_number(value: int | float | str) -> Fraction:
    """The exact value of an expected answer given as a JSON number or a numeric string.

    Args:
        value: `18`, `0.75`, `"1,234.50"`, `"-3/4"`, `"1 1/2"`, `"1e-3"`.

    Returns:
        The value as a Fraction (floats through their shortest repr, so 0.1 is exactly 1/10).

    Raises:
        NumberFormatError: a string that is not exactly one number (percentages included: say 25 or 0.25).

    Example:
        >>> parse_number("1 1/2")
        Fraction(3, 2)
    """
    if isinstance(value, bool):
        raise NumberFormatError(f"answer {value!r} is a boolean, not a number")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NumberFormatError(f"answer {value!r} is not finite")
        return Fraction(repr(value))
    text = _normalize_latex(value).strip()
    match = _NUMBER.fullmatch(text)
    number = _number_from_match(match) if match else None
    if number is None or number.percent:
        raise NumberFormatError(
            f"answer {value!r} is not a single number; write it like 18, -2.5, 1,234.50, 3/4 or 1 1/2"
            " (percentages as 25 or 0.25)"
        )
    return number.value


def _close(got: Fraction, expected: Fraction, rel_tol: float) -> bool:
    if got == expected:
        return True
    if got.denominator == 1 and expected.denominator == 1:
        # Tolerance is for rounded decimals and fractions; between integers, 1,450,001 is not 1,450,000.
        return False
    # rel_tol doubles as an absolute tolerance so answers near 0 are not held to an impossible relative bound.
    return math.isclose(float(got), float(expected), rel_tol=rel_tol, abs_tol=rel_tol)


def _display(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else repr(float(value))


@register
class NumericAnswer(Verifier):
    """The completion's final number equals `answer` within `rel_tol` (relative, and absolute near 0).

    Example:
        >>> NumericAnswer().check({"answer": 18}, Completion("So she makes $18.\\n#### 18"), VerifyContext()).passed
        True
    """

    name = "numeric_answer"
    version = 3
    params_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["answer"],
        "additionalProperties": False,
        "properties": {
            "answer": {
                "description": "The expected number, or a numeric string such as '1,234.50', '3/4' or '1 1/2'.",
                "type": ["number", "string"],
                "minLength": 1,
            },
            "rel_tol": {
                "description": "Relative tolerance, also used as an absolute tolerance near 0.",
                "type": "number",
                "minimum": 0,
                "default": DEFAULT_REL_TOL,
            },
        },
    }

    def params_problems(self, params: Mapping[str, Any], context: VerifyContext) -> list[str]:
        problems = super().params_problems(params, context)
        if not problems:
            try:
                parse_number(params["answer"])
            except NumberFormatError as exc:
                problems.append(f"{exc} (/verifier/params/answer)")
        return problems

    def answer_params(self, answer: Any) -> dict[str, Any]:
        """`{"answer": n}` from a number, a numeric string (`'1,234.50'`), or a worked solution's final answer
        (GSM8K's `... #### 72`, a `\\boxed{}` value, `The answer is 72`); n is an int, an exact float, or `'1/3'`.

        Example:
            >>> NumericAnswer().answer_params("48/2 = 24 in May, 48+24 = 72 in all.\\n#### 72")
            {'answer': 72}
        """
        if isinstance(answer, int | float) and not isinstance(answer, bool):
            return {"answer": _plain(parse_number(answer))}
        text = str(answer if answer is not None else "").strip()
        try:
            return {"answer": _plain(parse_number(text))}
        except NumberFormatError:
            found = find_final_answer(text)
        if found is None or len(found) != 1:
            raise NumberFormatError(
                f"no single final number in the answer {text[:80]!r}; give a number, or a solution that ends "
                "with '#### <number>'"
            )
        return {"answer": _plain(found[0])}

    def check(self, params: Mapping[str, Any], completion: Completion, context: VerifyContext) -> Verdict:
        expected = parse_number(params["answer"])
        rel_tol = float(params.get("rel_tol", DEFAULT_REL_TOL))
        answer = _final_answer(_normalize_latex(completion.text))
        if answer is None:
            return Verdict.fail("no_answer")
        number = answer.number
        if answer.hedged:
            return Verdict.fail("ambiguous_answer", f"another number is offered beside {number.raw}")
        if any(_close(candidate, expected, rel_tol) for candidate in number.candidates()):
            return Verdict.ok()
        return Verdict.fail("answer_mismatch", f"expected {params['answer']}, got {number.raw}")

    def wrong_answer(self, params: Mapping[str, Any]) -> str | None:
        return f"#### {_display(_wrong_value(params))}"

    def hack_probes(self, params: Mapping[str, Any], reference: str | None, context: VerifyContext) -> list[HackProbe]:
        """Hedges that put the gold beside a wrong number, each where a lax extractor would read the gold.

        Example:
            >>> [p.completion for p in NumericAnswer().hack_probes({"answer": 72}, None, VerifyContext())][:2]
            ['#### 72 or 73', '#### 72, 73, 71']
        """
        expected = parse_number(params["answer"])
        offset = _wrong_value(params) - expected
        gold, above, below = (_display(v) for v in (expected, expected + offset, expected - offset))
        return [
            HackProbe("hedge_or", f"#### {gold} or {above}"),
            HackProbe("hedge_list", f"#### {gold}, {above}, {below}"),
            HackProbe("hedge_phrase", f"The answer is {gold} or {above}."),
            HackProbe("hedge_boxes", f"\\boxed{{{above}}} or \\boxed{{{gold}}}"),
            HackProbe("hedge_in_box", f"\\boxed{{{gold}, {above}}}"),
            HackProbe("hedge_unmarked", f"It is either {above} or {gold}."),
            HackProbe("hedge_aside", f"#### {gold} (or maybe {above})"),
        ]


def _plain(value: Fraction) -> int | float | str:
    """A value as a task file writes it: an int, a float that reads back exactly, else `'n/d'`."""
    if value.denominator == 1:
        return value.numerator
    return float(value) if Fraction(repr(float(value))) == value else f"{value.numerator}/{value.denominator}"


def _wrong_value(params: Mapping[str, Any]) -> Fraction:
    """A number surely outside the task's tolerance around its answer: the answer + 1, or + 10^k if needed."""
    expected = parse_number(params["answer"])
    rel_tol = float(params.get("rel_tol", DEFAULT_REL_TOL))
    offset = Fraction(1)
    # A generous tolerance can swallow +1; widen until the wrong answer is surely outside it.
    while _close(expected + offset, expected, rel_tol):
        offset *= 10
    return expected + offset
