"""`arithmetic_resample`: GSM8K-style word problems with re-sampled numbers and a recomputed answer.

Design. A GSM8K reference shows its work as equations (`48/2 = 24`, `5 snakes/jaguar * 6 jaguars = 30 snakes`)
and ends with `#### N`. The generator

1. finds the numbers of the question (`$18.00`, `80%`, `120-page`, `22,500`) and turns each into a symbol;
2. parses every equation of the reference (`<expression> = <number>`, chains `a = b = c` included; unit words
   such as `liters` or `/snake` are dropped) and resolves each operand to a question symbol, an earlier
   equation's result, or a constant (`twice` -> 2, `a year` -> 52, number words such as `three`);
3. re-samples some of the free symbols (same magnitude and grid: multiples of 10 stay multiples of 10,
   percentages stay multiples of 5 below 100, decimals keep their places) and replays the equations with a
   small exact evaluator over `+ - * / ( )` (`ast`, `Fraction`; never `eval`);
4. rewrites the question, every equation of the reference (operands and results), the other numbers of the
   reasoning whose meaning is unambiguous, and the `#### N` line; optionally renames the protagonist (a
   first name at the start of the question, from a pool of the same gender, consistently everywhere).

Caution beats yield: a number is frozen (kept as is) when its role is ambiguous - it repeats in the question,
it equals a constant the wording implies (`2 friends ... twice a week`), it is 0 or 1, it looks like a year,
or no equation uses it (it may be tied to others, like a total). A seed whose equations cannot be replayed
exactly (algebra with letters, a constant that no wording explains, a result that does not match its
expression) yields no variants but a `replay_failed` / `unsupported_seed` reject, never a guessed answer.
An operand whose value could stand for two sources (`160 + 240` after two steps that both gave 240) is kept
only in replays where both sources get the same new value, and re-sampled numbers stay pairwise distinct.

Rejects: `unsupported_seed` (no numbers, no equations, nothing free to vary), `replay_failed` (the equations do
not reproduce the seed's own results, or the reasoning holds a number that cannot be rewritten
unambiguously), `negative_answer` (a negative final or intermediate value), `fractional_answer` (a value that
was whole became fractional, or a decimal that cannot be written exactly), `absurd_answer` (above 1e7 or a
jump of more than a factor 10 from the seed's answer).
"""

from __future__ import annotations

import ast
import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar

from generators.base import GenerationResult, Generator, derive_task, last_user_index

MAX_ANSWER = 10**7
MAX_MAGNITUDE_JUMP = 10
MAX_DECIMALS = 4
ATTEMPTS_PER_VARIANT = 30

FEMALE_NAMES = (
    "Natalia", "Betty", "Julie", "Tina", "Bella", "Mary", "Joy", "Alexis", "Grace", "Olivia", "Maya", "Sofia",
    "Hannah", "Chloe", "Emma", "Nora", "Leah", "Priya", "Rosa", "Ines", "Aisha", "Lucy", "Clara", "Elena",
)  # fmt: skip
MALE_NAMES = (
    "James", "Mark", "Albert", "Ken", "Tobias", "Randy", "Jasper", "Tim", "Ralph", "Jack", "Brennan", "Noah",
    "Omar", "Lucas", "Mateo", "Daniel", "Samuel", "Hugo", "Felix", "Ravi", "Diego", "Leon", "Victor", "Oscar",
)  # fmt: skip

