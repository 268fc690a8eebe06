"""GSM8K text read as arithmetic: numbers of a question, equations of a reference, and the exact evaluator."""

from __future__ import annotations

from fractions import Fraction

import pytest

from generators.programmatic.gsm8k import ReplayError, evaluate, parse_equations, question_numbers


@pytest.mark.parametrize(
    ("question", "numbers"),
    [
        # A percentage is flagged; money keeps its exact value.
        ("Ten are red, 80% more are $2.50.", [("80", Fraction(80), True), ("2.50", Fraction(5, 2), False)]),
        # Thousands separators and a hyphenated unit ("120-page") are numbers too.
        ("A 120-page book has 22,500 words.", [("120", Fraction(120), False), ("22,500", Fraction(22500), False)]),
        # "percent" spelled out is a percentage; a leading dot is a decimal.
        ("25 percent of .5 liters", [("25", Fraction(25), True), (".5", Fraction(1, 2), False)]),
        # Digits glued to a word ("x2") are part of a name, not a number of the problem.
        ("model x2 sold out", []),
    ],
)
def test_question_numbers(question: str, numbers: list[tuple[str, Fraction, bool]]) -> None:
    assert [(n.text, n.value, n.percent) for n in question_numbers(question)] == numbers


@pytest.mark.parametrize(
    ("reference", "equations", "skipped"),
    [
        # The docstring example: a division in a sentence; the final "#### N" line is not an equation.
        ("Natalia sold 48/2 = 24 clips in May.\n#### 24", [("v0 / v1", Fraction(24), ["48", "2"])], []),
        # "snakes/jaguar" is a unit's denominator, dropped, not a division.
        ("5 snakes/jaguar * 6 jaguars = 30 snakes", [("v0 * v1", Fraction(30), ["5", "6"])], []),
        # Money signs and thousands separators on both sides.
        ("He pays $1,200 + $300 = $1,500 in all.", [("v0 + v1", Fraction(1500), ["1,200", "300"])], []),
        # A chain a = b = c gives one equation per "=" whose right side is a number.
        ("3 x 4 = 12 = 12", [("v0 * v1", Fraction(12), ["3", "4"]), ("v0", Fraction(12), ["12"])], []),
        # Algebra with a letter cannot be replayed without the unknown: skipped and noted.
        ("S + 143 = 200", [], ["S + 143 = 200"]),
        # A right side that is itself an expression is no result: nothing to check the left side against.
        ("It costs 200 = 184 + 16", [], []),
    ],
)
def test_parse_equations(reference: str, equations: list[tuple[str, Fraction, list[str]]], skipped: list[str]) -> None:
    found, notes = parse_equations(reference)
    assert [(e.expression, e.result.value, [n.text for n in e.operands]) for e in found] == equations
    assert notes == skipped


def test_a_percent_operand_is_divided_by_100_in_the_expression() -> None:
    (equation,), _ = parse_equations("20% * 50 = 10")
    assert equation.expression == "(v0/100) * v1"
    assert evaluate(equation.expression, {"v0": Fraction(20), "v1": Fraction(50)}) == Fraction(10)


@pytest.mark.parametrize(
    ("expression", "values", "expected"),
    [
        ("v0 / v1", {"v0": Fraction(48), "v1": Fraction(2)}, Fraction(24)),  # division stays exact
        ("(v0 + v1) * v2", {"v0": Fraction(1), "v1": Fraction(2), "v2": Fraction(1, 2)}, Fraction(3, 2)),  # parens
        ("-v0 + 3", {"v0": Fraction(1)}, Fraction(2)),  # unary minus and an integer constant
    ],
)
def test_evaluator(expression: str, values: dict[str, Fraction], expected: Fraction) -> None:
    assert evaluate(expression, values) == expected


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os')",  # calls are refused: no eval
        "v0 ** 2",  # powers are not in GSM8K steps
        "v0 / 0",  # division by zero
        "v9",  # an unknown name
        "v0 +",  # not an expression at all
    ],
)
def test_evaluator_refuses(expression: str) -> None:
    with pytest.raises(ReplayError):
        evaluate(expression, {"v0": Fraction(2)})
