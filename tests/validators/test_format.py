"""Format verifiers (format_tags, json_valid) and the weighted combination of verifiers."""

import pytest

from validators.registry import REGISTRY, Completion, VerifyContext, spec_problems

CONTEXT = VerifyContext()
TAGS = REGISTRY.get("format_tags")
JSON_VALID = REGISTRY.get("json_valid")
WEIGHTED = REGISTRY.get("weighted")


@pytest.mark.parametrize(
    ("params", "text", "reason"),
    [
        # Both tags, in order.
        ({"tags": ["think", "answer"], "order": True}, "<think>9*2</think>\n<answer>18</answer>", "ok"),
        # Order not required: answer first is fine.
        ({"tags": ["think", "answer"]}, "<answer>18</answer><think>9*2</think>", "ok"),
        # Order required: answer first fails.
        (
            {"tags": ["think", "answer"], "order": True},
            "<answer>18</answer><think>9*2</think>",
            "tag_order: <answer> must come after </think>",
        ),
        # Interleaved pairs are out of order even though both open in order.
        (
            {"tags": ["think", "answer"], "order": True},
            "<think>a<answer>18</think></answer>",
            "tag_order: <answer> must come after </think>",
        ),
        # A missing tag.
        ({"tags": ["think", "answer"]}, "<think>9*2</think> 18", "tag_missing: <answer>"),
        # Opened, never closed (a truncated generation).
        ({"tags": ["answer"]}, "<answer>18", "tag_unbalanced: <answer> opened 1 times, closed 0"),
        # Closed before opened.
        ({"tags": ["answer"]}, "</answer>18<answer>", "tag_unbalanced: </answer> comes before <answer>"),
        # Two answers would let a model hedge.
        (
            {"tags": ["answer"]},
            "<answer>16</answer><answer>18</answer>",
            "tag_repeated: <answer> appears 2 times, expected once",
        ),
        # An empty think block is a classic format-reward hack.
        ({"tags": ["think", "answer"]}, "<think> </think><answer>18</answer>", "tag_empty: <think>"),
        # ... unless the task allows it (e.g. a non-thinking mode).
        ({"tags": ["think", "answer"], "allow_empty": True}, "<think></think><answer>18</answer>", "ok"),
        # Tag names are exact: <Answer> is not <answer>.
        ({"tags": ["answer"]}, "<Answer>18</Answer>", "tag_missing: <answer>"),
    ],
)
def test_format_tags(params, text, reason):
    verdict = TAGS.check(params, Completion(text), CONTEXT)
    assert verdict.reason == reason
    assert verdict.passed is (reason == "ok")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        # An object in prose.
        ('Result: {"ok": true}', "ok"),
        # A fenced array.
        ("```json\n[1, 2]\n```", "ok"),
        # No JSON.
        ("nothing here", "json_missing"),
        # Broken JSON, with where.
        ('{"ok": tru}', "json_invalid: line 1 col 8"),
        # NaN is not JSON.
        ('{"x": NaN}', "json_invalid: NaN is not valid JSON"),
    ],
)
def test_json_valid(text, reason):
    assert JSON_VALID.check({}, Completion(text), CONTEXT).reason == reason


NUMERIC = {"name": "numeric_answer", "params": {"answer": 18}, "weight": 0.8}
FORMAT = {"name": "format_tags", "params": {"tags": ["answer"]}, "weight": 0.2}