# Wording that implies a constant: a question number equal to one of these may be that constant in disguise.
_WORD_CONSTANTS: dict[str, tuple[int, ...]] = {
    "twice": (2,), "half": (2,), "double": (2,), "doubled": (2,), "doubles": (2,), "pair": (2,), "pairs": (2,),
    "both": (2,), "triple": (3,), "tripled": (3,), "thrice": (3,), "third": (3,), "quarter": (4,),
    "dozen": (12,), "dozens": (12,), "week": (7, 52), "weeks": (7, 52), "year": (12, 52, 365),
    "years": (12, 52, 365), "hour": (60, 24), "hours": (60, 24), "minute": (60,), "minutes": (60,),
    "day": (24, 7), "days": (24, 7), "month": (12,), "months": (12,), "percent": (100,), "liter": (1000,),
    "liters": (1000,), "ml": (1000,), "cents": (100,),
    "one": (1,), "two": (2,), "three": (3,), "four": (4,), "five": (5,), "six": (6,), "seven": (7,),
    "eight": (8,), "nine": (9,), "ten": (10,), "eleven": (11,), "twelve": (12,), "fifteen": (15,),
    "twenty": (20,), "thirty": (30,), "fifty": (50,), "hundred": (100,),
}  # fmt: skip
# Constants any GSM8K reasoning may introduce ("Bill and Dale eat 2 x 4 ..."), so a question number equal to one
# of them is ambiguous and stays frozen.
_ALWAYS_ALLOWED = frozenset({Fraction(1), Fraction(2), Fraction(1, 2)})

_NUMBER = re.compile(r"(?<![\w.])(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?![0-9_a-wyzA-WYZ])")
_PERCENT_AFTER = re.compile(r"\s?(?:%|percent\b)")
_TOKEN = re.compile(
    r"(?P<num>(?<![\w.])(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?![0-9_a-wyzA-WYZ])(?P<pct>%)?)"
    r"|(?P<op>[+*/()\u00d7\u00f7\u2212\u2013-]|(?<![A-Za-z])[xX](?![A-Za-z]))"
    r"|(?P<word>[A-Za-z\u2019'][A-Za-z\u2019'-]*)"
    r"|(?P<space>[\s$]+)"
    r"|(?P<other>.)"
)
_SEGMENT_BREAK = re.compile(r",(?!\d{3})|[;:!?\n]|\.(?=\s|$)")
_FINAL = re.compile(r"^####\s*(.+?)\s*$", re.MULTILINE)
_YEAR = range(1900, 2101)


class ReplayError(ValueError):
    """The reference's equations cannot be replayed exactly; the message says which and why."""


@dataclass(frozen=True)
class Num:
    """A number in a text: its value, where its digits are, and how it is written."""

    value: Fraction
    start: int
    end: int
    text: str
    percent: bool = False


@dataclass
class Equation:
    """`expression = result` in the reference: operand numbers, the expression in placeholder form, the result."""

    operands: list[Num]
    expression: str  # Python syntax over names v0, v1, ...; percents already divided by 100
    result: Num
    sources: list[tuple[str, int | Fraction]] = field(default_factory=list)  # ("q", i) | ("r", j) | ("c", v)
    # Per operand, every source its value could equally stand for; a replay must give them one value.
    alternatives: list[list[tuple[str, int | Fraction]]] = field(default_factory=list)


def parse_number(text: str) -> Fraction:
    """The exact value of a number as written in GSM8K text (`22,500`, `.4`, `18.00`).

    Example:
        >>> parse_number("22,500"), parse_number(".4")
        (Fraction(22500, 1), Fraction(2, 5))
    """
    return Fraction(text.replace(",", ""))


def question_numbers(question: str) -> list[Num]:
    """Every number in a question, with a flag for percentages (`80%`, `25 percent`).

    Example:
        >>> [(str(n.value), n.percent) for n in question_numbers("Ten are red, 80% more are $2.50.")]
        [('80', True), ('5/2', False)]
    """
    found = []
    for m in _NUMBER.finditer(question):
        percent = _PERCENT_AFTER.match(question, m.end()) is not None
        found.append(Num(parse_number(m.group()), m.start(), m.end(), m.group(), percent))
    return found


