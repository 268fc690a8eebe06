"""`python_tests`: extraction, honest per-test counts, reason codes, and params checks."""

import pytest

from validators.extract import extract_code
from validators.registry import REGISTRY, VerifyContext, spec_problems, verify
from validators.verifiers.python_tests import TestsError, plan_tests

MBPP_TESTS = "\n".join(
    [
        "assert add(1, 2) == 3",
        "assert add(0, 0) == 0",
        "assert add(-1, 1) == 0",
        "assert add(2, 2) == 4",
        "assert add(5, 5) == 10",
    ]
)
HUMANEVAL_TESTS = '''
METADATA = {"author": "x"}


def check(candidate):
    """Docstrings are not tests."""
    assert candidate(1, 2) == 3
    pairs = [(0, 0), (2, 3)]
    for a, b in pairs:
        assert candidate(a, b) == a + b
    assert all(candidate(x, 1) == x + 1 for x in range(3))

check(add)
'''
PYTEST_TESTS = "def test_small():\n    assert add(1, 1) == 2\n\ndef test_candidate(f):\n    assert f(2, 2) == 4\n"


def task(tests: str = MBPP_TESTS, entry_point: str = "add", **extra) -> dict:
    return {"verifier": {"name": "python_tests", "params": {"tests": tests, "entry_point": entry_point, **extra}}}


@pytest.mark.parametrize(
    ("completion", "tests", "reason", "score"),
    [
        # A correct solution in a python fence.
        ("```python\ndef add(a, b):\n    return a + b\n```", MBPP_TESTS, "ok", 1.0),
        # Bare code without a fence.
        ("def add(a, b):\n    return a + b", MBPP_TESTS, "ok", 1.0),
        # The last python block wins over an earlier draft.
        (
            "```python\ndef add(a, b): return a - b\n```\nFixed:\n```python\ndef add(a, b): return a + b\n```",
            MBPP_TESTS,
            "ok",
            1.0,
        ),
        # a * b passes 2 of 5 (0*0 and 2*2): the count is per assert.
        ("def add(a, b):\n    return a * b", MBPP_TESTS, "tests_failed: 3/5 (first: line 1 AssertionError)", 0.4),
        # An exception in one test fails only that test.
        (
            "def add(a, b):\n    return 1 // a + a + b - 1 // a",
            MBPP_TESTS,
            "tests_failed: 1/5 (first: line 2 ZeroDivisionError)",
            0.8,
        ),
        # No code at all.
        ("", MBPP_TESTS, "no_code", 0.0),
        # Only whitespace inside a fence.
        ("```python\n   \n```", MBPP_TESTS, "no_code", 0.0),
        # A syntax error names the line.
        ("x = 1\ny = 2\ndef add(a, b) return a", MBPP_TESTS, "syntax_error: line 3", 0.0),
        # The function has the wrong name.
        ("def plus(a, b):\n    return a + b", MBPP_TESTS, "missing_entry_point: add", 0.0),
        # The entry point exists but is not callable.
        ("add = 3", MBPP_TESTS, "missing_entry_point: add", 0.0),
        # Raising while defining the solution.
        ("raise ValueError('no')", MBPP_TESTS, "solution_error: ValueError while defining the solution", 0.0),
        # HumanEval style: three statements of check's body are tests (the for loop is one).
        ("def add(a, b):\n    return a + b", HUMANEVAL_TESTS, "ok", 1.0),
        # HumanEval style, wrong: a constant 3 passes only the first statement (1 + 2 == 3).
        ("def add(a, b):\n    return 3", HUMANEVAL_TESTS, "tests_failed: 2/3 (first: line 9 AssertionError)", 1 / 3),
        # pytest style: each test_* function is a test; one taking a parameter gets the entry point.
        ("def add(a, b):\n    return a + b", PYTEST_TESTS, "ok", 1.0),
        # pytest style, wrong.
        (
            "def add(a, b):\n    return 2",
            PYTEST_TESTS,
            "tests_failed: 1/2 (first: test_candidate (line 4) AssertionError)",
            0.5,
        ),
        # Patching builtins to swallow failures does not carry into the tests.
        (
            "import builtins\nbuiltins.all = lambda it: True\ndef add(a, b):\n    return 0",
            HUMANEVAL_TESTS,
            "tests_failed: 3/3 (first: line 7 AssertionError)",
            0.0,
        ),
    ],
)
def test_verdicts(completion, tests, reason, score):
    verdict = verify(task(tests), completion)
    assert verdict.reason == reason
    assert verdict.score == pytest.approx(score)
    assert verdict.passed == (reason == "ok")


