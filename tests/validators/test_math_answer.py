"""`math_answer`: the forms models write for MATH-style answers, its hedge rules, hostile input, hack probes."""

from __future__ import annotations

import pytest

from validators.registry import REGISTRY, Completion, VerifyContext
from validators.verifiers.math_answer import MathAnswer, MathAnswerError

VERIFIER = REGISTRY.get("math_answer")
CONTEXT = VerifyContext()


def judge(answer, text):
    return VERIFIER.check({"answer": answer}, Completion(text), CONTEXT)


@pytest.mark.parametrize(
    ("answer", "text"),
    [
        # Fractions: LaTeX, \dfrac, plain, decimal.
        ("\\frac{1}{2}", "The answer is \\boxed{\\frac{1}{2}}."),
        ("\\frac{1}{2}", "So we get \\boxed{0.5}"),
        ("\\frac{1}{2}", "\\boxed{1/2}"),
        ("\\frac{1}{2}", "Thus $\\dfrac12$."),
        ("\\(\\frac{333}{1997}\\)", "\\boxed{\\frac{333}{1997}}"),
        # Radicals, also rationalised differently.
        ("\\sqrt{2}", "\\boxed{\\frac{2}{\\sqrt{2}}}"),
        ("\\sqrt{2}", "Hence $x = \\sqrt{2}$"),
        ("2\\sqrt{2}", "\\boxed{\\sqrt{8}}"),
        # Expressions compare symbolically.
        ("x^2+2x+1", "\\boxed{(x+1)^2}"),
        ("\\pi/2", "\\boxed{\\frac{\\pi}{2}}"),
        # Intervals, sets (any order), tuples.
        ("(1, 2]", "\\boxed{(1,2]}"),
        ("(-\\infty, 3)", "The solution set is $(-\\infty, 3)$."),
        ("\\{1, 2\\}", "\\boxed{\\{2, 1\\}}"),
        # Units, as LaTeX text or words, are not part of the answer.
        ("5", "\\boxed{5 \\text{ cm}}"),
        ("5", "\\boxed{5 cm}"),
        ("18", "The answer is 18 dollars."),
        # Percentages, thousands separators, a Unicode minus.
        ("50\\%", "\\boxed{0.5}"),
        ("1234", "\\boxed{1,234}"),
        ("-3", "\\boxed{\u22123}"),
        # Markers without a box: GSM8K's ####, "the answer is" with an explanation after it.
        ("18", "#### 18"),
        ("18", "The answer is 18 because 9 * 2 = 18."),
        # No marker, no math: the last line's value.
        ("5", "Therefore, x = 5."),
        # The last box wins: a model that corrects itself.
        ("3", "First \\boxed{4}. Wait, I made an error: \\boxed{3}"),
        # The same box twice is one answer.
        ("3", "\\boxed{3}, that is, \\boxed{3}"),
        # An explanation after the box is not another answer.
        ("3", "\\boxed{3}, which is prime"),
    ],
)
def test_accepts(answer, text):
    verdict = judge(answer, text)
    assert verdict.passed, verdict.reason


@pytest.mark.parametrize(
    ("answer", "text", "reason"),
    [
        ("\\frac{1}{2}", "\\boxed{\\frac{1}{3}}", "answer_mismatch"),
        ("\\sqrt{2}", "\\boxed{2}", "answer_mismatch"),
        ("(1, 2]", "\\boxed{[1, 2]}", "answer_mismatch"),
        ("x^2+2x+1", "\\boxed{(x-1)^2}", "answer_mismatch"),
        # A single gold is not a set that holds it beside another value.
        ("3", "\\boxed{\\{3, 4\\}}", "answer_mismatch"),
        # The last box wins, so an early right box does not rescue a wrong final one.
        ("3", "\\boxed{3}. Wait, no: \\boxed{4}", "answer_mismatch"),
        ("3", "", "no_answer"),
        # Hedges: two answers joined, inside a box, after a box, in a marker's line, as an aside.
        ("3", "\\boxed{3} or \\boxed{4}", "ambiguous_answer"),
        ("3", "\\boxed{4}, \\boxed{3}", "ambiguous_answer"),
        ("3", "\\boxed{3 \\text{ or } 4}", "ambiguous_answer"),
        ("3", "\\boxed{3} or $4$", "ambiguous_answer"),
        ("3", "\\boxed{3} (or 4)", "ambiguous_answer"),
        ("3", "The answer is 3 or 4.", "ambiguous_answer"),
        ("3", "The answer is 3, maybe 4.", "ambiguous_answer"),
        # Hostile input that would make sympy compute for hours is refused before parsing.
        ("5", "\\boxed{10^{10^{10}}}", "unsafe_answer"),
        ("5", "\\boxed{2^{10000000000}}", "unsafe_answer"),
        ("5", "10**10**10", "unsafe_answer"),
        ("5", "\\boxed{(10^{9})!}", "unsafe_answer"),
        ("5", "\\boxed{" + "9" * 40 + "}", "unsafe_answer"),
        ("5", "\\boxed{" + "1+" * 200 + "1}", "unsafe_answer"),
    ],
)
def test_rejects(answer, text, reason):
    verdict = judge(answer, text)
    assert not verdict.passed
    assert verdict.code == reason, verdict.reason


@pytest.mark.parametrize("answer", ["\\frac{1}{2}", "3", "\\sqrt{2}", "(1, 2]", "\\{1, 2\\}", "x^2+1", -5])
def test_hack_probes_fail_and_the_wrong_answer_is_wrong(answer):
    params = {"answer": answer}
    probes = VERIFIER.hack_probes(params, None, CONTEXT)
    assert len({p.name for p in probes}) == len(probes) >= 6
    for probe in probes:
        verdict = VERIFIER.check(params, Completion(probe.completion), CONTEXT)
        assert not verdict.passed, probe
    assert not judge(answer, VERIFIER.wrong_answer(params)).passed
    assert judge(answer, f"\\boxed{{{answer}}}").passed


def test_answer_params_take_a_worked_solutions_final_answer():
    # GSM8K's answer column ends with '#### N'; MATH's solutions end with a box.
    assert MathAnswer().answer_params("48/2 = 24\n#### 72") == {"answer": "72"}
    assert MathAnswer().answer_params("So $x = \\boxed{\\frac{1}{2}}$.") == {"answer": "\\frac{1}{2}"}
    assert MathAnswer().answer_params("\\sqrt{3}") == {"answer": "\\sqrt{3}"}
    with pytest.raises(MathAnswerError, match="no single final answer"):
        MathAnswer().answer_params("\\boxed{1} or \\boxed{2}")


def test_a_gold_math_verify_cannot_read_is_a_params_problem():
    assert VERIFIER.params_problems({"answer": "\\frac{1}{2}"}, CONTEXT) == []
    [problem] = VERIFIER.params_problems({"answer": "\\frac{"}, CONTEXT)
    assert "cannot read the expected answer" in problem
    assert problem.endswith("(/verifier/params/answer)")
