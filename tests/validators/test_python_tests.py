"""`python_tests`: extraction, honest per-test counts, reason codes, and params checks."""

import pytest

from tests.paths import SEEDS
from validators.extract import extract_code
from validators.registry import REGISTRY, VerifyContext, spec_problems, verify
from validators.seeds import discover_seed_files, read_seed_file
from validators.verifiers.python_tests import TestsError, plan_tests, return_type

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
        # Patching builtins to swallow failures is tampering, named before any test runs.
        (
            "import builtins\nbuiltins.all = lambda it: True\ndef add(a, b):\n    return 0",
            HUMANEVAL_TESTS,
            "tampering: builtins.all was replaced, while defining the solution",
            0.0,
        ),
    ],
)
def test_verdicts(completion, tests, reason, score):
    verdict = verify(task(tests), completion)
    assert verdict.reason == reason
    assert verdict.score == pytest.approx(score)
    assert verdict.passed == (reason == "ok")


ADD_MINUTES_TESTS = 'assert add_minutes("23:45", 30) == "00:15"\nassert add_minutes("09:05", 0) == "09:05"'
ADD_MINUTES = (
    "def add_minutes(clock, minutes):\n"
    '    hours, mins = map(int, clock.split(":"))\n'
    "    total = (hours * 60 + mins + minutes) % 1440\n"
    '    return f"{total // 60:02d}:{total % 60:02d}"\n'
)


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        # The hack: a str whose __eq__ always holds passed 6/6; it never reaches a comparison now.
        (
            "class _Any(str):\n    def __eq__(self, other):\n        return True\n    __hash__ = str.__hash__\n"
            "def add_minutes(clock, minutes):\n    return _Any()",
            "non_plain_value: add_minutes() returned _Any, in line 1",
        ),
        # The same trick one level down, inside a plain list.
        (
            "class _Any:\n    def __eq__(self, other):\n        return True\n"
            "def add_minutes(clock, minutes):\n    return [_Any()]",
            "non_plain_value: add_minutes() returned _Any, in line 1",
        ),
        # A generator is not a value; tests must not consume it in the solution's favour.
        ("def add_minutes(clock, minutes):\n    yield '00:15'", "non_plain_value: add_minutes() returned generator"),
        # An object whose __del__ would raise in the harness never gets there.
        (
            "class _D(str):\n    def __del__(self):\n        raise AssertionError\n"
            "def add_minutes(clock, minutes):\n    return _D('00:15')",
            "non_plain_value: add_minutes() returned _D",
        ),
        # sys.exit before the tests: a harness that trusts the exit status would pass it.
        ("import sys\nsys.exit(0)", "early_exit: SystemExit, while defining the solution"),
        # os._exit before the tests skips every handler.
        ("import os\nos._exit(0)", "early_exit: the solution's process ended with exit status 0, while defining"),
        # sys.exit inside the function, during the first test.
        ("import sys\ndef add_minutes(clock, minutes):\n    sys.exit(0)", "early_exit: SystemExit raised by add_"),
        # os._exit during a call.
        (
            "import os\ndef add_minutes(clock, minutes):\n    os._exit(0)",
            "early_exit: the solution's process ended with exit status 0, in line 1",
        ),
        # An atexit handler that would print passing lines, then an exit: the handler never runs.
        (
            "import atexit, os\natexit.register(print, 'test 0 pass')\nos._exit(0)",
            "early_exit: the solution's process ended",
        ),
        # A __del__ that exits when the temporary object dies mid-call.
        (
            "import os\nclass _D:\n    def __del__(self):\n        os._exit(0)\n"
            "def add_minutes(clock, minutes):\n    _D()\n    return '00:15'",
            "early_exit: the solution's process ended with exit status 0, in line 1",
        ),
        # Rebinding the assertion machinery.
        (
            "import builtins\nbuiltins.AssertionError = type('X', (Exception,), {})\n" + ADD_MINUTES,
            "tampering: builtins.AssertionError was replaced, while defining the solution",
        ),
        # Monkeypatching isinstance inside the function, during a call.
        (
            "import builtins\ndef add_minutes(clock, minutes):\n    builtins.isinstance = lambda *a: True\n"
            "    return '00:15'",
            "tampering: builtins.isinstance was replaced, in line 1",
        ),
        # Adding a name through the module's __builtins__.
        ("__builtins__.__dict__['answer'] = 42\n" + ADD_MINUTES, "tampering: names were added to or removed"),
        # Replacing the module's __builtins__.
        ("__builtins__ = {'print': print}\n" + ADD_MINUTES, "tampering: the solution's __builtins__ was replaced"),
        # Reading the test's frame for the expected value.
        (
            "import sys\ndef add_minutes(clock, minutes):\n    return str(sys._getframe(1).f_locals)",
            "introspection: sys._getframe into the harness, in line 1",
        ),
        # Forging results with the harness's report function, found through the frame above the solution.
        (
            "import sys\nf = sys._getframe(1)\nf.f_locals['report']('test', '0 pass')\n" + ADD_MINUTES,
            "introspection: sys._getframe into the harness, while defining the solution",
        ),
        # Searching every live object for the tests.
        ("import gc\nobjects = gc.get_objects()\n" + ADD_MINUTES, "introspection: gc.get_objects"),
        # Following references back from the function to whoever holds it.
        (
            "import gc\ndef add_minutes(clock, minutes):\n    gc.get_referrers(add_minutes)\n    return '00:15'",
            "introspection: gc.get_referrers, in line 1",
        ),
        # A tracer sees every frame the harness runs.
        ("import sys\nsys.settrace(lambda *a: None)\n" + ADD_MINUTES, "introspection: sys.settrace"),
        # Raw memory through ctypes.
        ("import ctypes\nctypes.string_at(id(0), 8)\n" + ADD_MINUTES, "introspection: ctypes.string_at"),
        # The task files on disk hold the tests and their answers.
        (
            f"open({str(SEEDS / 'python_function' / 'dates.yaml')!r}).read()\n" + ADD_MINUTES,
            "forbidden_access: open " + str(SEEDS / "python_function" / "dates.yaml"),
        ),
        # ... also where the sandbox's own /tmp hides them: the hook names the attempt wherever the checkout is.
        ("open('/tmp/seeds/python_function/dates.yaml').read()\n" + ADD_MINUTES, "forbidden_access: open /tmp/seeds/"),
        ("import os\nos.listdir('/tmp')\n" + ADD_MINUTES, "forbidden_access: os.listdir /tmp,"),
        # Listing directories to find them.
        ("import os\nos.listdir('/')\n" + ADD_MINUTES, "forbidden_access: os.listdir /,"),
        # The harness's environment and memory through /proc.
        ("import os\nopen(f'/proc/{os.getppid()}/environ').read()\n" + ADD_MINUTES, "forbidden_access: open /proc/"),
        # A shell would read files without the audit hook.
        ("import subprocess\n" + ADD_MINUTES, "forbidden_access: import _posixsubprocess"),
        # os.system too.
        ("import os\nos.system('cat /etc/hostname')\n" + ADD_MINUTES, "forbidden_access: os.system"),
    ],
)
def test_reward_hacks_fail_with_their_reason(code, reason):
    # Every hack scores 0, even one that leaves a correct function behind.
    verdict = verify(task(ADD_MINUTES_TESTS, "add_minutes", timeout_s=3), code)
    assert verdict.reason.startswith(reason), verdict.reason
    assert verdict.score == 0.0