def test_a_timeout_keeps_the_tests_that_passed():
    # Partial credit is honest: the first test passed before the loop started.
    tests = "assert f(1) == 1\nassert f(2) == 2\nassert f(0) == 0"
    code = "def f(x):\n    while x == 2:\n        pass\n    return x"
    verdict = verify(task(tests, "f", timeout_s=1), code)
    assert verdict.reason == "timeout: wall limit 1s, 1/3 passed"
    assert verdict.score == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    ("tests", "total"),
    [
        # Five top-level asserts.
        (MBPP_TESTS, 5),
        # Imports and helpers are set-up, not tests.
        ("import math\ndef helper(x):\n    assert x\nassert f(1) == 1\nhelper(f(1))", 1),
        # A loop with an assert is one test.
        ("for i in range(10):\n    assert f(i) == i", 1),
        # check(candidate): each body statement with an assert.
        (HUMANEVAL_TESTS, 3),
        # check with a return cannot be split: one test.
        ("def check(c):\n    if c(0):\n        return\n    assert c(1) == 1", 1),
        # check without top-level asserts (asserts in a helper): one test.
        ("def _h(c):\n    assert c(1)\ndef check(c):\n    _h(c)", 1),
        # Two test_* functions plus a top-level assert.
        (PYTEST_TESTS + "assert add(0, 0) == 0\n", 3),
    ],
)
def test_plans_count_tests(tests, total):
    assert plan_tests(tests, "f").total == total


@pytest.mark.parametrize(
    "tests",
    [
        # No test at all.
        "x = 1",
        # Does not parse.
        "assert f(1) ==",
    ],
)
def test_unplannable_tests_are_rejected(tests):
    with pytest.raises(TestsError):
        plan_tests(tests, "f")


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        # Valid params have no problems.
        ({"tests": MBPP_TESTS, "entry_point": "add"}, None),
        # entry_point is required.
        ({"tests": MBPP_TESTS}, "'entry_point' is a required property"),
        # entry_point must be an identifier.
        ({"tests": MBPP_TESTS, "entry_point": "add me"}, "does not match"),
        # Tests without any test.
        ({"tests": "x = 1", "entry_point": "add"}, "tests contain no test"),
        # A timeout above the cap.
        ({"tests": MBPP_TESTS, "entry_point": "add", "timeout_s": 600}, "600 is greater than the maximum"),
    ],
)
def test_params_problems(params, problem):
    problems = spec_problems({"name": "python_tests", "params": params}, VerifyContext())
    if problem is None:
        assert problems == []
    else:
        assert any(problem in p for p in problems), problems


def test_wrong_answer_fails_the_tests():
    # Task validation relies on the stub failing any real test.
    params = {"tests": MBPP_TESTS, "entry_point": "add"}
    wrong = REGISTRY.get("python_tests").wrong_answer(params)
    assert wrong is not None
    assert verify(task(), wrong).reason.startswith("tests_failed: 5/5")


@pytest.mark.parametrize(
    ("text", "code"),
    [
        # A python fence.
        ("Here:\n```python\nx = 1\n```\nDone.", "x = 1"),
        # A py fence after a plain one: the wanted language wins.
        ("```\nplain\n```\n```py\nx = 2\n```", "x = 2"),
        # No python fence: the last fence of any language.
        ("```js\nfirst\n```\n```text\nsecond\n```", "second"),
        # An unterminated fence (cut off by the token limit) still counts.
        ("```python\ndef f():\n    return 1", "def f():\n    return 1"),
        # No fence: the whole text.
        ("  x = 3  \n", "x = 3"),
    ],
)
def test_extract_code(text, code):
    assert extract_code(text, {"python", "py"}) == code
