"""The local model server's lifecycle: a real `langmodels.server` on loopback, and its process-group handling.

The real-server tests assert transport and lifecycle, never quality: the tiny model has random weights (what the
server answers is tested in test_server.py). The process-group tests use a stand-in server (a few lines of Python
that answer `/health` and spawn a child) to stay fast.
"""

import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest

from core.signals import dispositions_kept
from langmodels import launcher as server_launcher
from langmodels.launcher import MissingServingDependencyError, ModelServer, ModelServerError, group_alive
from tests.tiers import skip_for_accelerator

STAND_IN = r"""
import http.server, signal, subprocess, sys, time
port, pid_file, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
if mode == "ignore-sigterm":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
# A grandchild in the same process group, as vLLM's engine workers are.
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(pid_file, "w").write(str(child.pid))
if mode == "crash":
    print("boom: cannot load the model", flush=True)
    sys.exit(3)
if mode == "silent":
    time.sleep(600)

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


class StandInServer(ModelServer):
    """A `ModelServer` whose command runs the stand-in script instead of a model server."""

    def __init__(self, tmp_path: Path, mode: str = "serve", **kwargs) -> None:
        (tmp_path / "model").mkdir(exist_ok=True)
        super().__init__(tmp_path / "model", log_dir=tmp_path / "logs", **kwargs)
        self.script = tmp_path / "stand_in.py"
        self.script.write_text(STAND_IN)
        self.child_pid_file = tmp_path / "child.pid"
        self.mode = mode

    def command(self) -> list[str]:
        return [sys.executable, str(self.script), str(self.port), str(self.child_pid_file), self.mode]

    def child_pid(self) -> int:
        deadline = time.monotonic() + 10
        while not self.child_pid_file.exists() or not self.child_pid_file.read_text():
            assert time.monotonic() < deadline, "the stand-in never wrote its child's pid"
            time.sleep(0.05)
        return int(self.child_pid_file.read_text())


def process_alive(pid: int) -> bool:
    """Running, that is: neither gone nor a zombie waiting for init to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.fixture
def openai_client_for():
    clients = []

    def make(server: ModelServer) -> openai.OpenAI:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


# --- the real server --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_chat_completion_through_openai_client(tiny_model_dir: Path, tmp_path: Path, openai_client_for) -> None:
    with ModelServer(tiny_model_dir, log_dir=tmp_path / "logs", startup_timeout_s=180) as server:
        assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
        assert server.model == str(tiny_model_dir.resolve())  # requests must name the served path exactly
        client = openai_client_for(server)
        messages = [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "2 + 3?"}]

        assert [m.id for m in client.models.list().data] == [server.model]
        reply = client.chat.completions.create(model=server.model, messages=messages, max_tokens=8, seed=1)
        assert reply.choices[0].message.role == "assistant"
        assert isinstance(reply.choices[0].message.content, str)  # garbage or empty: random weights
        assert reply.usage.completion_tokens > 0
        assert reply.choices[0].finish_reason in ("stop", "length")

        with pytest.raises(openai.NotFoundError) as wrong_name:
            client.chat.completions.create(model="tiny", messages=messages, max_tokens=1)
        assert wrong_name.value.code == "model_not_found" and server.model in wrong_name.value.message
        group = server.pid
        assert group_alive(group)

    assert not group_alive(group)
    assert server.pid is None and not server.is_running()
    assert "Uvicorn running" in server.log_path.read_text()


@pytest.mark.slow
def test_a_server_that_cannot_load_its_model_fails_with_the_log_tail(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus-model"
    bogus.mkdir()
    (bogus / "config.json").write_text("{ this is not json")
    server = ModelServer(bogus, log_dir=tmp_path / "logs", startup_timeout_s=180)

    with pytest.raises(ModelServerError, match="exited with code") as caught:
        server.start()

    error = caught.value
    assert str(bogus) in str(error) and "last lines:" in str(error)
    assert error.log_tail and error.log_tail in str(error)
    assert error.log_path == server.log_path and error.log_path.exists()
    assert server.pid is None


# --- process group handling, with the stand-in ------------------------------------------------------------------


def test_the_whole_group_is_stopped_when_the_body_raises(tmp_path: Path) -> None:
    server = StandInServer(tmp_path)
    with pytest.raises(KeyError), server:
        group, child = server.pid, server.child_pid()
        assert group_alive(group) and process_alive(child)
        raise KeyError("the body failed")

    assert not group_alive(group)
    assert not process_alive(child)


def test_sigkill_follows_when_sigterm_is_ignored(tmp_path: Path) -> None:
    server = StandInServer(tmp_path, mode="ignore-sigterm", stop_grace_s=0.5)
    with server:
        group, child = server.pid, server.child_pid()
    assert not group_alive(group)
    assert not process_alive(child)


def test_a_launcher_that_ignores_sigterm_still_stops_its_server_on_sigterm(tmp_path: Path, caplog) -> None:
    # After a Dagster run in a process started in the background, SIGTERM is ignored there, and every process it
    # starts inherits that: each stop waited the whole grace period, then sent SIGKILL. The tether gives the
    # server SIGTERM's default action back, so SIGTERM alone stops the group.
    with dispositions_kept():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with StandInServer(tmp_path, stop_grace_s=30) as server:
            group, child = server.pid, server.child_pid()
            started = time.monotonic()
    took = time.monotonic() - started
    assert not group_alive(group) and not process_alive(child)
    assert "after SIGTERM" not in caplog.text, f"SIGKILL was needed ({took:.1f} s)"
    assert took < 30


LAUNCHER = r"""
import sys, time
from pathlib import Path
from langmodels.launcher import ModelServer

class StandIn(ModelServer):
    def command(self):
        return [sys.executable, sys.argv[1], str(self.port), sys.argv[2], "serve"]

tmp = Path(sys.argv[3])
(tmp / "model").mkdir(exist_ok=True)
server = StandIn(tmp / "model", log_dir=tmp / "logs").start()
(tmp / "group.pid").write_text(str(server.pid))
time.sleep(600)
"""


def test_a_killed_launcher_takes_its_server_down(tmp_path: Path) -> None:
    # kill -9 of the run that started a server runs no cleanup code; the tether stops the server anyway.
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    child_file, group_file = tmp_path / "child.pid", tmp_path / "group.pid"
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(script), str(child_file), str(tmp_path)])
    try:
        deadline = time.monotonic() + 60
        # Each file is created before it is written: an empty one is not yet a pid.
        while not all(path.exists() and path.read_text() for path in (group_file, child_file)):
            assert launcher.poll() is None and time.monotonic() < deadline, "the launcher never started its server"
            time.sleep(0.1)
        group, child = int(group_file.read_text()), int(child_file.read_text())
        assert group_alive(group) and process_alive(child)
    finally:
        launcher.kill()
        launcher.wait()
    deadline = time.monotonic() + 15
    while group_alive(group) or process_alive(child):
        assert time.monotonic() < deadline, "the server outlived its killed launcher"
        time.sleep(0.1)


