"""Run a command that must not outlive the process that launched it: `python -m langmodels.tether PID -- CMD...`.

A model server started by a run is a child in its own session (so it can be stopped as a group). When the run
ends normally it stops the server; when the run is killed (`kill -9`, OOM killer, a lost node), nothing would,
and the orphaned server would hold its memory and port until someone noticed. The tether sits between the two:
it starts `CMD` in its process group, polls whether `PID` is still its parent, and takes the group down
(SIGTERM, then SIGKILL) as soon as it is not. Polling the parent id works whichever thread started the tether,
unlike `PR_SET_PDEATHSIG`, which fires when the *thread* that forked exits (the LLM client starts servers from
a short-lived worker thread when an event loop is already running).

Exit code: the command's; when the launcher is gone the tether's group, the tether included, ends by SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from core.signals import stoppable

POLL_S = 0.5
GRACE_S = 10.0


def command_for(command: Sequence[str], parent: int | None = None) -> list[str]:
    """`command` wrapped so it ends when `parent` (default: this process) ends.

    Example:
        >>> command_for(["sleep", "60"], parent=123)[1:]
        ['-m', 'langmodels.tether', '123', '--', 'sleep', '60']
    """
    return [sys.executable, "-m", "langmodels.tether", str(os.getpid() if parent is None else parent), "--", *command]


def _stop_group(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM to our whole process group (the command and anything it started), SIGKILL after a grace period."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group signal reaches the tether too
    os.killpg(0, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(GRACE_S)
    os.killpg(0, signal.SIGKILL)  # whatever is left, the tether included: nothing of the group survives


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[1] != "--" or not args[0].isdigit():
        sys.stderr.write("usage: python -m langmodels.tether PARENT_PID -- COMMAND [ARGS...]\n")
        return 2
    parent, command = int(args[0]), args[2:]
    if os.getpgid(0) != os.getpid():
        os.setpgid(0, 0)  # lead our own group, so stopping it never reaches the launcher's group
    stoppable()  # a launcher that ignores SIGTERM (or SIGINT) must not pass that on to the command
    child = subprocess.Popen(command)  # in our process group: stopping the group stops both
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    while child.poll() is None:
        if os.getppid() != parent:  # re-parented: the launcher is gone
            sys.stderr.write(f"tether: launcher {parent} is gone; stopping {command[0]} (pid {child.pid})\n")
            _stop_group(child)
        time.sleep(POLL_S)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