@pytest.mark.parametrize(
    ("extra", "text", "score", "reason"),
    [
        # Right answer, right format: full score.
        ({}, "<answer>18</answer>", 1.0, "ok"),
        # Right answer, wrong format: partial score, and all components must pass by default.
        ({}, "#### 18", 0.8, "tag_missing: <answer> [format_tags]"),
        # Wrong answer in the right format: the format bonus never makes it a pass.
        ({}, "<answer>16</answer>", 0.2, "answer_mismatch: expected 18, got 16 [numeric_answer]"),
        # A reason without detail keeps its code first.
        ({}, "<answer>none</answer>", 0.2, "no_answer: [numeric_answer]"),
        # With a threshold, a high enough score passes although a component failed.
        ({"pass_threshold": 0.75}, "#### 18", 0.8, "ok"),
        # Below the threshold, the reason says by how much and which component failed first.
        (
            {"pass_threshold": 0.75},
            "<answer>16</answer>",
            0.2,
            "below_threshold: score 0.2 < 0.75; answer_mismatch: expected 18, got 16 [numeric_answer]",
        ),
    ],
)
def test_weighted(extra, text, score, reason):
    verdict = WEIGHTED.check({"components": [NUMERIC, FORMAT], **extra}, Completion(text), CONTEXT)
    assert verdict.score == pytest.approx(score)
    assert verdict.reason == reason
    assert verdict.passed is (reason == "ok")


def test_weighted_scores_are_normalized_by_total_weight():
    # Weights need not sum to 1: 3 and 1 behave like 0.75 and 0.25.
    params = {"components": [{**NUMERIC, "weight": 3}, {**FORMAT, "weight": 1}]}
    assert WEIGHTED.check(params, Completion("#### 18"), CONTEXT).score == pytest.approx(0.75)


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        # An unknown component lists what is registered.
        ({"components": [{"name": "numerc_answer", "params": {}, "weight": 1}]}, "registered: "),
        # ... at the component's name.
        (
            {"components": [{"name": "numerc_answer", "params": {}, "weight": 1}]},
            "(/verifier/params/components/0/name)",
        ),
        # A component's own params problems point inside it.
        (
            {"components": [FORMAT, {"name": "numeric_answer", "params": {"answer": "x"}, "weight": 1}]},
            "(/verifier/params/components/1/params/answer)",
        ),
        # Schema errors of a component are re-pointed too.
        (
            {"components": [{"name": "format_tags", "params": {"tags": []}, "weight": 1}]},
            "(/verifier/params/components/0/params/tags)",
        ),
        # Weights must be positive.
        ({"components": [{**FORMAT, "weight": 0}]}, "less than or equal to the minimum of 0"),
        # No components.
        ({"components": []}, "should be non-empty"),
        # A threshold is a score, in [0, 1].
        ({"components": [FORMAT], "pass_threshold": 2}, "greater than the maximum of 1"),
        # An unknown component version.
        ({"components": [{**FORMAT, "version": 9}]}, "has no version 9"),
    ],
)
def test_weighted_params_problems(params, problem):
    problems = spec_problems({"name": "weighted", "params": params})
    assert any(problem in p for p in problems), problems


def test_format_params_problems():
    # A tag name must be a plain XML-ish name, so it cannot smuggle regex or markup.
    problems = spec_problems({"name": "format_tags", "params": {"tags": ["an swer"]}})
    assert any("does not match" in p for p in problems), problems
    # json_valid takes no params; a typo is caught.
    assert spec_problems({"name": "json_valid", "params": {"strict": True}})


@pytest.mark.parametrize(
    "params",
    [
        # Correctness + format.
        {"components": [NUMERIC, FORMAT]},
        # With a threshold the wrong answer must still fail the combination.
        {"components": [NUMERIC, FORMAT], "pass_threshold": 0.1},
    ],
)
def test_weighted_wrong_answer_fails(params):
    wrong = WEIGHTED.wrong_answer(params)
    assert wrong is not None
    assert not WEIGHTED.check(params, Completion(wrong), CONTEXT).passed


@pytest.mark.parametrize(
    ("verifier", "params"),
    [
        # No tags at all.
        (TAGS, {"tags": ["answer"]}),
        # No JSON at all.
        (JSON_VALID, {}),
    ],
)
def test_format_wrong_answers_fail(verifier, params):
    assert not verifier.check(params, Completion(verifier.wrong_answer(params)), CONTEXT).passed
