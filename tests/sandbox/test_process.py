"""Hostile completions: each must end as a failed verdict (or a contained run) within a bounded time.

Cases run both through the sandbox directly (to check what the OS saw) and through the `python_tests`
verifier (to check the reason a trainer would log). Layer-specific cases are skipped only where the layer
cannot exist on this machine (see `sandbox.process` for which layers need root or user namespaces).
"""

import os
import resource
import signal
import socket
import time
import uuid
from pathlib import Path

import pytest

from sandbox.process import SandboxConfigError, SandboxLimits, isolation_report, run_python
from tests.paths import REPO
from validators.registry import verify

LAYERS = set(isolation_report()["layers"])
needs_uid = pytest.mark.skipif("uid" not in LAYERS, reason="no unprivileged uid: the sandbox runs as the caller")
needs_netns = pytest.mark.skipif("netns" not in LAYERS, reason="no network namespace (no root, no user namespaces)")
needs_mountns = pytest.mark.skipif("mountns" not in LAYERS, reason="no mount namespace (no root, no user namespaces)")

FAST = SandboxLimits(wall_s=3.0, cpu_s=3.0)


def python_task(timeout_s: float = 3.0) -> dict:
    return {
        "verifier": {
            "name": "python_tests",
            "params": {
                "tests": "assert solve(2) == 4\nassert solve(3) == 9",
                "entry_point": "solve",
                "timeout_s": timeout_s,
            },
        }
    }


def test_the_machine_reports_its_layers():
    # Every mode has rlimits and the audit hook; a trivial program runs cleanly.
    report = isolation_report()
    assert report["ok"], report
    assert {"rlimits", "audit"} <= LAYERS


@pytest.mark.parametrize(
    ("code", "code_prefix"),
    [
        # An infinite loop ends at the wall limit.
        ("def solve(x):\n    while True:\n        pass", "timeout"),
        # An infinite loop at import time, before any test.
        ("while True:\n    pass", "timeout"),
        # A fork bomb runs into RLIMIT_NPROC.
        ("import os\nwhile True:\n    os.fork()", "sandbox_violation: processes"),
        # A memory bomb runs into RLIMIT_AS.
        ("x = []\nwhile True:\n    x.append(bytearray(50 * 2**20))", "sandbox_violation: memory"),
        # 100 MB of output is cut at the cap and killed.
        ("import sys\nsys.stdout.write('x' * 100_000_000)", "sandbox_violation: output"),
        # Output in a loop, flushed, is cut at the cap too.
        ("import sys\nwhile True:\n    print('y' * 10_000, flush=True)", "sandbox_violation: output"),
        # Killing the harness's parent is refused (other uid) or kills only the sandbox; the tests fail.
        ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef solve(x): return x * x", "tests_failed"),
        # Killing its own process group ends the run as failed, never as passed.
        ("import os, signal\nos.killpg(0, signal.SIGKILL)", "tests_failed"),
        # Exiting 0 before the tests cannot fake a pass; it is named as the hack it is.
        ("import os\nos._exit(0)", "early_exit"),
        # Printing what looks like passing results does not count.
        ("print('ok ok ok test 0 pass')\ndef solve(x): return 0", "tests_failed: 2/2"),
        # A huge file runs into RLIMIT_FSIZE.
        ("open('big', 'wb').write(b'x' * 64 * 2**20)", "sandbox_violation: file_size"),
        # Spawning a shell (which could read files without the audit hook) is refused.
        ("import subprocess\nsubprocess.run(['sh', '-c', 'while :; do :; done'])", "forbidden_access"),
        # A shell through os.system too (a shell that did start would inherit the limits and die with the run).
        ("import os\nos.system('while :; do :; done')", "forbidden_access"),
    ],
)
def test_hostile_completions_fail_in_bounded_time(code, code_prefix):
    start = time.monotonic()
    verdict = verify(python_task(), f"```python\n{code}\n```")
    elapsed = time.monotonic() - start
    assert not verdict.passed
    assert verdict.reason.startswith(code_prefix), verdict.reason
    # The bound is the feature (no completion outlives its limit), set at 10x the 3 s limit so a busy shared
    # machine cannot fail it; a completion that escaped its limits would run on for minutes.
    assert elapsed < 10 * 3.0


def test_the_parent_survives_being_killed():
    # The child tries SIGKILL on its parent (this test process) and on every process it may signal.
    code = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"
    result = run_python(code, limits=FAST)
    # Had the kill reached this process, pytest would have died with it: getting here is the check.
    assert result.exit_code != 0


@needs_uid
def test_kill_minus_one_only_reaches_the_sandbox():
    # kill(-1) signals every process the caller may signal: with a uid of its own that is only the sandbox.
    result = run_python("import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('alive')", limits=FAST)
    assert result.exit_code == 0 and result.stdout == "alive\n"


