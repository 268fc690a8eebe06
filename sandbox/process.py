"""Run untrusted Python (model output) in a throw-away, resource-limited subprocess.

Every call gets a fresh temporary working directory (deleted afterwards), a fresh session / process group, an
empty environment and an isolated interpreter (`python -I -S -B`: no site-packages, no user paths, no
`PYTHON*` variables, no bytecode writes). A small bootstrap runs first inside the child and puts the layers
below in place before any untrusted byte executes; which layers were active is reported in
`SandboxResult.layers` (see `isolation_report()` for the machine as a whole).

Layers, when the parent runs as root (the usual container case):

* `uid`: the child drops to a fresh unprivileged uid/gid (one per run, from a high range that no account
  uses; no supplementary groups). This is what makes `RLIMIT_NPROC` bite (the kernel never enforces it for
  uid 0), keeps the child from signalling the parent or other runs, and from writing root-owned files.
* `netns`: a new, empty network namespace (`unshare(CLONE_NEWNET)`): no interfaces are up, so even
  127.0.0.1 is unreachable.
* `mountns`: a private mount namespace in which the whole filesystem is re-mounted read-only and `nosuid`
  (`mount_setattr(AT_RECURSIVE)`), `/tmp`, `/var/tmp` and `/dev/shm` are fresh size-capped tmpfs that die
  with the run, and only the working directory is bind-mounted writable. If the interpreter lives under a
  directory others cannot enter (pyenv in `/root`), that directory is covered by an empty tmpfs with just the
  interpreter's prefix bind-mounted read-only into it, which also hides the rest of `/root`.
* `reaper`: after the run every process still owned by the run's uid is SIGKILLed, so a child that left
  the process group with `setsid()` dies too.

Layers in every mode:

* `rlimits`: CPU seconds (`RLIMIT_CPU`), address space (`RLIMIT_AS`), file size (`RLIMIT_FSIZE`),
  processes (`RLIMIT_NPROC`), open files (`RLIMIT_NOFILE`), no core dumps; `no_new_privs` is set.
* `audit`: a `sys.addaudithook` hook refuses non-Unix sockets and DNS lookups. It is defence in depth only:
  native code (`ctypes`) can go around it.
* The parent enforces wall time and an output cap (it reads at most `output_bytes` and then kills the
  group), and kills the whole process group when the child exits or times out.

Without root the bootstrap tries an unprivileged user namespace for `netns`/`mountns` instead; there is no
`uid` or `reaper` layer then, so the child runs as the caller's uid: it can signal the caller's processes, and
`RLIMIT_NPROC` counts all of the caller's processes (it is set to the limit plus the caller's current count).

Not isolated, whatever the mode: reading world-readable files (the project source, `/etc`), CPU and memory
bandwidth shared with the host (no cgroup), and anything a kernel exploit can reach.

Example:
    >>> result = run_python("print(6 * 7)")
    >>> result.stdout, result.exit_code, result.violation
    ('42\\n', 0, None)
"""

from __future__ import annotations

import contextlib
import marshal
import math
import os
import secrets
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from core import SeedwheelError

MIB = 1024 * 1024

# Unprivileged uids handed to runs: far above any real account (useradd stops at 60000, subuid ranges
# usually sit at 100000-165535), so files and processes of a run are unmistakably its own.
_UID_BASE = 1_700_000_000
_UID_SPAN = 1 << 24

# Grace period for pipes to reach EOF once the process group is dead; a process that escaped every kill
# (possible only without the reaper) must not hang the parent.
_DRAIN_GRACE_S = 0.2
_CONTROL_CAP = 1 * MIB


