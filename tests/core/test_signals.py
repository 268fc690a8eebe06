"""Stop signals that keep working: what a handler change does to the processes started after it, for real."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.signals import dispositions_kept, stoppable


def ignores_sigterm(pid: int) -> bool:
    """Whether process `pid` ignores SIGTERM, from its `SigIgn` mask in /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    raise AssertionError(f"no SigIgn line for {pid}")


def started_child() -> subprocess.Popen[bytes]:
    """A child that has exec'd its program (so its dispositions are final) and waits to be stopped."""
    command = [sys.executable, "-c", "import time; print(flush=True); time.sleep(60)"]
    child = subprocess.Popen(command, stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline() == b"\n"
    return child


def stop(child: subprocess.Popen[bytes], wait_s: float = 10) -> int | None:
    """SIGTERM, then the exit code within `wait_s`, or None (and SIGKILL) when it outlived it."""
    child.terminate()
    try:
        return child.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        return None


def test_an_ignored_sigterm_is_inherited_by_every_later_child_and_outlives_the_stop():
    # Why it matters: the cause of the spawn pools that hung in terminate() and of the servers that outlived stop().
    with dispositions_kept():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = started_child()
    assert ignores_sigterm(child.pid)
    assert stop(child, wait_s=2) is None


def test_handlers_changed_in_the_body_are_put_back():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with dispositions_kept():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    child = started_child()
    assert not ignores_sigterm(child.pid)
    assert stop(child) == -signal.SIGTERM


@pytest.mark.parametrize("ignored", [(), (signal.SIGTERM,), (signal.SIGINT,), (signal.SIGTERM, signal.SIGINT)])
def test_stoppable_resets_only_what_is_ignored(ignored):
    with dispositions_kept():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.default_int_handler)
        assert stoppable() == [sig.name for sig in (signal.SIGTERM, signal.SIGINT) if sig in ignored]
        for sig in (signal.SIGTERM, signal.SIGINT):
            assert signal.getsignal(sig) is (signal.SIG_DFL if sig in ignored else signal.default_int_handler)


def test_a_launcher_that_ignores_sigterm_still_starts_a_stoppable_server():
    # A background shell job ignores SIGINT; Dagster then makes SIGTERM ignored too. `stoppable()` in the launcher
    # (the tether, `seedwheel ui`) before it starts the server gives the server its defaults back.
    launcher = (
        "import signal, subprocess, sys\n"
        "from core.signals import stoppable\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "stoppable()\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; print(flush=True); time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "child.wait()\n"
    )
    process = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        # The launcher's line (the server's pid) and the server's own empty one (it has started), in either order.
        lines = sorted([process.stdout.readline(), process.stdout.readline()])
        assert lines[0] == b"\n"
        pid = int(lines[1])
        assert not ignores_sigterm(pid)
        started = time.monotonic()
        subprocess.run(["kill", "-TERM", str(pid)], check=True)
        assert process.wait(timeout=10) == 0  # the launcher's wait() returned: the server is gone
        assert time.monotonic() - started < 10
    finally:
        process.kill()
        process.wait()
