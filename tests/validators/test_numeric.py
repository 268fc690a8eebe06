"""numeric_answer: the final number of free text, the way real models write it."""

import json

import pytest

from tests.paths import GSM8K
from validators.registry import REGISTRY, Completion, VerifyContext, spec_problems, verify

VERIFIER = REGISTRY.get("numeric_answer")
CONTEXT = VerifyContext()


def judge(answer, text, **params):
    return VERIFIER.check({"answer": answer, **params}, Completion(text), CONTEXT)


@pytest.mark.parametrize(
    ("answer", "text"),
    [
        # GSM8K's own marker.
        (42, "6 * 7 = 42\n#### 42"),
        # LaTeX box, the math-model convention.
        (42, "So the result is $\\boxed{42}$."),
        # Dollar sign, thousands separator, trailing period.
        (1234.5, "The answer is $1,234.50."),
        # Markdown bold marker and a trailing unit.
        (18, "**Answer:** 18 dollars"),
        # "Final Answer" with the colon outside the bold.
        (18, "**Final Answer**: 18"),
        # No marker: the last number, followed by a unit.
        (540, "He sprints 3*3 = 9 times, so he runs 9*60 = 540 meters"),
        # A fraction as the final answer.
        ("3/4", "Each gets 3/4"),
        # A fraction compares by value with its decimal form.
        (0.75, "#### 3/4"),
        # A mixed number.
        (1.5, "She needs 1 1/2 cups"),
        # LaTeX fractions inside a box.
        ("3/4", "\\boxed{\\frac{3}{4}}"),
        # A percentage answers the percent number ...
        (25, "The discount is 25%"),
        # ... and its fraction.
        (0.25, "The discount is 25%."),
        # "percent" spelled out.
        (25, "That is 25 percent"),
        # A negative answer, ASCII minus.
        (-5, "The temperature drops to -5"),
        # A negative answer, Unicode minus as typeset.
        (-5, "#### \u22125"),
        # A negative dollar amount.
        (-5, "The balance is -$5"),
        # A decimal.
        (2.5, "#### 2.5"),
        # Scientific notation.
        (0.001, "The rate is 1e-3"),
        # A boxed equation: its right-hand side is the answer.
        (5, "\\boxed{x = 5}"),
        # LaTeX thousands spacing.
        (1234, "\\boxed{1{,}234}"),
        # \text units inside the box.
        (18, "\\boxed{18 \\text{ dollars}}"),
        # Integer answer given as a float string.
        ("18.0", "#### 18"),
        # The answer string may use thousands separators.
        ("70,000", "#### 70000"),
        # The last marker wins: a corrected answer after a first try.
        (18, "The answer is 16. Wait, I forgot the muffins.\nThe answer is 18."),
        # A marker beats a later number in prose (the check of the work after it).
        (18, "#### 18\nCheck: 9 * 2 = 18, and 16 - 3 - 4 = 9"),
        # A numbered markdown heading is a step, not an answer marker.
        (7, "#### 2. Add them\n3 + 4 = 7"),
        # "answer:" followed by words is not a marker; the last number stands.
        (12, "Let me find the answer: first, 16 - 4 = 12"),
        # Within the default tolerance.
        (0.1, "#### 0.1000000001"),
        # A rounded decimal of a fraction, within the default tolerance.
        ("1/3", "#### 0.3333333"),
        # rel_tol doubles as absolute tolerance near zero.
        (0, "#### 0.0000001"),
        # A date is not a number, so the answer before it stands.
        (12, "#### 12 (computed 3/4/2024)"),
        # A unit's exponent is not the answer: the number before the unit is.
        (25, "The area is 25 m^2."),
        (25, "Area: 5*5 = 25 cm^{2}"),
        (25, "5**2 = 25 m**2"),
        # A marker that states an equation: the answer is its result, not its first operand.
        (7, "The answer is 3 + 4 = 7."),
        (18, "#### 2 x 9 = $18"),
        # A bracketed explanation after the answer is not an alternative.
        (18, "#### 18 (9 eggs at 2 each)"),
        # A power is the number it names, not its base.
        (1000, "#### 10^3"),
        (1024, "The answer is 2^{10}."),
        (0.01, "#### 10**-2"),
        # TeX's shorthand fraction: single-digit arguments need no braces.
        ("1/2", "#### \\dfrac12"),
        ("1/4", "\\boxed{\\frac1{4}}"),
    ],
)
def test_accepts(answer, text):
    verdict = judge(answer, text)
    assert verdict.passed, verdict.reason