class SandboxConfigError(SeedwheelError, ValueError):
    """Sandbox limits that cannot work (non-positive, or too small for the interpreter to start)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits for one sandboxed run; every field can be set per call.

    Args:
        wall_s: wall-clock seconds before the process group is killed (`violation="wall_time"`).
        cpu_s: CPU seconds (`RLIMIT_CPU`, rounded up to whole seconds; `violation="cpu_time"`).
        memory_bytes: address-space limit (`RLIMIT_AS`; `violation="memory"`).
        output_bytes: stdout + stderr bytes kept; more kills the run (`violation="output"`).
        file_bytes: largest file the child may write, and the size of each private tmpfs (`RLIMIT_FSIZE`).
        processes: processes + threads the run's uid may hold (`RLIMIT_NPROC`; `violation="processes"`).
        open_files: file descriptors per process (`RLIMIT_NOFILE`).

    Example:
        >>> SandboxLimits(wall_s=2.0).cpu_s
        5.0
    """

    wall_s: float = 5.0
    cpu_s: float = 5.0
    memory_bytes: int = 512 * MIB
    output_bytes: int = 1 * MIB
    file_bytes: int = 16 * MIB
    processes: int = 64
    open_files: int = 256

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s", "memory_bytes", "output_bytes", "file_bytes", "processes", "open_files"):
            value = getattr(self, name)
            if not value > 0:
                raise SandboxConfigError(f"SandboxLimits.{name} must be > 0, got {value!r}")
        # The interpreter alone maps ~30 MiB; below 64 MiB every run would die before the first line of code.
        if self.memory_bytes < 64 * MIB:
            raise SandboxConfigError(
                f"SandboxLimits.memory_bytes={self.memory_bytes} is below 64 MiB ({64 * MIB}); "
                "the interpreter cannot start under it - raise it"
            )
        if self.open_files < 16:
            raise SandboxConfigError(f"SandboxLimits.open_files={self.open_files} must be >= 16 for the interpreter")


@dataclass(frozen=True)
class SandboxResult:
    """What a sandboxed run did.

    `exit_code` is the child's exit status, or minus the signal number when a signal ended it (as in
    `subprocess`). `violation` names the limit that ended the run: `wall_time`, `cpu_time`, `memory`, `output`,
    `processes`, `file_size`, `open_files`, or None. `events` are the lines the program sent on the control
    channel (see `run_python`), nonce already checked and stripped.
    """

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    killed_by_signal: int | None
    output_truncated: bool
    wall_s: float
    cpu_s: float
    violation: str | None
    events: tuple[str, ...] = ()
    layers: frozenset[str] = field(default_factory=frozenset)

    @property
    def ok(self) -> bool:
        """True when the program exited 0 without hitting a limit."""
        return self.exit_code == 0 and self.violation is None