@pytest.mark.parametrize(
    "code",
    [
        # Walking frames with f_back finds only the solution's own process: nothing to read, nothing paid.
        "import sys\ndef add_minutes(clock, minutes):\n    f = sys._getframe(0)\n    while f.f_back:\n"
        "        f = f.f_back\n    return str(f.f_locals)[:5]",
        # inspect walks the same frames.
        "import inspect\ndef add_minutes(clock, minutes):\n    return str(inspect.stack()[-1].frame.f_locals)[:5]",
        # The environment is empty: no secret, no test.
        "import os\ndef add_minutes(clock, minutes):\n    return os.environ.get('EXPECTED', '')",
    ],
)
def test_snooping_that_finds_nothing_gains_nothing(code):
    verdict = verify(task(ADD_MINUTES_TESTS, "add_minutes"), code)
    assert verdict.reason.startswith("tests_failed: 2/2"), verdict.reason


@pytest.mark.parametrize(
    ("code", "tests", "entry_point"),
    [
        # A plain correct solution.
        (ADD_MINUTES, ADD_MINUTES_TESTS, "add_minutes"),
        # namedtuple and TypeVar look up their caller's frame: legitimate uses of sys._getframe.
        (
            "from collections import namedtuple\nfrom typing import TypeVar\nT = TypeVar('T')\n"
            "P = namedtuple('P', 'h m')\n" + ADD_MINUTES,
            ADD_MINUTES_TESTS,
            "add_minutes",
        ),
        # Standard-library imports (datetime, re, json) read stdlib files.
        (
            "import json, re\nfrom datetime import datetime, timedelta\ndef add_minutes(clock, minutes):\n"
            "    t = datetime.strptime(clock, '%H:%M') + timedelta(minutes=minutes)\n    return t.strftime('%H:%M')",
            ADD_MINUTES_TESTS,
            "add_minutes",
        ),
        # A temporary file: `tempfile` writes in the solution's working directory.
        (
            "import tempfile\ndef add_minutes(clock, minutes):\n    with tempfile.TemporaryFile('w+') as f:\n"
            "        f.write(clock)\n        f.seek(0)\n        hours, mins = map(int, f.read().split(':'))\n"
            "    total = (hours * 60 + mins + minutes) % 1440\n    return f'{total // 60:02d}:{total % 60:02d}'",
            ADD_MINUTES_TESTS,
            "add_minutes",
        ),
        # In-place changes to a list argument reach the test's list.
        (
            "def sort_in_place(items):\n    items.sort()",
            "items = [3, 1, 2]\nsort_in_place(items)\nassert items == [1, 2, 3]",
            "sort_in_place",
        ),
        # ... and to a dict argument.
        (
            "def bump(counts, key):\n    counts[key] = counts.get(key, 0) + 1",
            "counts = {}\nbump(counts, 'a')\nassert counts == {'a': 1}",
            "bump",
        ),
        # An expected exception arrives as the same builtin class, under the solution's class name too.
        (
            "import json\ndef parse(text):\n    return json.loads(text)",
            "try:\n    parse('{')\nexcept ValueError as exc:\n    assert type(exc).__name__ == 'JSONDecodeError'\n"
            "else:\n    raise AssertionError\nassert parse('[1]') == [1]",
            "parse",
        ),
        # Keyword arguments, tuples, sets, bytes, None and floats cross both ways.
        (
            "def shape(a, *, b=None):\n    return (a, {1, 2}, b'x', None, 0.5, {'k': [a]})",
            "assert shape(1, b=2) == (1, {1, 2}, b'x', None, 0.5, {'k': [1]})",
            "shape",
        ),
        # Tests may call helper functions the solution defines, not only the entry point.
        (
            "def encode(s):\n    return s[::-1]\ndef decode(s):\n    return s[::-1]",
            "assert decode(encode('abc')) == 'abc'",
            "decode",
        ),
    ],
)
def test_legitimate_solutions_pass(code, tests, entry_point):
    verdict = verify(task(tests, entry_point), code)
    assert verdict.reason == "ok"


