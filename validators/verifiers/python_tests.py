"""`python_tests`: the completion's Python passes the task's tests, run in the sandbox (`validators.sandbox`).

Params: `tests` (Python source), `entry_point` (the function the completion must define), optional
`timeout_s`. The tests may be written three ways, and may mix them:

* top-level `assert` statements (MBPP style): each top-level statement that contains an `assert` is one test;
  other statements (imports, helpers) are set-up run in order;
* `def check(candidate): ...` (HumanEval style): each statement of its body that contains an `assert` is one
  test, run with the parameter bound to the entry point (a body with `return`/`global`/`nonlocal`, or with no
  `assert` at its top level, is a single test `check(entry_point)`); a top-level `check(...)` call is dropped
  because the harness makes it;
* `def test_*()` functions (pytest style, no fixtures): each is one test; one taking a parameter gets the entry
  point.

Each test runs once, in order, and counts as passed only when it raises nothing, so `tests_failed: 2/5` is an
honest count: a test that never ran (time-out, crash) is a failed one. Score = passed / total; the verdict
passes only when every test passes.

How results come back: the harness (trusted code, below) runs inside the sandbox with the solution. Before
the solution runs it reads the plan and the solution, deletes both files, compiles every test, and keeps
private references to `exec`, `compile` and the exception types it needs. Results travel on the sandbox's
control pipe with a random per-run nonce (never in a file, argv or the environment), so printing
`PASS` lines or exiting with status 0 gains nothing. The builtins module is restored before every test and
modules first imported by the solution are dropped, so `builtins.abs = ...` or a patched `math` does not
carry into the tests. Limits: the solution shares the harness's interpreter, so a solution that deliberately
walks the harness's frames (`sys._getframe`, `gc`) can find the nonce and forge results, patch modules the
harness imported before it ran, or return objects whose `__eq__` always holds. Those are deliberate reward
hacks rather than accidents; tests that check types, and the judge stage, are the defence.

`wrong_answer` is a stub that defines the entry point and returns None: tests that such a stub passes are too
weak to reward anything, so task validation flagging them is the point.
"""

from __future__ import annotations

import ast
import marshal
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

from validators.extract import extract_code
from validators.registry import Completion, Verdict, Verifier, VerifyContext, register
from validators.sandbox import SandboxLimits, run_python

DEFAULT_TIMEOUT_S = 5.0
MAX_TIMEOUT_S = 60.0
# Longer "solutions" are almost always degenerate generations; refusing them keeps compile time bounded.
MAX_CODE_CHARS = 100_000
PYTHON_FENCES = frozenset({"python", "py", "python3", "py3"})


class TestsError(ValueError):
    """A task's `tests` cannot be planned: a syntax error, or nothing in them is a test."""

    __test__ = False  # not a pytest class, despite the name


@dataclass(frozen=True)
class TestPlan:
    """The units the harness runs, in order: (source, is_test, name to bind the entry point to)."""

    __test__ = False

    units: tuple[tuple[str, bool, str], ...]
    labels: tuple[str, ...]  # one per test: where it is in the tests source (`line 7`)

    @property
    def total(self) -> int:
        return len(self.labels)


def _contains_assert(node: ast.AST) -> bool:
    """Whether a statement asserts at run time; nested defs and lambdas only assert when called."""
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
        return False
    return any(_contains_assert(child) for child in ast.iter_child_nodes(node))


def _needs_function_scope(body: list[ast.stmt]) -> bool:
    """Whether `check`'s body cannot run statement by statement at module level."""
    for stmt in body:
        for node in [stmt, *ast.walk(stmt)]:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
                continue
            if isinstance(node, ast.Return | ast.Global | ast.Nonlocal | ast.Yield | ast.YieldFrom | ast.Await):
                return True
    return False


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _calls_check(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Name)
        and stmt.value.func.id == "check"
    )