# The child's first code. It runs privileged (when the parent is root) only until it has built the
# namespaces, set the limits and dropped to the run's uid; then it executes the program. It is stdlib-only
# and self-contained because it runs under `python -I -S` before any untrusted code.
_BOOTSTRAP = r"""
import os, sys
def _boot():
    import marshal
    ctl, cfg_fd = int(sys.argv[1]), int(sys.argv[2])
    chunks = []
    while True:
        chunk = os.read(cfg_fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(cfg_fd)
    cfg = marshal.loads(b"".join(chunks))
    nonce, write = cfg["nonce"].encode(), os.write
    def report(kind, payload=""):
        try:
            write(ctl, nonce + b" " + (kind + " " + payload).strip().encode("utf-8", "replace") + b"\n")
        except (OSError, MemoryError):
            pass
    layers = []
    work = cfg["workdir"]
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
    except Exception:
        libc = None
    def c(ret):
        if ret != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    root = os.geteuid() == 0
    if libc is not None:
        flags = 0x00020000 | 0x40000000  # CLONE_NEWNS | CLONE_NEWNET
        if not root:
            flags |= 0x10000000  # CLONE_NEWUSER: an unprivileged user may build namespaces inside its own
        try:
            c(libc.unshare(flags))
            layers += ["netns"]
            _mounts(libc, c, cfg, layers)
        except OSError as exc:
            report("warning", "namespaces unavailable: " + str(exc))
        try:
            c(libc.prctl(38, 1, 0, 0, 0))  # PR_SET_NO_NEW_PRIVS
        except OSError:
            pass
    import resource
    for name, soft, hard in cfg["rlimits"]:
        try:
            resource.setrlimit(getattr(resource, name), (soft, hard))
        except (ValueError, OSError) as exc:
            report("warning", name + ": " + str(exc))
    layers.append("rlimits")
    uid = cfg["uid"]
    if root and uid is not None:
        if cfg["prefix_hidden"] and "mountns" not in layers:
            report("warning", "interpreter unreachable for an unprivileged uid without a mount namespace")
        else:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            layers.append("uid")
    os.chdir(work)
    def _no_network(event, args):
        if event in ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"):
            if not isinstance(args[1], (str, bytes)):
                raise PermissionError(1, "network access is disabled in the sandbox")
        elif event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr"):
            raise PermissionError(1, "network access is disabled in the sandbox")
    sys.addaudithook(_no_network)
    layers.append("audit")
    report("layers", ",".join(layers))
    main = cfg["main"]
    with open(main, encoding="utf-8") as f:
        source = f.read()
    sys.argv = [main]
    g = {"__name__": "__main__", "__file__": main, "__builtins__": __builtins__, "__sandbox_report__": report}
    try:
        code = compile(source, main, "exec")
        del source, cfg, chunks
        exec(code, g)
    except SystemExit:
        raise
    except BaseException as exc:
        kind = _classify(exc)
        if kind:
            report("violation", kind)
        raise

def _classify(exc):
    if isinstance(exc, MemoryError):
        return "memory"
    if isinstance(exc, OSError):
        return {11: "processes", 27: "file_size", 24: "open_files"}.get(exc.errno)
    return None

def _mounts(libc, c, cfg, layers):
    import ctypes, stat
    MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE, MS_RDONLY = 2, 4, 32, 4096, 16384, 262144, 1
    def mount(src, dst, fstype, flags, data=None):
        enc = lambda s: None if s is None else s.encode()
        c(libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)))
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    work = cfg["workdir"]
    work_fd = os.open(work, os.O_PATH | os.O_DIRECTORY)
    prefix, hide = cfg["prefix"], cfg["prefix_hidden"]
    prefix_fd = os.open(prefix, os.O_PATH | os.O_DIRECTORY) if hide else None
    class MountAttr(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in ("attr_set", "attr_clr", "propagation", "userns_fd")]
    attr = MountAttr(0x1 | 0x2, 0, 0, 0)  # MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID
    # mount_setattr is syscall 442 on every architecture that has it (x86_64, aarch64, riscv64).
    c(libc.syscall(442, -100, b"/", 0x8000, ctypes.byref(attr), ctypes.sizeof(attr)))
    size = "size=%d,nr_inodes=4096" % cfg["tmpfs_bytes"]
    for path in ("/tmp", "/var/tmp", "/dev/shm"):
        if os.path.isdir(path):
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, size + ",mode=1777")
    if hide:
        mount("tmpfs", hide, "tmpfs", MS_NOSUID | MS_NODEV, "size=65536,mode=0755")
        os.makedirs(prefix, exist_ok=True)
        mount("/proc/self/fd/%d" % prefix_fd, prefix, None, MS_BIND | MS_REC)
        mount(None, prefix, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)
        os.close(prefix_fd)
    os.makedirs(work, exist_ok=True)
    mount("/proc/self/fd/%d" % work_fd, work, None, MS_BIND)
    mount(None, work, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)
    os.close(work_fd)
    layers.append("mountns")

_boot()
"""

_uid_lock = threading.Lock()
_uids_in_use: set[int] = set()


def _claim_uid() -> int:
    with _uid_lock:
        while True:
            uid = _UID_BASE + secrets.randbelow(_UID_SPAN)
            if uid not in _uids_in_use:
                _uids_in_use.add(uid)
                return uid


def _release_uid(uid: int) -> None:
    with _uid_lock:
        _uids_in_use.discard(uid)