def test_the_environment_is_not_inherited(monkeypatch):
    # A secret in the parent's environment must not reach model code.
    monkeypatch.setenv("SEEDWHEEL_TEST_SECRET", "hunter2-" + uuid.uuid4().hex)
    result = run_python("import os\nprint(sorted(os.environ.items()))", limits=FAST)
    assert result.exit_code == 0
    assert "SEEDWHEEL_TEST_SECRET" not in result.stdout
    assert os.environ["SEEDWHEEL_TEST_SECRET"] not in result.stdout


@needs_uid
def test_the_parents_environment_cannot_be_read_through_proc(monkeypatch):
    # /proc/<ppid>/environ belongs to another uid once the child drops privileges.
    monkeypatch.setenv("SEEDWHEEL_TEST_SECRET", "hunter2-" + uuid.uuid4().hex)
    code = (
        "import os\ntry:\n    print(open(f'/proc/{os.getppid()}/environ').read())\nexcept OSError as e:\n    print(e)"
    )
    result = run_python(code, limits=FAST)
    assert os.environ["SEEDWHEEL_TEST_SECRET"] not in result.stdout


def test_a_secret_in_the_environment_does_not_reach_the_verifier_child(monkeypatch):
    # Through the verifier: a solution that returns the secret's length would pass only if it could read it.
    secret = "s" * 7
    monkeypatch.setenv("SEEDWHEEL_TEST_SECRET", secret)
    code = "import os\ndef solve(x):\n    return len(os.environ.get('SEEDWHEEL_TEST_SECRET', ''))"
    task = {"verifier": {"name": "python_tests", "params": {"tests": "assert solve(0) == 7", "entry_point": "solve"}}}
    verdict = verify(task, code)
    assert verdict.reason.startswith("tests_failed"), verdict.reason


@pytest.mark.parametrize(
    "target",
    [
        # The project directory (root-owned; read-only in the sandbox's mount namespace).
        "repo",
        # A temporary directory outside the sandbox (hidden behind the sandbox's private /tmp).
        "tmp",
    ],
)
def test_files_outside_the_working_directory_cannot_be_written(target, tmp_path):
    name = f"sandbox-escape-{uuid.uuid4().hex}.txt"
    path = (REPO if target == "repo" else tmp_path) / name
    try:
        result = run_python(f"open({str(path)!r}, 'w').write('pwned')", limits=FAST)
        assert not path.exists(), result
        assert result.exit_code != 0
    finally:
        if path.exists():  # only if the sandbox failed; keep the tree clean for the next run
            path.unlink()


def test_the_working_directory_is_fresh_and_deleted():
    # Only the program itself is there, and nothing is left behind after the run.
    result = run_python("import os\nprint(os.getcwd())\nprint(sorted(os.listdir('.')))", limits=FAST)
    cwd, listing = result.stdout.splitlines()
    assert listing == "['main.py']"
    assert not Path(cwd).exists()


@needs_mountns
def test_private_tmp_is_writable_and_vanishes():
    # /tmp inside is a private tmpfs: usable by the program, invisible to the host.
    name = f"/tmp/sandbox-private-{uuid.uuid4().hex}"
    result = run_python(f"open({name!r}, 'w').write('x')\nprint(open({name!r}).read())", limits=FAST)
    assert result.stdout == "x\n"
    assert not Path(name).exists()


@pytest.fixture
def listener():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.3)
    yield server
    server.close()


def assert_no_connection(server: socket.socket) -> None:
    with pytest.raises(TimeoutError):
        server.accept()


def test_no_network_through_the_socket_module(listener):
    # The audit hook (and the network namespace, where active) refuse the connection.
    port = listener.getsockname()[1]
    result = run_python(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)", limits=FAST)
    assert result.exit_code != 0
    assert_no_connection(listener)


@needs_netns
def test_no_network_even_around_the_audit_hook(listener):
    # ctypes calls connect(2) directly, bypassing the audit hook: the empty network namespace still refuses.
    port = listener.getsockname()[1]
    code = (
        "import ctypes, struct, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "fd = libc.socket(2, 1, 0)\n"
        f"addr = struct.pack('=H', 2) + struct.pack('!H', {port}) + bytes([127, 0, 0, 1]) + bytes(8)\n"
        "print(libc.connect(fd, addr, len(addr)), os.strerror(ctypes.get_errno()))\n"
    )
    result = run_python(code, limits=FAST)
    assert result.stdout.startswith("-1 "), result
    assert_no_connection(listener)


def test_network_through_the_verifier_fails(listener):
    # A solution that needs the network fails its tests; nothing arrives at the listener.
    port = listener.getsockname()[1]
    connect = f"socket.create_connection(('127.0.0.1', {port}), timeout=1)"
    code = f"import socket\ndef solve(x):\n    {connect}\n    return x * x"
    verdict = verify(python_task(), code)
    assert verdict.reason.startswith("tests_failed"), verdict.reason
    assert_no_connection(listener)