def test_tests_must_call_with_plain_values():
    # A lambda cannot cross to the solution's process: the test fails with a TypeError that says why.
    verdict = verify(task("assert apply(lambda x: x, 1) == 1", "apply"), "def apply(f, x):\n    return f(x)")
    assert verdict.reason == "tests_failed: 1/1 (first: line 1 TypeError)"


@pytest.mark.parametrize(
    ("reference", "base"),
    [
        # A str annotation: the always-equal object is a str, as in the issue.
        ("def f(x) -> str:\n    return ''", "str"),
        # A parametrised generic: its origin.
        ("```python\ndef f(x) -> list[int]:\n    return []\n```", "list"),
        # bool cannot be subclassed; int is its base.
        ("def f(x) -> bool:\n    return True", "int"),
        # An optional: the non-None side.
        ("def f(x) -> dict | None:\n    return None", "dict"),
        # No annotation: a plain object.
        ("def f(x):\n    return 1", "object"),
        # No reference at all.
        ("", "object"),
    ],
)
def test_return_type_for_the_always_equal_probe(reference, base):
    assert return_type(reference, "f") == base


def test_hack_probes_fail_on_every_bundled_seed():
    # Probes come from each task; the harness names each attack.
    expected = {"always_equal": "non_plain_value", "exit_before_tests": "early_exit", "forged_report": "introspection"}
    verifier = REGISTRY.get("python_tests")
    for path in discover_seed_files([SEEDS / "python_function"]):
        records, _ = read_seed_file(path)
        for record in records[:2]:
            params, reference = record.raw["verifier"]["params"], record.raw["reference"]
            for probe in verifier.hack_probes(params, reference, VerifyContext()):
                verdict = verify({"verifier": {"name": "python_tests", "params": params}}, probe.completion)
                assert verdict.code == expected[probe.name], (record.origin, probe.name, verdict)


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