def evaluate(expression: str, values: Mapping[str, Fraction]) -> Fraction:
    """Evaluate `+ - * / ( )` over named exact values; anything else is refused (no `eval`).

    Args:
        expression: Python expression syntax over names.
        values: name -> value.

    Returns:
        The exact value.

    Raises:
        ReplayError: unsupported syntax, an unknown name, or a division by zero.

    Example:
        >>> evaluate("(v0 + v1) / 2", {"v0": Fraction(3), "v1": Fraction(4)})
        Fraction(7, 2)
    """

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.Div):
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Add):
                return left + right
            if isinstance(node.op, ast.Sub):
                return left - right
            if isinstance(node.op, ast.Mult):
                return left * right
            if right == 0:
                raise ReplayError("division by zero")
            return left / right
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.Name) and node.id in values:
            return values[node.id]
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return Fraction(node.value)
        raise ReplayError(f"unsupported expression element {ast.dump(node)[:40]}")

    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise ReplayError(f"not an arithmetic expression: {expression!r}") from exc
    return walk(tree)


def _expression_suffix(tokens: list[tuple[str, Any]]) -> tuple[int, str, list[Num]] | None:
    """The longest suffix of expression tokens that parses; (start index, placeholder source, numbers)."""
    for start in range(len(tokens)):
        parts, nums = [], []
        for kind, value in tokens[start:]:
            if kind == "num":
                name = f"v{len(nums)}"
                parts.append(f"({name}/100)" if value.percent else name)
                nums.append(value)
            else:
                parts.append(value)
        source = " ".join(parts)
        if not nums:
            return None
        try:
            ast.parse(source, mode="eval")
        except SyntaxError:
            continue
        if _is_expression(source):
            return start, source, nums
    return None


def _is_expression(source: str) -> bool:
    tree = ast.parse(source, mode="eval").body
    return all(
        isinstance(n, ast.BinOp | ast.UnaryOp | ast.Name | ast.Constant | ast.Load | ast.operator | ast.unaryop)
        for n in ast.walk(tree)
    )


_OPS = {"x": "*", "X": "*", "\u00d7": "*", "\u00f7": "/", "\u2212": "-", "\u2013": "-"}


def _tokens(segment: str, offset: int) -> list[tuple[str, Any]] | None:
    """Expression tokens of a text segment: numbers, operators, and `var` for single-letter algebra variables."""
    raw = [(m.lastgroup, m) for m in _TOKEN.finditer(segment)]
    tokens: list[tuple[str, Any]] = []
    i = 0
    while i < len(raw):
        kind, m = raw[i]
        if kind == "num":
            text = m.group().rstrip("%")
            tokens.append(("num", Num(parse_number(text), offset + m.start(), offset + m.start() + len(text), text,
                                      m.group("pct") is not None)))  # fmt: skip
        elif kind == "op":
            op = _OPS.get(m.group(), m.group())
            following = next((k for k, _ in raw[i + 1 :] if k != "space"), None)
            if op == "/" and following == "word":
                # "5 snakes/jaguar": a unit's denominator, not a division.
                i += 1
                while i < len(raw) and raw[i][0] in ("word", "space"):
                    i += 1
                continue
            tokens.append(("op", op))
        elif kind == "word":
            word = m.group()
            if len(word) == 1 and word not in "aAI":
                tokens.append(("var", word))
        elif kind == "other":
            tokens.append(("other", m.group()))
        i += 1
    return tokens


