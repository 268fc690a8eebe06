"""A pytest plugin that keeps the test tiers true (loaded by tests/conftest.py).

- **The fast tier stays fast.** `make test-fast` runs `-m "not slow"`. A test that is not marked `slow` and whose
  call takes longer than the `fast_tier_limit_s` ini option (pyproject.toml), stretched by the load per core when
  the machine is busier than its cores (`load_stretch`), fails, naming the fix. Tests that
  use a fixture in `SLOW_FIXTURES` (a real server, a browser, the real model) are marked `slow` at collection.
- **The slow tests run one at a time**, on one pytest-xdist worker (`SLOW_GROUP`), beside the fast ones.
- **A test leaves the signals that stop processes as it found them.** A test that ends with SIGTERM or SIGINT
  handled differently, or blocked, fails at teardown (and they are put back): an *ignored* SIGTERM is inherited by
  every process a later test starts in the same worker, so spawn pools hang in `terminate()` and servers outlive
  their stop (`core.signals`).
- **A test that times out says what it waited for**: the processes it left running, and which ignore SIGTERM.
- **CI skips nothing silently.** With `CI` or `SEEDWHEEL_REQUIRE_SERVICES=1` set, a skip is a failure unless it
  went through `skip_for_accelerator` (a GPU, or vLLM, is there or not): a missing service, data file, sandbox
  layer or package must be installed, not stepped over. That holds for a test's skip and a whole module's
  (`pytest.importorskip` or `pytest.skip(..., allow_module_level=True)` at import, a collection report).
"""

import os
import signal
import threading
from pathlib import Path
from typing import NoReturn

import pytest

from core.signals import STOP_SIGNALS

# Fixtures that start something a unit test should not: the real model, a loopback server, a database, a browser.
SLOW_FIXTURES = frozenset(
    {"real_model_dir", "real_engine", "real_server", "webserver", "browser", "postgres_url", "s3_endpoint"}
)
# Under `pytest -n N --dist loadgroup` (`make test`) the slow tests share one worker, one after another: each keeps
# both cores busy (model servers, training, whole runs), and two at once only slow each other down (measured: the
# slow tier took 587 s on two workers against 645 s on one). The fast tests fill the other workers meanwhile.
SLOW_GROUP = "slow"
# The only skips CI accepts start so (`skip_for_accelerator`): a GPU here or not, vLLM (the GPU extra) or not.
ACCELERATOR_SKIP = "accelerator: "
# The item attribute that holds the signal state a test started with.
_SIGNALS_BEFORE = "_seedwheel_signals_before"
# The item attribute that holds the processes that ran under a test when it timed out.
_AT_TIMEOUT = "_seedwheel_processes_at_timeout"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("fast_tier_limit_s", "longest call a test not marked slow may take, in seconds", default="10")


def strict_skips() -> str | None:
    """The variable that makes skips fail (`CI` or `SEEDWHEEL_REQUIRE_SERVICES=1`), or None."""
    if os.environ.get("SEEDWHEEL_REQUIRE_SERVICES") == "1":
        return "SEEDWHEEL_REQUIRE_SERVICES=1"
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        return "CI"
    return None


def skip_for_accelerator(reason: str) -> NoReturn:
    """Skip a test that this machine's accelerator (a GPU or not, vLLM or not) makes moot: the one skip CI accepts."""
    pytest.skip(ACCELERATOR_SKIP + reason, allow_module_level=True)  # in a test, or a whole module at import


def ci_skip_failure(longrepr: object) -> str | None:
    """Why a skip (its report's `longrepr`) fails under CI, or None: off CI, or a `skip_for_accelerator` skip."""
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    reason = reason.removeprefix("Skipped: ")
    strict = strict_skips()
    if strict is None or reason.startswith(ACCELERATOR_SKIP):
        return None
    return (
        f"skipped under {strict}: {reason}\n"
        "CI runs every test but the GPU and vLLM ones: install what the reason names (`make test` does it "
        "on a fresh machine), or fix the test."
    )


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.xdist_group(SLOW_GROUP))