@cache
def _hidden_prefix_root() -> str | None:
    """The shallowest directory on the way to the interpreter's prefix that others may not enter, if any."""
    prefix = Path(sys.base_prefix).resolve()
    for parent in [*reversed(prefix.parents), prefix][1:]:
        try:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return str(parent)
        except OSError:
            return None
    return None


def _process_count(uid: int) -> int:
    """Live (non-zombie) processes owned by `uid`, from /proc."""
    return len(_pids_of(uid))


def _pids_of(uid: int) -> list[int]:
    pids: list[int] = []
    needle = f"{uid}\t".encode()
    try:
        names = os.listdir("/proc")
    except OSError:
        return pids
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                status = f.read(2048)
        except OSError:
            continue
        # /proc/<pid> itself turns root-owned when a process makes itself non-dumpable, so read the real uid.
        # Plain byte searches: this runs after every sandboxed call, over every process on the machine.
        at = status.find(b"\nUid:\t")
        if at < 0 or not status.startswith(needle, at + 6):
            continue
        state = status.find(b"\nState:\t")
        if state >= 0 and status[state + 8 : state + 9] == b"Z":
            continue
        pids.append(int(name))
    return pids


def _reap_uid(uid: int) -> None:
    """SIGKILL every process of a run's uid until none is left (bounded: a fork bomb is capped by NPROC)."""
    for _ in range(200):
        pids = _pids_of(uid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(OSError):  # it may have exited since the scan
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.002)


def _rlimits(limits: SandboxLimits, uid: int | None) -> list[tuple[str, int, int]]:
    cpu = max(1, math.ceil(limits.cpu_s))
    nproc = limits.processes
    if uid is None:
        # Without a uid of its own the child shares the caller's process count; give it room on top of that.
        nproc += _process_count(os.getuid())
    return [
        # A second of slack between soft (SIGXCPU) and hard (SIGKILL) lets the soft signal be seen as cpu_time.
        ("RLIMIT_CPU", cpu, cpu + 1),
        ("RLIMIT_AS", limits.memory_bytes, limits.memory_bytes),
        ("RLIMIT_FSIZE", limits.file_bytes, limits.file_bytes),
        ("RLIMIT_NPROC", nproc, nproc),
        ("RLIMIT_NOFILE", limits.open_files, limits.open_files),
        ("RLIMIT_CORE", 0, 0),
    ]


def _minimal_env() -> dict[str, str]:
    # Nothing from the caller's environment: secrets (API keys, tokens) must not reach model code.
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONIOENCODING": "utf-8",
        "LANG": "C.UTF-8",
        "HOME": "/nonexistent",
    }


def run_python(
    code: str,
    *,
    limits: SandboxLimits | None = None,
    files: Mapping[str, str | bytes] | None = None,
) -> SandboxResult:
    """Run Python source in a fresh sandbox and return what happened; never raises for what the code does.

    The program runs as `__main__` from `main.py` in an empty working directory; `files` are written next to
    it first. It finds a function `__sandbox_report__(kind, payload="")` in its globals: lines sent through it
    travel on a pipe the parent holds, prefixed with a random per-run nonce the program never sees in its
    source, argv or environment, and come back in `SandboxResult.events` as `"<kind> <payload>"`. A trusted
    harness should take the function out of its globals before running untrusted code (see
    `validators.verifiers.python_tests`); code in the same interpreter can still find it by introspection.

    Args:
        code: the program's source.
        limits: resource limits; `SandboxLimits()` when None.
        files: extra files for the working directory, name -> content (plain names, no directories).

    Returns:
        A `SandboxResult`.

    Example:
        >>> run_python("while True: pass", limits=SandboxLimits(wall_s=0.5)).violation
        'wall_time'
    """
    limits = limits or SandboxLimits()
    uid = _claim_uid() if os.geteuid() == 0 else None
    workdir = tempfile.mkdtemp(prefix="seedwheel-sandbox-")
    try:
        return _run(code, limits, files or {}, uid, workdir)
    finally:
        if uid is not None:
            _reap_uid(uid)
            _release_uid(uid)
        shutil.rmtree(workdir, onerror=_force_remove)