def parse_equations(reference: str) -> tuple[list[Equation], list[str]]:
    """The equations of a reference whose left side is plain arithmetic, and notes on skipped ones.

    Example:
        >>> eqs, _ = parse_equations("Natalia sold 48/2 = 24 clips in May.\\n#### 24")
        >>> eqs[0].expression, str(eqs[0].result.value)
        ('v0 / v1', '24')
    """
    equations: list[Equation] = []
    skipped: list[str] = []
    body = reference[: m.start()] if (m := _FINAL.search(reference)) else reference
    position = 0
    for piece in _SEGMENT_BREAK.split(body):
        start = body.index(piece, position)
        position = start + len(piece)
        if "=" not in piece:
            continue
        parts, cursor = [], start
        for part in piece.split("="):
            parts.append((cursor, part))
            cursor += len(part) + 1
        for (left_at, left), (right_at, right) in itertools.pairwise(parts):
            result = _plain_number(right, right_at)
            if result is None:
                continue
            tokens = _tokens(left, left_at)
            if not tokens or any(kind in ("var", "other") for kind, _ in tokens[-1:]):
                skipped.append(f"{left.strip()} = {right.strip()}")
                continue
            found = _expression_suffix([t for t in tokens if t[0] in ("num", "op")] if not _has_var(tokens) else [])
            if found is None:
                skipped.append(f"{left.strip()} = {right.strip()}")
                continue
            index, source, nums = found
            kept = [t for t in tokens if t[0] in ("num", "op")]
            before = kept[index - 1] if index > 0 else None
            if before is not None and before[0] == "op":
                skipped.append(f"{left.strip()} = {right.strip()} (cut expression)")
                continue
            equations.append(Equation(nums, source, result))
    return equations, skipped


def _has_var(tokens: list[tuple[str, Any]]) -> bool:
    # "S + 143" or "2p/5" is algebra: replaying its numbers without the unknown would be wrong.
    return any(kind == "var" for kind, _ in tokens)


def _plain_number(text: str, offset: int) -> Num | None:
    """The number a right-hand side states (`$24 clips`), or None when it is an expression (`200 - 16`)."""
    m = re.match(r"\s*\$?\s*", text)
    rest = text[m.end() :]
    n = _NUMBER.match(rest)
    if n is None:
        return None
    after = rest[n.end() :]
    if re.match(r"\s*(?:[+*/\u00d7\u00f7\u2212\u2013-]|[xX](?![A-Za-z]))\s*[\d.$(]", after):
        return None
    at = offset + m.end()
    return Num(parse_number(n.group()), at + n.start(), at + n.end(), n.group())


@dataclass
class Problem:
    """A seed parsed for replay: question numbers, which are free, the equations with resolved operands."""

    question: str
    reference: str
    numbers: list[Num]
    free: list[int]
    equations: list[Equation]
    answer_equation: int
    answer: Fraction


