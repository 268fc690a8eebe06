"""`text_answer`: a short final answer (a label, a team) equals an accepted answer after SQuAD normalisation."""

import pytest

from validators.registry import Completion, VerifyContext, spec_problems
from validators.verifiers.text import TextAnswer, final_answer, normalize_answer

VERIFIER = TextAnswer()
CONTEXT = VerifyContext()
PARAMS = {"answers": ["platform team", "platform"], "choices": ["platform team", "payments team", "storage team"]}


def judge(text, params=PARAMS):
    return VERIFIER.check(params, Completion(text), CONTEXT)


@pytest.mark.parametrize(
    "text",
    [
        "platform team",
        # Case, articles, punctuation and markdown do not matter.
        "The Platform Team.",
        "**Answer:** the platform team",
        # Any accepted spelling.
        "Answer: platform",
        # Reasoning first, the marked answer last.
        "The failing job uses the CI token, which the platform team owns.\nAnswer: platform team",
        # A model that corrects itself: the last statement counts.
        "Answer: payments team\nWait, the token is CI's. Answer: platform team",
        # No marker: the last non-empty line.
        "CI tokens belong to infrastructure.\n\nplatform team\n",
        r"So the owner is \boxed{platform team}",
        r"So the owner is $\boxed{\text{Platform}}$",
        # The same answer boxed twice on a line is not a hedge.
        r"\boxed{platform team}, i.e. \boxed{\text{Platform Team}}",
        # A box on a later line corrects an earlier one.
        "First guess: \\boxed{storage team}\nOn reflection: \\boxed{platform team}",
    ],
)
def test_accepts(text):
    assert judge(text).passed, judge(text).reason


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "no_answer"),
        ("  \n **  ", "no_answer"),
        ("Answer: payments team", "answer_mismatch: expected 'platform team', got 'payments team'"),
        # Listing candidates is no answer: equality, never containment.
        ("Answer: platform team or payments team", "not_a_choice: 'platform team or payments team'"),
        # The right team early, a wrong one last.
        ("The platform team might own it.\nAnswer: storage team", "answer_mismatch"),
        # Two boxes on one line: the last box is right, but it is offered beside another.
        (r"\boxed{storage team} or \boxed{platform team}", "ambiguous_answer: 'platform team' is boxed beside"),
        # Two boxes with no joining word.
        (r"$\boxed{payments team}$ $\boxed{platform}$", "ambiguous_answer"),
        # Something outside the label set.
        ("Answer: the on-call engineer", "not_a_choice: 'the on-call engineer'"),
    ],
)
def test_rejects(text, reason):
    verdict = judge(text)
    assert not verdict.passed and verdict.score == 0.0
    assert verdict.reason.startswith(reason), verdict.reason


def test_without_choices_a_wrong_answer_is_a_mismatch():
    verdict = judge("Answer: the on-call engineer", {"answers": ["platform team"]})
    assert verdict.reason == "answer_mismatch: expected 'platform team', got 'the on-call engineer'"


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"answers": []}, "should be non-empty"),
        ({"answers": ["the"]}, "answer 'the' is empty once normalised (/verifier/params/answers/0)"),
        (
            {"answers": ["ops"], "choices": ["platform", "payments"]},
            "every accepted answer must be one of the choices",
        ),
        # One choice is no choice.
        ({"answers": ["ops"], "choices": ["ops"]}, "is too short"),
        ({"answer": "ops"}, "'answers' is a required property"),
    ],
)
def test_params_problems(params, problem):
    problems = spec_problems({"name": "text_answer", "params": params})
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize("params", [PARAMS, {"answers": ["platform"]}, {"answers": ["yes"], "choices": ["yes", "no"]}])
def test_wrong_answer_fails_and_the_reference_passes(params):
    assert not judge(VERIFIER.wrong_answer(params), params).passed
    assert judge(f"Answer: {params['answers'][0]}", params).passed


@pytest.mark.parametrize("params", [PARAMS, {"answers": ["platform"]}, {"answers": ["yes"], "choices": ["yes", "no"]}])
def test_hack_probes_fail(params):
    # Every probe names the gold beside a wrong answer; none may pass.
    probes = VERIFIER.hack_probes(params, None, VerifyContext())
    assert {p.name for p in probes} >= {"hedge_or", "hedge_boxes"}
    assert ("choices" in params) == ("every_choice" in {p.name for p in probes})
    for probe in probes:
        assert not judge(probe.completion, params).passed, probe


def test_normalisation_and_extraction():
    assert normalize_answer("  An **Urgent** page!! ") == "urgent page"
    assert final_answer("Thinking...\nThe answer is: storage.\n") == "storage."
    assert final_answer("Answer:\nplatform") == "platform"  # a marker with nothing after it on its line
    assert final_answer("\n\n") is None