@lru_cache(maxsize=4096)
def plan_tests(tests: str, entry_point: str) -> TestPlan:
    """Split a task's tests into separately counted units (see the module docstring for the rules).

    Args:
        tests: the tests' Python source.
        entry_point: the function name the completion must define.

    Returns:
        A `TestPlan`; cached, so scoring many completions of one task plans once.

    Raises:
        TestsError: the tests do not parse, or contain no test.

    Example:
        >>> plan_tests("import math\\nassert f(1) == 2\\nassert f(2) == 4", "f").total
        2
    """
    try:
        tree = ast.parse(tests)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        line = getattr(exc, "lineno", None)
        raise TestsError(f"tests do not parse ({type(exc).__name__} at line {line}); fix the tests source") from exc
    units: list[tuple[str, bool, str]] = []
    labels: list[str] = []
    check = next((s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == "check"), None)
    test_functions = [
        s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name.startswith("test") and s is not check
    ]
    for stmt in tree.body:
        if check is not None and _calls_check(stmt):
            continue
        is_test = _contains_assert(stmt)
        units.append((ast.unparse(stmt), is_test, ""))
        if is_test:
            labels.append(f"line {stmt.lineno}")
    for func in test_functions:
        args = "(__candidate__)" if func.args.args else "()"
        units.append((f"{func.name}{args}", True, "__candidate__"))
        labels.append(f"{func.name} (line {func.lineno})")
    if check is not None:
        body = [s for s in check.body if not _is_docstring(s)]
        param = check.args.args[0].arg if len(check.args.args) == 1 else ""
        if not param or _needs_function_scope(body) or not any(_contains_assert(s) for s in body):
            units.append(("check(__candidate__)", True, "__candidate__"))
            labels.append(f"check (line {check.lineno})")
        else:
            for stmt in body:
                is_test = _contains_assert(stmt)
                units.append((ast.unparse(stmt), is_test, param))
                if is_test:
                    labels.append(f"line {stmt.lineno}")
    if not labels:
        raise TestsError(
            "tests contain no test: write top-level assert statements, a check(candidate) function with asserts, "
            "or test_* functions"
        )
    return TestPlan(units=tuple(units), labels=tuple(labels))


@lru_cache(maxsize=4096)
def _plan_bytes(tests: str, entry_point: str) -> bytes:
    plan = plan_tests(tests, entry_point)
    return marshal.dumps({"entry_point": entry_point, "units": plan.units})


# The harness: trusted code that runs in the sandbox as the main program. It must work under `python -I -S`
# with nothing but the stdlib, and it must take everything it relies on before the solution runs.
_HARNESS = r"""
def _harness(report):
    import builtins, marshal, os, sys
    _exec, _compile, _callable, _type, _dict, _str, _isinstance = exec, compile, callable, type, dict, str, isinstance
    _Base, _Assertion, _Memory, _OSError = BaseException, AssertionError, MemoryError, OSError
    _modules, _saved_builtins = sys.modules, _dict(builtins.__dict__)
    _bdict = builtins.__dict__

    def violation(exc):
        if _isinstance(exc, _Memory):
            return "memory"
        if _isinstance(exc, _OSError):
            return {11: "processes", 27: "file_size", 24: "open_files"}.get(exc.errno)
        return None

    def outcome(exc):
        kind = violation(exc)
        if kind:
            report("violation", kind)
        return _type(exc).__name__

    with open("plan.bin", "rb") as f:
        plan = marshal.loads(f.read())
    with open("solution.py", encoding="utf-8") as f:
        solution = _compile(f.read(), "solution.py", "exec")
    os.unlink("plan.bin")
    os.unlink("solution.py")
    units = [(_compile(src, "tests.py", "exec"), test, bind) for src, test, bind in plan["units"]]
    entry_point = plan["entry_point"]
    del plan
    saved_modules = _dict(_modules)
    ns = {"__name__": "solution", "__builtins__": builtins}
    try:
        _exec(solution, ns)
    except _Base as exc:
        report("solution_error", outcome(exc))
        return
    candidate = ns.get(entry_point)
    if not _callable(candidate):
        report("missing_entry_point")
        return
    # Modules the solution imported or replaced go back to what they were, so the tests import fresh ones.
    for name in [m for m in _modules if m not in saved_modules]:
        _modules.pop(name, None)
    _modules.update(saved_modules)
    tests_ns = _dict(ns)
    index = 0
    for code, test, bind in units:
        _bdict.clear()
        _bdict.update(_saved_builtins)
        tests_ns["__builtins__"] = builtins
        tests_ns["__name__"] = "tests"
        if bind:
            tests_ns[bind] = candidate
        try:
            _exec(code, tests_ns)
            result = "pass"
        except _Assertion:
            result = "fail AssertionError"
        except _Base as exc:
            result = "fail " + outcome(exc)
        if test:
            report("test", _str(index) + " " + result)
            index += 1
        elif result != "pass":
            report("setup_error", result[5:])
    report("done", _str(index))


_harness(globals().pop("__sandbox_report__"))
"""


