"""GSM8K reference solutions read as arithmetic: the numbers of a text, the equations of a reference, and an
exact evaluator for their expressions.

A GSM8K reference shows its work as equations (`48/2 = 24`, `5 snakes/jaguar * 6 jaguars = 30 snakes`) and ends
with `#### N`. `question_numbers` finds the numbers of a text (`$18.00`, `80%`, `120-page`, `22,500`);
`parse_equations` finds every `<expression> = <number>` of a reference whose left side is plain arithmetic
(chains `a = b = c` included; unit words such as `liters` or `/snake` are dropped; algebra with letters is
skipped and noted); `evaluate` computes such an expression over `+ - * / ( )` exactly (`ast`, `Fraction`; never
`eval`). `generators.programmatic.arithmetic` resolves the operands and replays the equations with new numbers.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from core import SeedwheelError

NUMBER = re.compile(r"(?<![\w.])(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?![0-9_a-wyzA-WYZ])")
_PERCENT_AFTER = re.compile(r"\s?(?:%|percent\b)")
_TOKEN = re.compile(
    r"(?P<num>(?<![\w.])(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?![0-9_a-wyzA-WYZ])(?P<pct>%)?)"
    r"|(?P<op>[+*/()\u00d7\u00f7\u2212\u2013-]|(?<![A-Za-z])[xX](?![A-Za-z]))"
    r"|(?P<word>[A-Za-z\u2019'][A-Za-z\u2019'-]*)"
    r"|(?P<space>[\s$]+)"
    r"|(?P<other>.)"
)
_SEGMENT_BREAK = re.compile(r",(?!\d{3})|[;:!?\n]|\.(?=\s|$)")
FINAL_ANSWER = re.compile(r"^####\s*(.+?)\s*$", re.MULTILINE)


class ReplayError(SeedwheelError, ValueError):
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
    for m in NUMBER.finditer(question):
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
        parts: list[str] = []
        nums: list[Num] = []
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
    body = reference[: m.start()] if (m := FINAL_ANSWER.search(reference)) else reference
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
    assert m is not None  # every text starts with a (possibly empty) match
    rest = text[m.end() :]
    n = NUMBER.match(rest)
    if n is None:
        return None
    after = rest[n.end() :]
    if re.match(r"\s*(?:[+*/\u00d7\u00f7\u2212\u2013-]|[xX](?![A-Za-z]))\s*[\d.$(]", after):
        return None
    at = offset + m.end()
    return Num(parse_number(n.group()), at + n.start(), at + n.end(), n.group())
