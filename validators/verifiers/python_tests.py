"""`python_tests`: the completion's Python passes the task's tests, run in the sandbox (`sandbox.process`).

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

Two processes (trusted code, `_HARNESS` below). The harness forks the solution's process before it reads the
tests, so that process never holds them; it then reads and deletes the plan and the solution files, sends the
solution over a pipe, and runs the tests itself, where each function the solution defines is a proxy: a call
sends its arguments (plain values, marshalled) to the solution's process and gets back the return value and
the arguments as they are after the call (in-place changes to a list, dict or set argument come back).
Everything that crosses is marshal data, so a value is a plain value by construction: an exact-type tree of
None, bool, int, float, str, bytes, list, tuple, dict, set and frozenset; anything else (an object whose
`__eq__` always holds, a generator, a `Counter`) fails as `non_plain_value`, never compared. Results travel on
the sandbox's control pipe with a per-run nonce, held only by the harness (the solution's process closes it,
and the harness is not dumpable, so `/proc/<pid>/fd` and `/mem` stay shut), so printing `PASS` lines,
exiting 0, patching builtins or walking frames cannot reach the tests or the results.

Attacks are also named, and fail with score 0 whatever the tests said:

* `early_exit`: the solution's process ends (`os._exit`, a signal, `os._exit` from a `__del__` or a thread)
  or raises `SystemExit`/`KeyboardInterrupt` (`sys.exit`), while defining or during a call (`atexit`
  handlers never run: the process is killed when the tests end);
* `tampering`: builtins changed (a rebound `AssertionError`, `isinstance`, `type`, names added through
  `__builtins__`) or the module's `__builtins__` replaced, seen after the definition and after every call;
  or a malformed reply on the pipe;
* `introspection`: `sys._getframe` reaching a harness frame, `gc.get_objects`/`get_referrers`/`get_referents`,
  `sys._current_frames`, `sys.settrace`/`setprofile`, new audit hooks, `ctypes` (an audit hook refuses them);
* `forbidden_access`: opening or listing a path outside the standard library, time zones and the working
  directory, which is also `tempfile`'s directory (the tasks on disk wherever they live, `/proc/<pid>/environ`,
  `/tmp`), and starting programs or sub-interpreters;
* `non_plain_value`: above.

The hook and the builtins check only name an attempt from inside the solution's process, which native code
could blind; the separation is what makes the attempt gain nothing. The tests see the solution's functions
only, not its other globals or imports, and a task's tests must call them with plain values.

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

from core import SeedwheelError
from sandbox.process import SandboxLimits, run_python
from validators.extract import extract_code
from validators.registry import Completion, HackProbe, Verdict, Verifier, VerifyContext, register

DEFAULT_TIMEOUT_S = 5.0
MAX_TIMEOUT_S = 60.0
# Longer "solutions" are almost always degenerate generations; refusing them keeps compile time bounded.
MAX_CODE_CHARS = 100_000
PYTHON_FENCES = frozenset({"python", "py", "python3", "py3"})


class TestsError(SeedwheelError, ValueError):
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


# The harness: trusted code that runs in the sandbox as the main program, stdlib only, under `python -I -S`. It
# forks the solution's process first (see the module docstring) and runs the tests itself.
_HARNESS = r'''
import _signal
import builtins
import marshal
import os
import resource
import sys

_ATOMS = (type(None), bool, int, float, str, bytes)
_CONTAINERS = (list, tuple, set, frozenset)
_FLAGS = ("early_exit", "tampering", "introspection", "forbidden_access")
# Replies of the solution's process, and the types of their fields (the first field is the kind).
_REPLIES = {
    "flag": (str, str),
    "defined": (list,),
    "error": (str, (str, type(None))),
    "return": (object, tuple),
    "raise": (str, list, str, (int, type(None))),
    "non_plain": (str,),
}
_MAX_MESSAGE = 64 << 20
# Where the solution may read files and list directories: the standard library (imports), time zones, its
# own working directory (also its temporary directory: TMPDIR points there), and a few devices. Not /tmp: the
# files there are the host's wherever the sandbox has no mount namespace, a checkout under /tmp among them.
_ALLOWED_PATHS = ("/usr/share/zoneinfo", "/usr/lib/zoneinfo", "/usr/share/lib/zoneinfo", "/etc/zoneinfo",
                  "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
_FILE_EVENTS = ("open", "os.listdir", "os.scandir")
_INTROSPECTION = ("sys._current_frames", "sys._current_exceptions", "sys.settrace", "sys.setprofile",
                  "sys.addaudithook", "gc.get_objects", "gc.get_referrers", "gc.get_referents")
_SPAWNING = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "pty.spawn",
             "cpython.PyInterpreterState_New")
_SPAWNING_MODULES = ("_posixsubprocess", "_xxsubinterpreters")
# Frames of this harness and of the sandbox bootstrap: `sys._getframe` reaching one is snooping.
_HARNESS_FILES = ("main.py", "<string>")


class _Stop(BaseException):
    """Ends the test that is running: the solution's process is gone or caught cheating."""