@pytest.mark.parametrize(
    ("code", "limits", "violation"),
    [
        # Busy loop: the wall clock ends it.
        ("while True: pass", SandboxLimits(wall_s=1.0), "wall_time"),
        # Busy loop that ignores SIGXCPU: the hard CPU limit (SIGKILL) ends it before the wall limit.
        (
            "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True: pass",
            SandboxLimits(wall_s=20.0, cpu_s=1.0),
            "cpu_time",
        ),
        # Sleeping uses no CPU: only the wall clock can end it.
        ("import time\ntime.sleep(60)", SandboxLimits(wall_s=1.0), "wall_time"),
        # A memory bomb.
        ("b = bytearray(2**31)", FAST, "memory"),
        # A fork bomb.
        ("import os\nwhile True: os.fork()", FAST, "processes"),
        # 100 MB of output.
        ("import sys\nsys.stdout.write('z' * 100_000_000)", FAST, "output"),
        # Output on stderr counts too.
        ("import sys\nsys.stderr.write('z' * 5_000_000)", FAST, "output"),
        # A file larger than RLIMIT_FSIZE.
        ("open('f', 'wb').write(bytes(2 * 2**20))", SandboxLimits(file_bytes=2**20), "file_size"),
        # Too many open files.
        ("fs = [open('main.py') for _ in range(10_000)]", FAST, "open_files"),
    ],
)
def test_limits_end_runs_with_the_right_violation(code, limits, violation):
    start = time.monotonic()
    result = run_python(code, limits=limits)
    assert result.violation == violation, result
    assert not result.ok
    # The bound is the feature: the limit that should end the run ends it. 10x the tightest limit, so a busy
    # shared machine cannot fail it (the violation above already says which limit fired).
    assert time.monotonic() - start < 10 * min(limits.wall_s, limits.cpu_s)


def test_output_is_capped_without_buffering_it_all():
    # The parent's peak memory must not grow by the 100 MB the child writes.
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run_python("import sys\nsys.stdout.write('x' * 100_000_000)", limits=FAST)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert result.output_truncated and len(result.stdout) <= FAST.output_bytes
    assert (after - before) * 1024 < 50 * 2**20


@needs_uid
def test_children_that_leave_the_process_group_are_reaped():
    # setsid() escapes killpg; the reaper kills by uid. The child prints its uid so the test can look.
    code = "import os, time\nprint(os.getuid(), flush=True)\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"
    result = run_python(code, limits=FAST)
    uid = int(result.stdout.split()[0])
    # The escaped child sleeps 60 s: 10 s of grace tells reaped from left running on a busy shared machine.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _live_pids_of(uid):
        time.sleep(0.05)
    assert _live_pids_of(uid) == []


def _live_pids_of(uid: int) -> list[int]:
    pids = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z"):
            pids.append(int(name))
    return pids


def test_the_interpreter_is_isolated():
    # -I -S -B: no site-packages (so no third-party imports), no user site, no bytecode writes.
    code = "import sys\nprint(sys.flags.isolated, sys.flags.no_site, sys.flags.dont_write_bytecode)\nimport jsonschema"
    result = run_python(code, limits=FAST)
    assert result.stdout == "1 1 1\n"
    assert "ModuleNotFoundError" in result.stderr


def test_background_children_die_with_the_run():
    # A child in the same process group that outlives the program is killed when the program ends.
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(30)\nprint('parent done')"
    start = time.monotonic()
    result = run_python(code, limits=FAST)
    assert result.stdout == "parent done\n" and result.violation is None
    # Half the child's sleep: a run that waited for it would take 30 s, a busy machine never takes 15.
    assert time.monotonic() - start < 15


def test_the_sigxcpu_of_a_child_is_reported_as_cpu_time():
    # Without a handler, SIGXCPU at the soft limit kills the program.
    result = run_python("while True: pass", limits=SandboxLimits(wall_s=10.0, cpu_s=1.0))
    assert result.violation == "cpu_time"
    assert result.killed_by_signal in (signal.SIGXCPU, signal.SIGKILL)


@pytest.mark.parametrize(
    "kwargs",
    [
        # Zero wall time cannot run anything.
        {"wall_s": 0},
        # Negative CPU time.
        {"cpu_s": -1},
        # Too little memory for the interpreter itself.
        {"memory_bytes": 2**20},
        # Too few file descriptors for the interpreter.
        {"open_files": 3},
    ],
)
def test_impossible_limits_are_refused(kwargs):
    with pytest.raises(SandboxConfigError):
        SandboxLimits(**kwargs)


def test_file_names_must_be_plain():
    # A path in `files` could write outside the working directory.
    with pytest.raises(SandboxConfigError):
        run_python("pass", files={"../escape.py": "x"})
