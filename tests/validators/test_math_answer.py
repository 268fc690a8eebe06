"""`math_answer`: the forms models write for MATH-style answers, its hedge rules, hostile input, hack probes."""

from __future__ import annotations

import pytest

from tests.math_forms import ACCEPTS, REJECTS
from validators.registry import REGISTRY, Completion, VerifyContext
from validators.verifiers.math_answer import MathAnswer, MathAnswerError

VERIFIER = REGISTRY.get("math_answer")
CONTEXT = VerifyContext()


def judge(answer, text):
    return VERIFIER.check({"answer": answer}, Completion(text), CONTEXT)


@pytest.mark.parametrize(("answer", "text"), ACCEPTS)
def test_accepts(answer, text):
    verdict = judge(answer, text)
    assert verdict.passed, verdict.reason


@pytest.mark.parametrize(("answer", "text", "reason"), REJECTS)
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