def analyse(question: str, reference: str, answer: Fraction) -> Problem:
    """Parse a seed and check that its equations replay its own results exactly.

    Args:
        question: the user message.
        reference: the GSM8K-style solution ending with `#### N`.
        answer: the seed's gold answer.

    Returns:
        A `Problem` ready for `replay`.

    Raises:
        ReplayError: with a `code: detail` message (`unsupported_seed` or `replay_failed`).

    Example:
        >>> p = analyse("Natalia sold clips to 48 friends, then half as many.", "48/2 = 24\\n48+24 = 72\\n#### 72", 72)
        >>> p.free, len(p.equations)
        ([0], 2)
    """
    numbers = question_numbers(question)
    if not numbers:
        raise ReplayError("unsupported_seed: no numbers in the question")
    equations, _ = parse_equations(reference)
    if not equations:
        raise ReplayError("unsupported_seed: no replayable equations in the reference")
    words = {w.lower() for w in re.findall(r"[A-Za-z]+", question)}
    implied = {Fraction(v) for w in words for v in _WORD_CONSTANTS.get(w, ())}
    if "%" in question:
        implied.add(Fraction(100))
    counts: dict[Fraction, int] = {}
    for n in numbers:
        counts[n.value] = counts.get(n.value, 0) + 1
    by_value: dict[Fraction, int] = {}
    for i, n in enumerate(numbers):
        by_value.setdefault(n.value, i)

    results: list[Fraction] = []
    used: set[int] = set()
    for j, eq in enumerate(equations):
        taken: set[tuple[str, int]] = set()
        for num in eq.operands:
            value = num.value
            candidates: list[tuple[str, int | Fraction]] = [
                ("r", k) for k in reversed(range(j)) if results[k] == value
            ]
            if value in by_value:
                candidates.append(("q", by_value[value]))
            fresh = [c for c in candidates if c not in taken]
            if fresh:
                source = fresh[0]
            elif candidates:
                source = candidates[0]
            elif value in implied or value in _ALWAYS_ALLOWED:
                source = ("c", value)
            else:
                raise ReplayError(f"replay_failed: the constant {num.text} in '{eq.expression}' is not explained")
            eq.alternatives.append(fresh if len(fresh) > 1 else [])
            taken.add(source)  # type: ignore[arg-type]
            if source[0] == "q":
                used.add(int(source[1]))
            eq.sources.append(source)
        got = evaluate(eq.expression, {f"v{i}": n.value for i, n in enumerate(eq.operands)})
        if got != eq.result.value:
            raise ReplayError(
                f"replay_failed: {eq.expression} gives {float(got):g}, the reference says {eq.result.text}"
            )
        results.append(got)
    answer_equation = next((j for j in reversed(range(len(results))) if results[j] == answer), None)
    if answer_equation is None:
        raise ReplayError("replay_failed: no equation of the reference produces the final answer")

    free = []
    for i, n in enumerate(numbers):
        if i not in used or counts[n.value] > 1 or n.value in (0, 1) or n.value in implied | _ALWAYS_ALLOWED:
            continue
        if question[n.end : n.end + 1] == "/" or question[max(0, n.start - 1) : n.start] in ("/", ":"):
            continue  # part of a fraction or ratio: "hits 2/5, misses 3/5" ties its parts to unstated numbers
        if n.value.denominator == 1 and int(n.value) in _YEAR and "$" not in question[max(0, n.start - 1) : n.start]:
            continue
        free.append(i)
    # A number no equation uses may be a total of others ("175 balls: the first 100 ... the next 75"): freeze those.
    unused = [numbers[i].value for i in range(len(numbers)) if i not in used]
    free = [i for i in free if not _feeds(numbers[i].value, [numbers[k].value for k in free if k != i], unused)]
    if not free:
        raise ReplayError("unsupported_seed: no number can change without changing the problem's structure")
    return Problem(question, reference, numbers, free, equations, answer_equation, Fraction(answer))


def _feeds(value: Fraction, others: list[Fraction], unused: list[Fraction]) -> bool:
    for total in unused:
        for other in others:
            if total in (value + other, value * other) or total + other == value or total + value == other:
                return True
    return False


@dataclass(frozen=True)
class Replayed:
    """New values of the free numbers and of every equation result."""

    numbers: list[Fraction]
    results: list[Fraction]
    answer: Fraction


def replay(problem: Problem, new_numbers: list[Fraction]) -> Replayed:
    """Recompute every equation with new question numbers and check the result is sane.

    Args:
        problem: from `analyse`.
        new_numbers: one value per question number (frozen ones unchanged).

    Returns:
        The new values.

    Raises:
        ReplayError: `negative_answer`, `fractional_answer` or `absurd_answer` with a detail.
    """
    results: list[Fraction] = []
    for j, eq in enumerate(problem.equations):
        values = {}
        for i, (kind, ref) in enumerate(eq.sources):
            if kind == "q":
                values[f"v{i}"] = new_numbers[int(ref)]
            elif kind == "r":
                values[f"v{i}"] = results[int(ref)]
            else:
                values[f"v{i}"] = Fraction(ref)
        for i, alternatives in enumerate(eq.alternatives):
            # "160+240" where two earlier steps gave 240: only a replay that keeps them equal is unambiguous.
            if any(_value_of(a, new_numbers, results) != values[f"v{i}"] for a in alternatives):
                raise ReplayError(f"replay_failed: operand {eq.operands[i].text} of step {j + 1} is ambiguous")
        got = evaluate(eq.expression, values)
        if got < 0:
            raise ReplayError(f"negative_answer: step {j + 1} ({eq.expression}) gives {float(got):g}")
        if got.denominator != 1 and eq.result.value.denominator == 1:
            raise ReplayError(f"fractional_answer: step {j + 1} gives {float(got):g} where the seed's is whole")
        results.append(got)
    answer = results[problem.answer_equation]
    if answer > MAX_ANSWER:
        raise ReplayError(f"absurd_answer: {float(answer):g} > {MAX_ANSWER:g}")
    if problem.answer > 0 and (
        answer == 0 or not 1 / MAX_MAGNITUDE_JUMP <= answer / problem.answer <= MAX_MAGNITUDE_JUMP
    ):
        raise ReplayError(f"absurd_answer: {float(answer):g} is far from the seed's {float(problem.answer):g}")
    return Replayed(new_numbers, results, answer)