@dataclass(frozen=True)
class _Outcome:
    passed: int
    results: dict[int, str]
    done: bool
    solution_error: str | None
    missing_entry_point: bool


def _read_events(events: tuple[str, ...]) -> _Outcome:
    results: dict[int, str] = {}
    solution_error = None
    done = missing = False
    for event in events:
        kind, _, payload = event.partition(" ")
        if kind == "test":
            index, _, result = payload.partition(" ")
            if index.isdigit():
                # The first report for a test wins: a forged repeat cannot turn a failure into a pass.
                results.setdefault(int(index), result)
        elif kind == "done":
            done = True
        elif kind == "solution_error" and solution_error is None:
            solution_error = payload or "error"
        elif kind == "missing_entry_point":
            missing = True
    passed = sum(1 for result in results.values() if result == "pass")
    return _Outcome(passed, results, done, solution_error, missing)


@register
class PythonTests(Verifier):
    """The completion's code passes the task's Python tests in the sandbox; score = fraction passed."""

    name = "python_tests"
    version = 1
    params_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["tests", "entry_point"],
        "properties": {
            "tests": {"type": "string", "minLength": 1},
            "entry_point": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
            "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_S},
        },
        "additionalProperties": False,
    }

    def params_problems(self, params: Mapping[str, Any], context: VerifyContext) -> list[str]:
        problems = super().params_problems(params, context)
        if problems:
            return problems
        try:
            plan_tests(params["tests"], params["entry_point"])
        except TestsError as exc:
            return [f"{exc} (/verifier/params/tests)"]
        return []

    def check(self, params: Mapping[str, Any], completion: Completion, context: VerifyContext) -> Verdict:
        code = extract_code(completion.text, PYTHON_FENCES)
        if not code.strip():
            return Verdict.fail("no_code")
        if len(code) > MAX_CODE_CHARS:
            return Verdict.fail("code_too_long", f"{len(code)} chars > {MAX_CODE_CHARS}")
        try:
            compile(code, "solution.py", "exec", dont_inherit=True)
        except SyntaxError as exc:
            return Verdict.fail("syntax_error", f"line {exc.lineno}")
        except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
            # Null bytes, absurd nesting: the compiler refuses before any line number exists.
            return Verdict.fail("syntax_error", type(exc).__name__)
        entry_point = params["entry_point"]
        try:
            plan = plan_tests(params["tests"], entry_point)
            plan_bytes = _plan_bytes(params["tests"], entry_point)
        except TestsError as exc:
            return Verdict.fail("invalid_params", str(exc))
        timeout_s = float(params.get("timeout_s", DEFAULT_TIMEOUT_S))
        result = run_python(
            _HARNESS,
            limits=SandboxLimits(wall_s=timeout_s, cpu_s=timeout_s),
            files={"solution.py": code, "plan.bin": plan_bytes},
        )
        outcome = _read_events(result.events)
        total = plan.total
        score = outcome.passed / total
        if result.violation in ("wall_time", "cpu_time"):
            kind = "wall" if result.violation == "wall_time" else "cpu"
            return Verdict.fail("timeout", f"{kind} limit {timeout_s:g}s, {outcome.passed}/{total} passed", score)
        if result.violation:
            return Verdict.fail("sandbox_violation", result.violation, score)
        if outcome.missing_entry_point:
            return Verdict.fail("missing_entry_point", entry_point)
        if outcome.solution_error:
            return Verdict.fail("solution_error", f"{outcome.solution_error} while defining the solution")
        if outcome.passed == total and outcome.done:
            return Verdict.ok()
        failed = total - outcome.passed
        first = next((i for i in range(total) if outcome.results.get(i) != "pass"), 0)
        why = outcome.results.get(first, "did not run").removeprefix("fail ")
        return Verdict.fail("tests_failed", f"{failed}/{total} (first: {plan.labels[first]} {why})", score)

    def wrong_answer(self, params: Mapping[str, Any]) -> str | None:
        entry_point = params["entry_point"]
        return f"```python\ndef {entry_point}(*args, **kwargs):\n    return None\n```"
