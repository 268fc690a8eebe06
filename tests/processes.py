"""Processes a run left behind: a model server works under the storage root (its logs are its working folder), a
training job names the root on its command line."""

import os
import time
from pathlib import Path


def leftover_processes(root: Path, grace_s: float = 30) -> list[str]:
    """Command lines of live processes working under `root` or naming it, once `grace_s` has passed without any
    left (the stop of a server group takes a moment)."""
    root = root.resolve()
    deadline = time.monotonic() + grace_s
    while True:
        found = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                args = (proc / "cmdline").read_bytes()
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
                cwd = Path(os.readlink(proc / "cwd"))
            except OSError:  # the process ended while we looked
                continue
            if state not in ("Z", "X") and (str(root).encode() in args or cwd.is_relative_to(root)):
                found.append(args.replace(b"\0", b" ").decode(errors="replace")[:200])
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)