def _value_of(source: tuple[str, int | Fraction], numbers: list[Fraction], results: list[Fraction]) -> Fraction:
    kind, ref = source
    return numbers[int(ref)] if kind == "q" else results[int(ref)] if kind == "r" else Fraction(ref)


def render(value: Fraction, template: str) -> str:
    """Write `value` the way `template` writes its number: commas, decimal places, a leading dot.

    Raises:
        ReplayError: `fractional_answer` when the value has no exact decimal form of at most 4 places.

    Example:
        >>> render(Fraction(27000), "22,500"), render(Fraction(9), "18.00"), render(Fraction(1, 4), ".4")
        ('27,000', '9.00', '.25')
    """
    places = len(template.split(".")[1]) if "." in template else 0
    needed = next((d for d in range(MAX_DECIMALS + 1) if (value * 10**d).denominator == 1), None)
    if needed is None:
        raise ReplayError(f"fractional_answer: {float(value):g} has no exact decimal form")
    places = max(places, needed) if places else needed
    text = f"{float(value):,.{places}f}" if "," in template else f"{float(value):.{places}f}"
    if template.startswith(".") and text.startswith("0."):
        text = text[1:]
    return text


def sample_number(rng: Any, num: Num, question: str) -> Fraction:
    """A new value for one question number: same grid and magnitude; percentages stay multiples of 5 below 100.

    Example:
        >>> import random
        >>> v = sample_number(random.Random(0), Num(Fraction(80), 0, 2, "80", percent=True), "80%")
        >>> v % 5 == 0 and 5 <= v <= 95 and v != 80
        True
    """
    value = num.value
    cap = _cap(question[num.end :])
    if num.percent:
        choices = [Fraction(p) for p in range(5, 100, 5) if p != value]
        return rng.choice(choices)
    if value.denominator != 1:
        step = Fraction(1, 2) if (value * 2).denominator == 1 else Fraction(1, 10 ** len(num.text.split(".")[1]))
    else:
        v = int(value)
        step = next((Fraction(s) for s in (1000, 100, 10, 5) if v >= 2 * s and v % s == 0), Fraction(1))
    low = max(step, value / 2, Fraction(2) if value >= 2 else step)
    low = math.ceil(low / step) * step  # start on the grid, or every sample would be off it (5.5, 6.5, ...)
    high = max(value * 3 / 2, value + 3 * step)
    grid = [low + k * step for k in range(int((high - low) / step) + 1)]
    grid = [g for g in grid if g != value and g > 0 and (g * 10**MAX_DECIMALS).denominator == 1 and g <= cap]
    if value.denominator != 1:
        grid = [g for g in grid if g.denominator != 1]  # "2.5 times" stays a decimal, never "4.0 times"
    return rng.choice(grid) if grid else value


# Calendar facts a number cannot exceed, by the words after it ("5 days a week" never becomes 8 days a week).
_CAPS = (
    (re.compile(r"\s*-?\s*days?\s+(?:a|per|each|every)\s+week", re.IGNORECASE), 7),
    (re.compile(r"\s*-?\s*hours?\s+(?:a|per|each|every)\s+day", re.IGNORECASE), 24),
    (re.compile(r"\s*-?\s*months?\s+(?:a|per|each|every)\s+year", re.IGNORECASE), 12),
    (re.compile(r"\s*-?\s*(?:weekdays|workdays)", re.IGNORECASE), 7),
)