@pytest.mark.parametrize(
    ("answer", "text", "reason"),
    [
        # The right number early in the reasoning does not save a wrong final one.
        (18, "9 * 2 = 18, minus 2 for the bus is 16.\n#### 16", "answer_mismatch: expected 18, got 16"),
        # Without a marker the last number is judged, not an earlier correct one.
        (18, "First 18, then after tax 16", "answer_mismatch: expected 18, got 16"),
        # A quoted "#### 18" is still a marker, but a later marker wins.
        (18, 'The format is "#### 18"-style. The answer is 19.', "answer_mismatch: expected 18, got 19"),
        # Hedging with two markers: only the last counts.
        (18, "#### 18\n#### 16", "answer_mismatch: expected 18, got 16"),
        # Listing candidates after one marker is a hedge, whichever comes first.
        (18, "#### 16 or 18", "ambiguous_answer: another number is offered beside 16"),
        # No number at all.
        (18, "I do not know.", "no_answer"),
        # Empty completion.
        (18, "", "no_answer"),
        # A marker without a number and no number elsewhere.
        (18, "The answer is unclear.", "no_answer"),
        # Outside the tolerance.
        (18, "#### 18.01", "answer_mismatch: expected 18, got 18.01"),
        # A tight tolerance rejects a rounded answer.
        ("1/3", "#### 0.33", "answer_mismatch: expected 1/3, got 0.33"),
        # Integers compare exactly: an off-by-one in a large count is not rounding.
        (1450000, "#### 1,450,001", "answer_mismatch: expected 1450000, got 1,450,001"),
        # Sign matters.
        (5, "#### -5", "answer_mismatch: expected 5, got -5"),
        # Thousands separators are not decimal points.
        (1.234, "#### 1,234", "answer_mismatch: expected 1.234, got 1,234"),
        # A percentage that matches neither n nor n/100.
        (0.5, "It is 5%", "answer_mismatch: expected 0.5, got 5%"),
        # A date alone is not a number.
        (3, "Due 3/4/2024.", "no_answer"),
        # A power's base is not the answer.
        (10, "#### 10^3", "answer_mismatch: expected 10, got 10^3"),
        # `\frac123` is a half then 3 (as TeX reads it), not 1/23.
        ("1/23", "#### \\frac123", "ambiguous_answer: another number is offered beside 1/2"),
    ],
)
def test_rejects(answer, text, reason):
    verdict = judge(answer, text)
    assert not verdict.passed
    assert verdict.reason == reason
    assert verdict.score == 0.0


@pytest.mark.parametrize(
    "text",
    [
        # The first hedge: two numbers after GSM8K's marker.
        "#### 72 or 73",
        # A list of candidates after the marker.
        "#### 72, 73, 74",
        # The phrase marker with an alternative.
        "the answer is 72 or 73",
        # Two boxes joined by "or": the last box is the gold, but it is offered with another.
        "\\boxed{73} or \\boxed{72}",
        # Two candidates inside one box.
        "\\boxed{72, 73}",
        # Two candidates inside one box, the joiner in \text{}.
        "\\boxed{72 \\text{ or } 73}",
        # Two markers on one line joined by "or".
        "#### 73 or #### 72",
        # No marker: the last number is the gold, offered with another.
        "It is either 73 or 72.",
        # Units on both candidates.
        "The answer is 72 apples or 73 apples.",
        # Dollar amounts.
        "The answer is $72 or $73.",
        # A range is two numbers.
        "#### 72 to 74",
        # Two numbers separated by spaces only.
        "#### 72 73",
        # A slash between spaced numbers is an alternative (an unspaced 72/73 is a fraction).
        "#### 72 / 73",
        # A comma followed by a space splits two numbers (unlike the separator in 1,234).
        "#### 72, 234",
        # Bold markdown around both candidates.
        "**Answer:** **72** or **73**",
        # Percentages.
        "The discount is 72% or 73%.",
        # An alternative offered as an aside in brackets.
        "#### 72 (or 73)",
        "The answer is 72 (maybe 73).",
        "#### 72 [alternatively 73]",
    ],
)
def test_hedges_are_ambiguous(text):
    verdict = judge(72, text)
    assert verdict.reason.startswith("ambiguous_answer: "), verdict.reason
    assert verdict.score == 0.0


@pytest.mark.parametrize(
    ("answer", "text"),
    [
        # Thousands separators make one number.
        (1234, "#### 1,234"),
        # Currency sign.
        (12, "The answer is $12"),
        # A trailing period ends the sentence, not the number.
        (72, "The answer is 72."),
        # A box inside inline math.
        (72, "$\\boxed{72}$"),
        # Units after the number.
        (12, "#### 12 apples"),
        # An explanation with numbers in parentheses after the answer is not an alternative.
        (18, "**Answer:** 18 dollars (9 eggs at $2)"),
        # A reason after a comma is not an alternative.
        (18, "The answer is 18, since 9 * 2 = 18"),
        # A self-correction on the same line: the last marker wins, the earlier one is not joined to it.
        (18, "The answer is 16. Wait, no: the answer is 18."),
        # The same value restated in a box is not a second candidate.
        (18, "The answer is 18, i.e. \\boxed{18}"),
        # Llama's closing sentence.
        (18, "The final answer is $\\boxed{18}$. I hope it is correct."),
        # Arithmetic before the unmarked final number is not a list.
        (540, "so he runs 9*60 = 540 meters"),
        # A mixed number is one number.
        (1.5, "#### 1 1/2"),
    ],
)
def test_one_number_forms_stay_accepted(answer, text):
    verdict = judge(answer, text)
    assert verdict.passed, verdict.reason