def load_stretch() -> float:
    """How much slower than on a quiet machine a test runs now: the last minute's load per core, at least 1.

    The fast tier's limit is a quiet machine's; a test that takes 4 s there takes about 8 s at a load of 4 on 2
    cores (the workers beside a build or a second suite), and fails no tier for it.
    """
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def descendants_report(root: int | None = None) -> str:
    """A line per live process under `root` (this one): pid, state, whether it ignores SIGTERM, and its command.

    What a hung test waited for: a pool worker that ignores SIGTERM, a server that never stopped, a child stuck in
    a read.
    """
    children: dict[int, list[int]] = {}
    info: dict[int, str] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
            command = (status.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        pid, ppid = int(fields["Pid"]), int(fields["PPid"])
        children.setdefault(ppid, []).append(pid)
        ignores = int(fields["SigIgn"], 16) >> (signal.SIGTERM - 1) & 1
        state = fields["State"].strip()
        info[pid] = f"{pid} {state}{', ignores SIGTERM' if ignores else ''}: {command.strip()[:300]}"
    lines, todo = [], list(children.get(os.getpid() if root is None else root, []))
    while todo:
        pid = todo.pop(0)
        lines.append(info[pid])
        todo.extend(children.get(pid, []))
    return "\n".join(lines) or "none"


@pytest.hookimpl(hookwrapper=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: object):
    """Around pytest-timeout's alarm: at the timeout, list the processes first, before any cleanup kills them."""
    yield
    fail = signal.getsignal(signal.SIGALRM)
    if threading.current_thread() is not threading.main_thread() or not callable(fail):
        return  # the thread method: it dumps the stacks and ends the process itself

    def list_then_fail(signum: int, frame: object) -> None:
        setattr(item, _AT_TIMEOUT, descendants_report())
        fail(signum, frame)

    signal.signal(signal.SIGALRM, list_then_fail)


def signal_state() -> tuple[object, ...]:
    """The stop signals' handlers in this process and the calling thread's blocked signals."""
    return (*(signal.getsignal(sig) for sig in STOP_SIGNALS), frozenset(signal.pthread_sigmask(signal.SIG_BLOCK, [])))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    setattr(item, _SIGNALS_BEFORE, signal_state())


def _signals_changed(item: pytest.Item) -> str | None:
    """What the test changed in the stop signals (put back here), or None."""
    before = getattr(item, _SIGNALS_BEFORE, None)
    after = signal_state()
    if before is None or after == before:
        return None
    *handlers, blocked = before
    for sig, handler in zip(STOP_SIGNALS, handlers, strict=True):
        if handler is not None:
            signal.signal(sig, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    names = ("SIGTERM handler", "SIGINT handler", "blocked signals")
    changes = zip(names, before, after, strict=True)
    return ", ".join(f"{name} {old!r} -> {new!r}" for name, old, new in changes if old != new)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.when == "call" and hasattr(item, _AT_TIMEOUT):
        report.sections.append(("processes running under this test at its timeout", getattr(item, _AT_TIMEOUT)))
    if report.when == "teardown":
        changed = _signals_changed(item)
        if changed and report.passed:
            report.outcome = "failed"
            report.longrepr = (
                f"the test left the stop signals changed: {changed}. Every process later tests start in this worker "
                "inherits an ignored SIGTERM; wrap what changes them in core.signals.dispositions_kept()."
            )
    if report.skipped and not hasattr(report, "wasxfail"):
        failure = ci_skip_failure(report.longrepr)
        if failure:
            report.outcome = "failed"
            report.longrepr = failure
    elif report.when == "call" and report.passed and item.get_closest_marker("slow") is None:
        limit = float(item.config.getini("fast_tier_limit_s"))
        stretch = load_stretch()
        if report.duration > limit * stretch:
            report.outcome = "failed"
            load = f", stretched x{stretch:.1f} for the load" if stretch > 1 else ""
            report.longrepr = (
                f"took {report.duration:.1f} s, over the fast tier's {limit:g} s (fast_tier_limit_s{load}): mark it "
                "@pytest.mark.slow, so it leaves `make test-fast` and stays in `make test`, or make it faster."
            )


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """A module skipped at import (`importorskip`, `skip(allow_module_level=True)`) is a collection report, not a
    test's: under CI it fails the collection like a test's skip fails the test."""
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()
    if report.skipped:
        failure = ci_skip_failure(report.longrepr)
        if failure:
            report.outcome = "failed"
            report.longrepr = failure