def _cap(after: str) -> Fraction:
    for pattern, cap in _CAPS:
        if pattern.match(after):
            return Fraction(cap)
    return Fraction(MAX_ANSWER)


class ArithmeticResample(Generator):
    """Re-samples the numbers of GSM8K-style seeds and recomputes the answer by replaying the reference.

    Example:
        >>> gen = ArithmeticResample()
        >>> gen.name, sorted(gen.families)
        ('arithmetic_resample', ['arithmetic'])
    """

    name: ClassVar[str] = "arithmetic_resample"
    version: ClassVar[int] = 1
    families: ClassVar[frozenset[str]] = frozenset({"arithmetic"})

    def __init__(self, *, rename: bool = True, attempts_per_variant: int = ATTEMPTS_PER_VARIANT):
        self.rename = rename
        self.attempts_per_variant = attempts_per_variant

    def generate(self, parent: Mapping[str, Any], *, n: int, random_seed: int) -> GenerationResult:
        """Up to `n` variants of an arithmetic seed; see the module docstring for the method and reject codes.

        Args:
            parent: a task whose verifier is `numeric_answer` and whose reference ends with `#### N`.
            n: variants wanted.
            random_seed: with the parent's task_id, fixes the output.

        Returns:
            Variants (distinct task_ids, none equal to the parent) and reject rows.

        Example:
            >>> ArithmeticResample().generate(seed, n=3, random_seed=0).tasks  # doctest: +SKIP
        """
        out = GenerationResult()
        question = _user_message(parent)
        reference = parent.get("reference") or ""
        try:
            answer = Fraction(str(parent["verifier"]["params"]["answer"]).replace(",", ""))
            problem = analyse(question, reference, answer)
        except (ReplayError, ValueError, KeyError, ZeroDivisionError) as exc:
            code, _, detail = str(exc).partition(": ")
            if not isinstance(exc, ReplayError):
                code, detail = "unsupported_seed", f"cannot read the seed ({exc})"
            out.rejects.append(self.reject(parent, code, detail, {}))
            return out
        rng = self.rng(parent, random_seed)
        seen = {parent["task_id"]}
        for attempt in range(n * self.attempts_per_variant):
            if len(out.tasks) >= n:
                break
            size = max(1, len(problem.free) - attempt // 3)
            chosen = sorted(rng.sample(problem.free, min(size, len(problem.free))))
            new_numbers = [num.value for num in problem.numbers]
            for i in chosen:
                new_numbers[i] = sample_number(rng, problem.numbers[i], question)
            substitutions = {
                problem.numbers[i].text: render(new_numbers[i], problem.numbers[i].text)
                for i in chosen
                if new_numbers[i] != problem.numbers[i].value
            }
            rename = self._pick_name(rng, question, reference) if self.rename else None
            params: dict[str, Any] = {"substitutions": substitutions, "attempt": attempt}
            if rename:
                params["rename"] = {rename[0]: rename[1]}
            if not substitutions:
                continue
            if len(set(new_numbers)) < len({num.value for num in problem.numbers}):
                continue  # two numbers made equal: the text (and a later replay of this variant) turns ambiguous
            try:
                replayed = replay(problem, new_numbers)
                new_question, new_reference = rewrite(problem, replayed)
            except ReplayError as exc:
                code, _, detail = str(exc).partition(": ")
                out.rejects.append(self.reject(parent, code, detail, params))
                continue
            if rename:
                new_question = re.sub(rf"\b{re.escape(rename[0])}\b", rename[1], new_question)
                new_reference = re.sub(rf"\b{re.escape(rename[0])}\b", rename[1], new_reference)
            prompt = [dict(m) for m in parent["prompt"]]
            user = last_user_index(prompt)
            prompt[user] = {**prompt[user], "content": new_question}
            verifier_params = {**parent["verifier"]["params"], "answer": _as_json_number(replayed.answer)}
            task = derive_task(
                parent,
                prompt=prompt,
                verifier_params=verifier_params,
                reference=new_reference,
                generator=self.spec({k: v for k, v in params.items() if k != "attempt"}),
            )
            if task["task_id"] in seen:
                continue
            seen.add(task["task_id"])
            out.tasks.append(task)
        return out

    @staticmethod
    def _pick_name(rng: Any, question: str, reference: str) -> tuple[str, str] | None:
        first = re.match(r"[A-Z][a-z]+", question)
        if first is None or re.search(r"\bletters?\b", question):
            return None  # a puzzle about the letters of a name would change its answer
        name = first.group()
        pool = FEMALE_NAMES if name in FEMALE_NAMES else MALE_NAMES if name in MALE_NAMES else None
        if pool is None:
            return None
        text = question + "\n" + reference
        options = [p for p in pool if p != name and not re.search(rf"\b{p}\b", text)]
        return (name, rng.choice(options)) if options else None


def rewrite(problem: Problem, replayed: Replayed) -> tuple[str, str]:
    """The question and the reference with the new numbers, equation results and final answer.

    Raises:
        ReplayError: `replay_failed` when a number in the reasoning maps to two different new values.
    """
    question = _splice(
        problem.question,
        [(n.start, n.end, render(v, n.text)) for n, v in zip(problem.numbers, replayed.numbers, strict=True)
         if v != n.value],
    )  # fmt: skip
    edits: dict[int, tuple[int, str]] = {}
    for j, eq in enumerate(problem.equations):
        for num, (kind, ref) in zip(eq.operands, eq.sources, strict=True):
            new = replayed.numbers[int(ref)] if kind == "q" else replayed.results[int(ref)] if kind == "r" else None
            if new is not None:
                edits[num.start] = (num.end, render(new, num.text))
        edits[eq.result.start] = (eq.result.end, render(replayed.results[j], eq.result.text))
    # Other numbers in the reasoning: rewrite by value when every source of that value moved the same way.
    mapping: dict[Fraction, set[Fraction]] = {}
    for n, v in zip(problem.numbers, replayed.numbers, strict=True):
        mapping.setdefault(n.value, set()).add(v)
    for eq, v in zip(problem.equations, replayed.results, strict=True):
        mapping.setdefault(eq.result.value, set()).add(v)
    final = _FINAL.search(problem.reference)
    body_end = final.start() if final else len(problem.reference)
    for m in _NUMBER.finditer(problem.reference, 0, body_end):
        if m.start() in edits:
            continue
        value = parse_number(m.group())
        targets = mapping.get(value)
        # "He eats 32 from the large pizzas because 2 x 16 = 32": a number restating a result on its own line.
        line_start = problem.reference.rfind("\n", 0, m.start()) + 1
        line_end = problem.reference.find("\n", m.end()) % (len(problem.reference) + 1)
        same_line = {
            replayed.results[j]
            for j, eq in enumerate(problem.equations)
            if line_start <= eq.result.start < line_end and eq.result.value == value
        }
        if len(same_line) == 1:
            targets = same_line
        if not targets or targets == {value}:
            continue
        if len(targets) > 1:
            raise ReplayError(f"replay_failed: '{m.group()}' in the reasoning could mean several new values")
        edits[m.start()] = (m.end(), render(next(iter(targets)), m.group()))
    reference = _splice(problem.reference, [(s, e, t) for s, (e, t) in edits.items()])
    final_text = render(replayed.answer, "0")
    reference = _FINAL.sub(lambda _m: f"#### {final_text}", reference)
    return question, reference


def _splice(text: str, edits: list[tuple[int, int, str]]) -> str:
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def _as_json_number(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else float(value)


def _user_message(task: Mapping[str, Any]) -> str:
    return task["prompt"][last_user_index(task["prompt"])]["content"]