def _force_remove(function: object, path: str, exc_info: object) -> None:
    # The child may leave read-only directories behind (only matters when it ran as our own uid).
    try:
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


def _write_files(workdir: str, files: Mapping[str, str | bytes], uid: int | None) -> None:
    for name, content in files.items():
        if os.path.basename(name) != name or name in ("", ".", ".."):
            raise SandboxConfigError(f"sandbox file names must be plain names, got {name!r}")
        path = os.path.join(workdir, name)
        data = content.encode("utf-8") if isinstance(content, str) else content
        with open(path, "wb") as f:
            f.write(data)
        if uid is not None:
            os.chown(path, uid, uid)


def _run(code: str, limits: SandboxLimits, files: Mapping[str, str | bytes], uid: int | None, workdir: str):
    os.chmod(workdir, 0o700)
    if uid is not None:
        os.chown(workdir, uid, uid)
    _write_files(workdir, {**files, "main.py": code}, uid)
    nonce = secrets.token_hex(16)
    config = {
        "nonce": nonce,
        "workdir": workdir,
        "main": "main.py",
        "uid": uid,
        "rlimits": _rlimits(limits, uid),
        "tmpfs_bytes": limits.file_bytes,
        "prefix": str(Path(sys.base_prefix).resolve()),
        "prefix_hidden": _hidden_prefix_root() if uid is not None else None,
    }
    cfg_r, cfg_w = os.pipe()
    ctl_r, ctl_w = os.pipe()
    # marshal rather than json: the child decodes it with a builtin instead of importing json (and re), which
    # would double its start-up time. The config is a few hundred bytes, far below a pipe's buffer, so
    # writing it before the spawn cannot block.
    os.write(cfg_w, marshal.dumps(config))
    os.close(cfg_w)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-B", "-c", _BOOTSTRAP, str(ctl_w), str(cfg_r)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(ctl_w, cfg_r),
            env=_minimal_env(),
            cwd="/",
            start_new_session=True,
        )
    finally:
        os.close(ctl_w)
        os.close(cfg_r)
    try:
        return _supervise(proc, ctl_r, nonce, limits, start)
    finally:
        os.close(ctl_r)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(OSError):  # the group may be gone already
        os.killpg(pid, signal.SIGKILL)