def test_a_server_that_dies_early_reports_its_log_and_leaves_nothing(tmp_path: Path) -> None:
    server = StandInServer(tmp_path, mode="crash")
    with pytest.raises(ModelServerError, match="exited with code 3") as caught:
        server.start()
    assert "boom: cannot load the model" in caught.value.log_tail
    assert not process_alive(server.child_pid())  # the orphaned grandchild went with the group


def test_a_server_that_never_gets_ready_times_out(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = StandInServer(tmp_path, mode="silent", startup_timeout_s=1.0, stop_grace_s=1.0)
    timed_out = pytest.raises(ModelServerError, match=r"did not answer GET /health with 200 within 1 s")
    with caplog.at_level("INFO", logger=server_launcher.__name__), timed_out:
        server.start()
    # Its group, whatever it had started by then: on a busy machine the timeout can come before the stand-in
    # has spawned (or recorded) its child, which would be in the same group.
    [group] = [int(m) for m in re.findall(r"serve \(pid (\d+)\)", caplog.text)]
    assert not group_alive(group)
    if server.child_pid_file.exists() and server.child_pid_file.read_text():
        assert not process_alive(int(server.child_pid_file.read_text()))


# --- command and environment ------------------------------------------------------------------------------------


def test_environment_is_offline_and_carries_no_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")

    offline = ModelServer(tmp_path, log_dir=tmp_path, env={"OMP_NUM_THREADS": "1"}).environment()
    assert offline["HF_HUB_OFFLINE"] == "1" and offline["OMP_NUM_THREADS"] == "1"
    assert not {"OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN"} & offline.keys()

    online = ModelServer(tmp_path, log_dir=tmp_path, offline=False).environment()
    assert online["HF_TOKEN"] == "hf_secret" and "HF_HUB_OFFLINE" not in online
    assert "OPENAI_API_KEY" not in online


def test_seedwheel_command_serves_the_model_by_its_absolute_path(tmp_path: Path) -> None:
    command = ModelServer(tmp_path, log_dir=tmp_path, port=8123).command()
    assert command[:3] == [sys.executable, "-m", "langmodels.server"]
    served = str(tmp_path.resolve())
    assert command[3:] == ["--model", served, "--host", "127.0.0.1", "--port", "8123", "--device", "cpu"]


def test_vllm_command_is_built_and_start_names_the_gpu_extra(tmp_path: Path) -> None:
    server = ModelServer("Qwen/Qwen2.5-0.5B-Instruct", log_dir=tmp_path, backend="vllm", port=8000)
    assert server.command()[3:] == ["serve", "Qwen/Qwen2.5-0.5B-Instruct", "--host", "127.0.0.1", "--port", "8000"]
    assert server.model == "Qwen/Qwen2.5-0.5B-Instruct"  # a model id is served under its own name
    if _installed("vllm"):
        skip_for_accelerator("vLLM is installed here; the missing-extra message cannot be shown")
    with pytest.raises(MissingServingDependencyError, match=r"seedwheel\[gpu\]"):
        server.start()
    assert server.pid is None


def _installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_a_missing_model_directory_fails_before_starting(tmp_path: Path) -> None:
    server = ModelServer(tmp_path / "not-built-yet", log_dir=tmp_path / "logs")
    with pytest.raises(ModelServerError, match=r"does not exist\. Build one with"):
        server.start()
    assert server.pid is None and not (tmp_path / "logs").exists()


@pytest.mark.slow
def test_a_port_taken_before_the_server_binds_it_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        ports = iter([taken])  # the first "free" port is taken by the time the server binds it
        real_free_port = server_launcher._free_port
        monkeypatch.setattr(server_launcher, "_free_port", lambda host: next(ports, None) or real_free_port(host))

        with StandInServer(tmp_path) as server:
            assert server.port != taken
        assert len(list((tmp_path / "logs").glob("*.log"))) == 2  # the failed attempt kept its log

        with pytest.raises(ModelServerError, match=f"Port {taken} on 127.0.0.1 is already in use"):
            StandInServer(tmp_path, port=taken).start()