def _non_plain(value, _type=type, _any=any):
    """The type name of the first node of `value` that is not plain data, or None for a plain tree."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = _type(item)
        if _any(kind is atom for atom in _ATOMS):
            continue
        if _any(kind is container for container in _CONTAINERS):
            stack.extend(item)
        elif kind is dict:
            stack.extend(item.keys())
            stack.extend(item.values())
        else:
            return kind.__name__
    return None


def _violation(exc):
    if isinstance(exc, MemoryError):
        return "memory"
    if isinstance(exc, OSError):
        return {11: "processes", 27: "file_size", 24: "open_files"}.get(exc.errno)
    return None


def _frame(message, _dumps=marshal.dumps):
    data = _dumps(message)
    return len(data).to_bytes(4, "big") + data


def _write_all(fd, data, _write=os.write):
    while data:
        data = data[_write(fd, data):]


def _read_exact(fd, size, _read=os.read):
    data = b""
    while len(data) < size:
        chunk = _read(fd, min(size - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return data


def _receive(fd, _loads=marshal.loads):
    """The next message on `fd`, None at end of file; ValueError, EOFError or TypeError when malformed."""
    header = _read_exact(fd, 4)
    if header is None:
        return None
    size = int.from_bytes(header, "big")
    if size > _MAX_MESSAGE:
        raise ValueError("a message of %d bytes" % size)
    data = _read_exact(fd, size)
    return None if data is None else _loads(data)


def _serve(requests, replies):
    """The solution's process: define the solution, then call its functions for the harness, one at a time.

    Nothing it does is trusted: the harness checks every reply. The audit hook and the builtins check only
    name an attempt; what makes it pointless is that the tests, the results channel and the harness's memory
    are in another process.
    """
    _exit, _exec, _compile, _callable, _isinstance, _type = os._exit, exec, compile, callable, isinstance, type
    _len = len
    _Base, _Exception, _Memory, _PermissionError = BaseException, Exception, MemoryError, PermissionError
    _realpath, _fsdecode, _dict = os.path.realpath, os.fsdecode, dict
    try:
        low, high = sorted((requests, replies))
        # Only the two pipes stay open: the sandbox's result channel is closed in this process.
        os.closerange(3, low)
        os.closerange(low + 1, high)
        os.closerange(high + 1, 1 << 16)

        def send(message):
            _write_all(replies, _frame(message))

        memory_reply = _frame(("raise", "MemoryError", ["MemoryError"], "", None))
        allowed = tuple(_realpath(p) for p in (*sys.path, os.getcwd(), *_ALLOWED_PATHS) if p)
        os.environ["TMPDIR"] = os.getcwd()  # `tempfile` writes where the solution may

        def refuse(code, detail):
            send(("flag", code, detail))
            raise _PermissionError(1, detail + " is not allowed in the sandbox")

        def allowed_path(path):
            for root in allowed:
                if path == root or path.startswith(root + "/"):
                    return True
            return False

        def hook(event, args):
            if event == "sys._getframe":
                if args[0].f_code.co_filename in _HARNESS_FILES:
                    refuse("introspection", "sys._getframe into the harness")
            elif event in _INTROSPECTION or event.startswith("ctypes."):
                refuse("introspection", event)
            elif event in _SPAWNING or (event == "import" and args[0] in _SPAWNING_MODULES):
                refuse("forbidden_access", event + (" " + args[0] if event == "import" else ""))
            elif event in _FILE_EVENTS and args[0] is not None and not _isinstance(args[0], int):
                path = _realpath(_fsdecode(args[0]))
                if not allowed_path(path):
                    refuse("forbidden_access", event + " " + path)

        sys.addaudithook(hook)
        bdict = builtins.__dict__
        saved = _dict(bdict)
        ns = {"__name__": "solution", "__builtins__": builtins}

        def tampering():
            if ns.get("__builtins__") is not builtins:
                return "the solution's __builtins__ was replaced"
            if _len(bdict) != _len(saved):
                return "names were added to or removed from builtins"
            for name, value in saved.items():
                if bdict.get(name) is not value:
                    return "builtins." + name + " was replaced"
            return None

        message = _receive(requests)
        try:
            _exec(_compile(message[1], "solution.py", "exec"), ns)
        except _Base as exc:
            if _isinstance(exc, _Exception):
                send(("error", _type(exc).__name__, _violation(exc)))
            else:
                send(("flag", "early_exit", _type(exc).__name__))
            return
        changed = tampering()
        if changed:
            send(("flag", "tampering", changed))
            return
        functions = {name: value for name, value in ns.items() if _isinstance(name, str) and _callable(value)}
        send(("defined", list(functions)))
        while True:
            message = _receive(requests)
            if message is None:
                return
            name, args, kwargs = message[1:]
            try:
                value = functions[name](*args, **kwargs)
            except _Base as exc:
                if not _isinstance(exc, _Exception):
                    send(("flag", "early_exit", _type(exc).__name__ + " raised by " + name + "()"))
                    return
                if _isinstance(exc, _Memory):
                    _write_all(replies, memory_reply)
                else:
                    send(_raised(exc))
                continue
            changed = tampering()
            if changed:
                send(("flag", "tampering", changed))
                return
            bad = _non_plain(value)
            bad_argument = None if bad else _non_plain(args)
            if bad or bad_argument:
                what = name + "() returned " + bad if bad else "an argument of " + name + "() became " + bad_argument
                send(("non_plain", what))
            else:
                send(("return", value, args))
    finally:
        _exit(0)


def _raised(exc):
    kind = type(exc)
    bases = [c.__name__ for c in kind.__mro__ if c.__module__ == "builtins"]
    try:
        text = str(exc)[:300]
    except Exception:
        text = ""
    errno = exc.errno if isinstance(exc, OSError) and type(exc.errno) is int else None
    return ("raise", kind.__name__, bases, text, errno)


def _harness(report):
    _exec, _compile, _type, _str, _isinstance, _issubclass, _getattr, _zip = (
        exec, compile, type, str, isinstance, issubclass, getattr, zip)
    _Base, _Exception, _Assertion, _OSError = BaseException, Exception, AssertionError, OSError
    import ctypes

    # Not dumpable: the solution's process (same uid) cannot open this one's memory or descriptors in /proc.
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    # Forked before the tests are read, so the solution's process never holds them, and it waits for the
    # solution until both files are gone.
    pid = os.fork()
    if pid == 0:
        os.close(requests_w)
        os.close(replies_r)
        _serve(requests_r, replies_w)
    os.close(requests_r)
    os.close(replies_w)
    with open("plan.bin", "rb") as f:
        plan = marshal.loads(f.read())
    with open("solution.py", encoding="utf-8") as f:
        source = f.read()
    os.unlink("plan.bin")
    os.unlink("solution.py")
    units = [(_compile(src, "tests.py", "exec"), test, bind) for src, test, bind in plan["units"]]
    entry_point = plan["entry_point"]
    del plan
    cpu_limit = resource.getrlimit(resource.RLIMIT_CPU)[0]
    halt = []  # the event that ends the run early: ("hack", "<code> <where> <detail>") or ("violation", kind)
    where = ["definition"]
    alive = [True]

    def outcome(exc):
        kind = _violation(exc)
        if kind:
            report("violation", kind)
        return _type(exc).__name__

    def stop(code, detail):
        if not halt:
            halt.append(("hack", code + " " + where[0] + " " + detail))
        raise _Stop

    def gone():
        # The solution's process ended while the harness waited on it: a CPU limit, or an early exit.
        if not alive[0]:
            raise _Stop
        alive[0] = False
        os.kill(pid, _signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
        signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        spent = usage.ru_utime + usage.ru_stime >= cpu_limit - 0.05
        if signum == _signal.SIGXCPU or (signum == _signal.SIGKILL and spent):
            if not halt:
                halt.append(("violation", "cpu_time"))
            raise _Stop
        how = "signal %d" % signum if signum else "exit status %d" % os.WEXITSTATUS(status)
        stop("early_exit", "the solution's process ended with " + how)

    def receive(*kinds):
        try:
            message = _receive(replies_r)
        except (ValueError, EOFError, TypeError):
            stop("tampering", "a malformed reply from the solution's process")
        if message is None:
            gone()
        fields = _REPLIES.get(message[0]) if _type(message) is tuple and message else None
        if fields is None or len(message) != len(fields) + 1 or not all(
            _isinstance(value, kind) for value, kind in _zip(message[1:], fields)
        ):
            stop("tampering", "an unexpected reply from the solution's process")
        if message[0] == "flag":
            stop(message[1] if message[1] in _FLAGS else "tampering", message[2][:300])
        if message[0] not in kinds:
            stop("tampering", "an unexpected " + message[0] + " reply from the solution's process")
        return message

    def send(message):
        try:
            _write_all(requests_w, message)
        except _OSError:
            gone()

    def rebuilt(name, bases, text, errno):
        # The solution's exception, as the nearest builtin exception class, under the solution's class name.
        found = (_getattr(builtins, n, None) if _type(n) is _str else None for n in bases)
        base = next((b for b in found if _isinstance(b, type) and _issubclass(b, _Exception)), _Exception)
        kind = base if base.__name__ == name else type(name, (base,), {})
        try:
            return kind(errno, text) if errno is not None and _issubclass(base, _OSError) else kind(text)
        except _Exception:
            return type(name, (_Exception,), {})(text)

    def proxy(name):
        def call(*args, **kwargs):
            if halt:
                raise _Stop
            try:
                request = _frame(("call", name, args, kwargs))
            except ValueError:
                raise TypeError(name + "() is called with plain values only (None, bool, int, float, str, bytes, "
                                "list, tuple, dict, set)") from None
            send(request)
            reply = receive("return", "raise", "non_plain")
            if reply[0] == "raise":
                raise rebuilt(*reply[1:])
            if reply[0] == "non_plain":
                stop("non_plain_value", reply[1])
            value, after = reply[1], reply[2]
            bad = _non_plain(value) or _non_plain(after)
            if bad:
                stop("non_plain_value", name + "() returned " + bad)
            # In-place changes to list, dict and set arguments come back to the caller's objects.
            for given, changed in _zip(args, after):
                if _type(given) is list and _type(changed) is list:
                    given[:] = changed
                elif _type(given) in (dict, set) and _type(given) is _type(changed):
                    given.clear()
                    given.update(changed)
            return value

        call.__name__ = call.__qualname__ = name
        return call

    tests_ns = {"__builtins__": builtins, "__name__": "tests"}
    try:
        send(_frame(("define", source)))
        reply = receive("defined", "error")
        if reply[0] == "error":
            if reply[2]:
                report("violation", reply[2])
            report("solution_error", reply[1])
            return
        names = reply[1]
        if not all(_type(name) is _str for name in names):
            stop("tampering", "an unexpected reply from the solution's process")
        if entry_point not in names:
            report("missing_entry_point")
            return
        for name in names:
            tests_ns[name] = proxy(name)
    except _Stop:
        report(*halt[0])
        return
    index = 0
    for code, test, bind in units:
        where[0] = _str(index) if test else "setup"
        if bind:
            tests_ns[bind] = tests_ns[entry_point]
        try:
            _exec(code, tests_ns)
            result = "pass"
        except _Stop:
            break
        except _Assertion:
            result = "fail AssertionError"
        except _Base as exc:
            result = "fail " + outcome(exc)
        if halt:
            break
        if test:
            report("test", _str(index) + " " + result)
            index += 1
        elif result != "pass":
            report("setup_error", result[5:])
    if halt:
        report(*halt[0])
    else:
        report("done", _str(index))
    if alive[0]:
        # Reaped here, so the sandbox's reaper finds nothing left of the run.
        os.kill(pid, _signal.SIGKILL)
        os.waitpid(pid, 0)


_harness(globals().pop("__sandbox_report__"))
'''


@dataclass(frozen=True)
class _Outcome:
    passed: int
    results: dict[int, str]
    done: bool
    solution_error: str | None
    missing_entry_point: bool
    hack: tuple[str, str, str] | None  # (code, where: "definition", "setup" or a test index, detail)


def _read_events(events: tuple[str, ...]) -> _Outcome:
    results: dict[int, str] = {}
    solution_error = None
    hack = None
    done = missing = False
    for event in events:
        kind, _, payload = event.partition(" ")
        if kind == "hack" and hack is None:
            code, _, rest = payload.partition(" ")
            where, _, detail = rest.partition(" ")
            hack = (code, where, detail)
        elif kind == "test":
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
    return _Outcome(passed, results, done, solution_error, missing, hack)


@register
class PythonTests(Verifier):
    """The completion's code passes the task's Python tests in the sandbox; score = fraction passed."""

    name = "python_tests"
    version = 2
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
        if outcome.hack is not None:
            # A reward hack earns nothing, not even the tests that passed before it.
            code, where, detail = outcome.hack
            if where.isdigit() and int(where) < total:
                where = plan.labels[int(where)]
            return Verdict.fail(
                code, f"{detail}, {'while defining the solution' if where == 'definition' else 'in ' + where}"
            )
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

    def hack_probes(self, params: Mapping[str, Any], reference: str | None, context: VerifyContext) -> list[HackProbe]:
        """An always-equal object of the reference's return type, an exit before the tests, and results forged
        through the harness's frame; none solves the task.

        Example:
            >>> params = {"tests": "assert f(1) == 2", "entry_point": "f"}
            >>> [p.name for p in PythonTests().hack_probes(params, None, VerifyContext())]
            ['always_equal', 'exit_before_tests', 'forged_report']
        """
        entry_point = params["entry_point"]
        base = return_type(reference or "", entry_point)
        total = plan_tests(params["tests"], entry_point).total
        stub = f"def {entry_point}(*args, **kwargs):\n    return None\n"
        always_equal = (
            f"class _AlwaysEqual({base}):\n    def __eq__(self, other):\n        return True\n\n"
            f"    def __ne__(self, other):\n        return False\n\n    __hash__ = {base}.__hash__\n\n\n"
            f"def {entry_point}(*args, **kwargs):\n    return _AlwaysEqual()\n"
        )
        forged_report = (
            "import sys\n\nframe = sys._getframe(1)\nwhile frame is not None:\n"
            '    report = frame.f_locals.get("report")\n    if callable(report):\n'
            f'        for index in range({total}):\n            report("test", f"{{index}} pass")\n'
            f'        report("done", "{total}")\n    frame = frame.f_back\n\n\n{stub}'
        )
        return [
            HackProbe("always_equal", _fenced(always_equal)),
            HackProbe("exit_before_tests", _fenced(f"import sys\n\nsys.exit(0)\n\n\n{stub}")),
            HackProbe("forged_report", _fenced(forged_report)),
        ]


# Return annotations the always-equal probe can subclass, by name (`bool` cannot be subclassed: its int base).
_SUBCLASSABLE = {"str": "str", "int": "int", "bool": "int", "float": "float", "bytes": "bytes", "list": "list",
                 "List": "list", "tuple": "tuple", "Tuple": "tuple", "dict": "dict", "Dict": "dict", "set": "set",
                 "Set": "set", "frozenset": "frozenset", "FrozenSet": "frozenset"}  # fmt: skip


def return_type(reference: str, entry_point: str) -> str:
    """The builtin type the reference's entry point is annotated to return (`object` when unknown).

    Args:
        reference: the task's reference completion (code, fenced or not).
        entry_point: the function's name.

    Returns:
        A builtin type name a class can derive from: `str`, `int`, `list`, ... or `object`.

    Example:
        >>> return_type("```python\\ndef f(x) -> list[int]:\\n    return [x]\\n```", "f")
        'list'
    """
    try:
        tree = ast.parse(extract_code(reference, PYTHON_FENCES))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "object"
    function = next(
        (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == entry_point),
        None,
    )
    annotation = function.returns if function is not None else None
    while isinstance(annotation, ast.Subscript | ast.BinOp):  # list[int] -> list; str | None -> str
        annotation = annotation.value if isinstance(annotation, ast.Subscript) else annotation.left
    name = annotation.id if isinstance(annotation, ast.Name) else None
    return _SUBCLASSABLE.get(name or "", "object")


def _fenced(code: str) -> str:
    return f"```python\n{code}```"