@pytest.mark.parametrize(
    "params", [{"answer": 72}, {"answer": "3/4"}, {"answer": -5}, {"answer": 2.5, "rel_tol": 0.5}]
)
def test_hack_probes_fail(params):
    # Each probe puts the gold where a lax extractor reads it; all must fail as ambiguous.
    probes = VERIFIER.hack_probes(params, None, VerifyContext())
    assert {p.name for p in probes} == {
        "hedge_or",
        "hedge_list",
        "hedge_phrase",
        "hedge_boxes",
        "hedge_aside",
        "hedge_in_box",
        "hedge_unmarked",
    }
    for probe in probes:
        verdict = VERIFIER.check(params, Completion(probe.completion), CONTEXT)
        assert verdict.code == "ambiguous_answer", (probe, verdict)


def test_wider_tolerance_accepts_rounding():
    # A task can opt into a looser comparison for answers that are naturally rounded.
    assert judge("1/3", "#### 0.33", rel_tol=0.02).passed


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        # Words are not a number; the message says how to write one.
        ({"answer": "twelve"}, "is not a single number"),
        # A percentage is ambiguous as a gold answer.
        ({"answer": "25%"}, "is not a single number"),
        # Two numbers in one answer.
        ({"answer": "3 or 4"}, "is not a single number"),
        # A negative tolerance is meaningless.
        ({"answer": 3, "rel_tol": -1}, "less than the minimum"),
        # Unknown params are typos.
        ({"answer": 3, "tolerance": 0.1}, "Additional properties"),
        # The answer is required.
        ({}, "'answer' is a required property"),
        # Booleans are not numbers.
        ({"answer": True}, "is not of type"),
    ],
)
def test_params_problems(params, problem):
    problems = spec_problems({"name": "numeric_answer", "params": params})
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize(
    "params",
    [
        # An integer.
        {"answer": 18},
        # A fraction string.
        {"answer": "3/4"},
        # A tolerance wide enough to swallow +1 must still get a wrong answer outside it.
        {"answer": 2.5, "rel_tol": 0.5},
        # Zero.
        {"answer": 0},
    ],
)
def test_wrong_answer_fails(params):
    wrong = VERIFIER.wrong_answer(params)
    assert wrong is not None
    assert not VERIFIER.check(params, Completion(wrong), CONTEXT).passed


def test_verify_entry_point_uses_registry():
    # The registry's public entry point reaches this verifier by name.
    assert verify({"verifier": {"name": "numeric_answer", "params": {"answer": 4}}}, "2+2 = 4. #### 4").passed


def _gsm8k_rows():
    path = GSM8K / "test.jsonl"
    if not path.exists():
        pytest.skip(f"GSM8K test split not found at {path} (shared data is not checked out here)")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [(row["answer"], row["answer"].rsplit("####", 1)[1].strip()) for row in rows]


def test_gsm8k_references_pass_and_altered_ones_fail():
    rows = _gsm8k_rows()
    assert len(rows) > 1000
    failures = []
    for text, answer in rows:
        params = {"answer": answer}
        wrong = str(int(answer.replace(",", "")) + 1)
        before, _, _ = text.rpartition("####")
        cases = [
            # The reference as written must pass.
            (text, True),
            # A hedge on the final line fails even though the right number comes first.
            (f"{before}#### {answer} or {wrong}", False),
            # A second, later marker with another number overrides the first.
            (f"{text}\n#### {wrong}", False),
            # Replacing the final number must fail even though the reasoning shows the right one.
            (f"{before}#### {wrong}", False),
            # The verifier's own wrong answer must fail.
            (VERIFIER.wrong_answer(params), False),
        ]
        for completion, should_pass in cases:
            verdict = VERIFIER.check(params, Completion(completion), CONTEXT)
            if verdict.passed is not should_pass:
                failures.append((answer, completion[-60:], verdict.reason))
    assert failures == []


@pytest.mark.parametrize(
    "text",
    [
        # Nested box openers that never close.
        "\\boxed{" * 50_000,
        # A number too long to convert (Python caps int digits): no answer, not an exception.
        "1" * 200_000,
        # Many markers without numbers.
        "#### " * 50_000,
        # Exponents whose exact value would take minutes and gigabytes: not an answer.
        "#### 1e999999999",
        "#### 10^{999999999}",
        # Marker phrases followed by long whitespace.
        ("answer" + " " * 10_000) * 20,
    ],
)
def test_adversarial_inputs_fail_fast(text):
    # A reward function sees whatever a policy emits; extraction must stay linear and never raise.
    # That it stays linear is measured in bench/bench_adversarial_inputs.py, not timed here.
    assert not judge(18, text).passed