def _supervise(proc: subprocess.Popen, ctl_r: int, nonce: str, limits: SandboxLimits, start: float):
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    buffers: dict[int, bytearray] = {out_fd: bytearray(), err_fd: bytearray(), ctl_r: bytearray()}
    pidfd = os.pidfd_open(proc.pid)
    selector = selectors.DefaultSelector()
    for fd in (out_fd, err_fd, ctl_r, pidfd):
        selector.register(fd, selectors.EVENT_READ)
    deadline = start + limits.wall_s
    timed_out = over_output = killed_by_us = exited = False
    try:
        while True:
            now = time.monotonic()
            if exited:
                # The leader is gone (a zombie still holding the group id): kill the rest of the group and
                # give the pipes a moment to reach EOF.
                if not killed_by_us:
                    _kill_group(proc.pid)
                    killed_by_us = True
                    deadline = now + _DRAIN_GRACE_S
                if len(selector.get_map()) == 0 or now >= deadline:
                    break
            elif now >= deadline:
                timed_out = True
                _kill_group(proc.pid)
                killed_by_us = True
                exited = True
                deadline = now + _DRAIN_GRACE_S
                continue
            for key, _ in selector.select(max(0.0, deadline - now)):
                fd = key.fd
                if fd == pidfd:
                    selector.unregister(pidfd)
                    exited = True
                    continue
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    selector.unregister(fd)
                    continue
                buffer = buffers[fd]
                cap = (
                    _CONTROL_CAP if fd == ctl_r else limits.output_bytes - len(buffers[out_fd]) - len(buffers[err_fd])
                )
                buffer += chunk[: max(0, cap)]
                if len(chunk) > cap and not over_output:
                    # Stop reading and kill at once: the parent never holds more than the cap.
                    over_output = True
                    _kill_group(proc.pid)
                    killed_by_us = True
                    for other in (out_fd, err_fd, ctl_r):
                        if other in selector.get_map():
                            selector.unregister(other)
                    if not exited:
                        deadline = time.monotonic() + limits.wall_s
    finally:
        selector.close()
    if not exited or timed_out or over_output:
        _kill_group(proc.pid)
    _, status, rusage = os.wait4(proc.pid, 0)
    os.close(pidfd)
    proc.returncode = exit_code = os.waitstatus_to_exitcode(status)
    wall_s = time.monotonic() - start
    cpu_s = rusage.ru_utime + rusage.ru_stime
    events = _events(bytes(buffers[ctl_r]), nonce)
    signum = -exit_code if exit_code < 0 else None
    violation = _violation(
        events=events, signum=signum, timed_out=timed_out, over_output=over_output, cpu_s=cpu_s, limits=limits
    )
    layers = frozenset(
        layer for e in events if e.startswith("layers ") for layer in e.split(" ", 1)[1].split(",") if layer
    )
    if "uid" in layers:
        layers |= {"reaper"}
    return SandboxResult(
        exit_code=exit_code,
        stdout=buffers[out_fd].decode("utf-8", "replace"),
        stderr=buffers[err_fd].decode("utf-8", "replace"),
        timed_out=timed_out,
        killed_by_signal=signum,
        output_truncated=over_output,
        wall_s=wall_s,
        cpu_s=cpu_s,
        violation=violation,
        events=tuple(e for e in events if not e.startswith(("layers ", "violation "))),
        layers=layers,
    )


def _events(raw: bytes, nonce: str) -> list[str]:
    prefix = nonce.encode() + b" "
    # Lines without the nonce (forged, or torn by a concurrent writer) are dropped, never trusted.
    return [line[len(prefix) :].decode("utf-8", "replace") for line in raw.split(b"\n") if line.startswith(prefix)]


def _violation(
    *,
    events: list[str],
    signum: int | None,
    timed_out: bool,
    over_output: bool,
    cpu_s: float,
    limits: SandboxLimits,
) -> str | None:
    if over_output:
        return "output"
    if timed_out:
        return "wall_time"
    # The parent only SIGKILLs a live leader on timeout or output overflow (handled above), so a leader dead
    # of SIGKILL with its CPU budget spent met the hard RLIMIT_CPU (the soft one sends SIGXCPU).
    cpu_spent = cpu_s >= max(1, math.ceil(limits.cpu_s)) - 0.05
    if signum == signal.SIGXCPU or (signum == signal.SIGKILL and cpu_spent):
        return "cpu_time"
    if signum == signal.SIGXFSZ:
        return "file_size"
    reported = [e.split(" ", 1)[1] for e in events if e.startswith("violation ")]
    return reported[0] if reported else None


@cache
def isolation_report() -> dict[str, object]:
    """Which isolation layers a trivial run gets on this machine, and any warnings from the bootstrap.

    Returns:
        `{"layers": [...], "warnings": [...], "root": bool, "ok": bool, "stderr": <tail>}`; cached per process.

    Example:
        >>> "rlimits" in isolation_report()["layers"]
        True
    """
    result = run_python("pass", limits=SandboxLimits(wall_s=10.0))
    return {
        "layers": sorted(result.layers),
        "warnings": [e.split(" ", 1)[1] for e in result.events if e.startswith("warning ")],
        "root": os.geteuid() == 0,
        "ok": result.ok,
        "stderr": result.stderr[-500:],
    }


__all__ = ["SandboxConfigError", "SandboxLimits", "SandboxResult", "isolation_report", "run_python"]
