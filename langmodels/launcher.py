"""A local OpenAI-compatible model server, on loopback: seedwheel's own (`langmodels.server`) on CPU, `vllm serve`
on GPU.

`ModelServer` starts the server as a child process in its own session (so it and everything it spawns form
one process group), waits until it is ready, exposes `base_url` and `model` for any OpenAI-compatible client,
and stops the whole group on exit, also when the body of the `with` block raises.

Both backends honour `response_format` JSON schemas (grammar-constrained decoding: llguidance in `langmodels.server`,
xgrammar in vLLM), batch concurrent requests and serve `n` > 1.

Readiness: the server is ready when `GET /health` answers 200. Both backends load the model *before* they bind
the port (`langmodels.server` loads it, then starts uvicorn; vLLM builds its engine before it serves), so the first 200
means the model is in memory and the first request pays no loading time.

The request's `model` must be exactly the name the server was started with; `ModelServer.model` is that name
(for a local directory: its absolute path).

Server output goes to a log file in a folder the caller gives, never to the parent's pipes (which could fill
up and block the server). When the server dies or never becomes ready, `ModelServerError` carries the tail of
that log.

Because the server lives in its own session, a terminal's Ctrl-C does not reach it directly: stopping is this
module's job. `stop()` runs on leaving the `with` block (an interrupt raised in the parent, as Dagster raises
on termination, included) and, as a safety net, at normal interpreter exit; only a parent killed with SIGKILL
leaves its server behind.

Example:
    >>> with ModelServer(model_dir, log_dir=tmp / "logs") as server:  # doctest: +SKIP
    ...     client = openai.OpenAI(base_url=server.base_url, api_key="unused")
    ...     client.chat.completions.create(model=server.model, messages=[{"role": "user", "content": "hi"}])
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import logging
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Literal

from core import SeedwheelError
from langmodels import tether

logger = logging.getLogger(__name__)

Backend = Literal["seedwheel", "vllm"]
BACKENDS: tuple[str, ...] = ("seedwheel", "vllm")

# What a server process may inherit from the parent: enough to run Python, find caches and devices, no secrets.
INHERITED_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
    "XDG_CACHE_HOME",
    "HF_HOME",
    "HF_HUB_CACHE",
    "TORCH_HOME",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_HOME",
)
# Only passed when the server may download (offline=False), e.g. vLLM fetching a gated model id.
ONLINE_ENV = ("HF_TOKEN", "HF_ENDPOINT")
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

# One request to a local server on CPU: it batches concurrent requests into one decode loop, and a batch of long
# prompts takes a minute or more on 2 cores, so a client's usual 60 s would time out and retry work in progress.
LOCAL_REQUEST_TIMEOUT_S = 900.0
_PROBE_TIMEOUT_S = 2.0
_POLL_INTERVAL_S = 0.25
_PORT_ATTEMPTS = 3
_LOG_TAIL_LINES = 40
# Loopback traffic must never go through an HTTP proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_LIVE_SERVERS: set[ModelServer] = set()
_atexit_registered = False


class ModelServerError(SeedwheelError, RuntimeError):
    """The model server could not start, died, or did not become ready in time.

    Attributes:
        log_path: The server's log file.
        log_tail: Its last lines, also included in the message.
    """

    def __init__(self, message: str, *, log_path: Path | None = None, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_path = log_path
        self.log_tail = log_tail


class MissingServingDependencyError(SeedwheelError, ImportError):
    """The backend's package is not installed; the message names the extra to install."""


class ModelServer:
    """An OpenAI-compatible server for one model on 127.0.0.1, as a context manager.

    Args:
        model: A local model directory (served under its absolute path) or a model id (vLLM, or a cached id).
        log_dir: Folder for the server's log file (created if missing); also the server's working directory.
        backend: `"seedwheel"` (`python -m langmodels.server`: transformers and llguidance, CPU by default) or `"vllm"`
            (`vllm serve`, GPU; needs the `gpu` extra).
        host: Address to bind; loopback by default.
        port: Port to bind; by default a free one is picked (and picked again if another process took it).
        device: Device for the seedwheel backend (`cpu`, `cuda`, `cuda:1`); vLLM chooses its own.
        startup_timeout_s: How long to wait for `GET /health` to answer 200.
        stop_grace_s: How long `stop` waits after SIGTERM before it sends SIGKILL to the process group.
        offline: Set `HF_HUB_OFFLINE=1` (and friends) in the server's environment; `False` lets it download
            and passes `HF_TOKEN` through.
        extra_args: More command-line arguments for the backend (e.g. `["--max-model-len", "4096"]`).
        env: Extra environment variables for the server (override the inherited ones).

    Example:
        >>> with ModelServer("/models/tiny", log_dir="/tmp/logs") as server:  # doctest: +SKIP
        ...     client = openai.OpenAI(base_url=server.base_url, api_key="unused")
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        log_dir: str | os.PathLike[str],
        backend: Backend = "seedwheel",
        host: str = "127.0.0.1",
        port: int | None = None,
        device: str = "cpu",
        startup_timeout_s: float = 300.0,
        stop_grace_s: float = 10.0,
        offline: bool = True,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}.")
        if startup_timeout_s <= 0 or stop_grace_s < 0:
            raise ValueError(
                f"startup_timeout_s ({startup_timeout_s}) must be > 0 and stop_grace_s ({stop_grace_s}) >= 0."
            )
        self.model: str = served_name(model)
        self.log_dir = Path(log_dir).expanduser().resolve()
        self.backend: Backend = backend
        self.host = host
        self.port: int | None = port
        self.device = device
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.offline = offline
        self.extra_args = list(extra_args)
        self.extra_env = dict(env or {})
        self.log_path: Path | None = None
        self.startup_s: float | None = None
        self._fixed_port = port is not None
        self._process: subprocess.Popen[bytes] | None = None

    # --- public API -------------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, e.g. `http://127.0.0.1:40123/v1` (known once a port is chosen)."""
        if self.port is None:
            raise ModelServerError("The server has no port yet: call start() or enter the context first.")
        return f"http://{_url_host(self.host)}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        """Process id of the server (also its process group id), or None when not started."""
        return None if self._process is None else self._process.pid

    def command(self) -> list[str]:
        """The command line that starts the server (built without starting anything, even without vLLM).

        Returns:
            The argument list, run with the current Python interpreter.

        Example:
            >>> ModelServer("/m", log_dir="/tmp", port=8000).command()[1:]  # doctest: +SKIP
            ['-m', 'langmodels.server', '--model', '/m', '--host', '127.0.0.1', '--port', '8000', '--device', 'cpu']
        """
        port = str(self.port if self.port is not None else 0)
        if self.backend == "vllm":
            return [
                sys.executable,
                "-m",
                "vllm.entrypoints.cli.main",
                "serve",
                self.model,
                "--host",
                self.host,
                "--port",
                port,
                *self.extra_args,
            ]
        return [
            sys.executable,
            "-m",
            "langmodels.server",
            "--model",
            self.model,
            "--host",
            self.host,
            "--port",
            port,
            "--device",
            self.device,
            *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        """The server's environment: an allow-list of the parent's variables, offline switches, `env` on top.

        Returns:
            The variables passed to the server process.
        """
        names = INHERITED_ENV + (() if self.offline else ONLINE_ENV)
        child = {name: os.environ[name] for name in names if name in os.environ}
        if self.offline:
            child.update(OFFLINE_ENV)
        child.update({"PYTHONUNBUFFERED": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "1"})
        child.update(self.extra_env)
        return child

    def start(self) -> ModelServer:
        """Start the server and wait until `GET /health` answers 200.

        Returns:
            self, with `base_url`, `model`, `pid`, `log_path` and `startup_s` set.

        Raises:
            MissingServingDependencyError: The backend's package is not installed.
            ModelServerError: The server exited or did not become ready within `startup_timeout_s`
                (the message has the log tail); the process group is stopped before this is raised.
        """
        if self._process is not None:
            raise ModelServerError(f"The server is already running (pid {self._process.pid}); stop() it first.")
        self._check_installed()
        # Again at start: the directory may have been built after this object was made, and the server runs in
        # log_dir, where a relative path would point elsewhere.
        self.model = served_name(self.model)
        if _looks_like_path(self.model) and not Path(self.model).expanduser().exists():
            raise ModelServerError(
                f"Model directory {self.model} does not exist. Build one with "
                "training.tiny_model.build_tiny_model(...), or pass an existing directory or a model id."
            )
        if self._fixed_port and self.port is not None and not _port_is_free(self.host, self.port):
            # Checked first, or the health probe could get its 200 from whatever already listens there.
            raise ModelServerError(f"Port {self.port} on {self.host} is already in use; pass another port or None.")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        attempt = 0
        while True:
            attempt += 1
            if not self._fixed_port:
                self.port = _free_port(self.host)
            try:
                self._launch()
                self._wait_until_ready()
                return self
            except ModelServerError as error:
                self.stop()
                # A free port can be taken by another process between our check and the server's bind.
                port_race = not self._fixed_port and "address already in use" in error.log_tail.lower()
                if not port_race or attempt >= _PORT_ATTEMPTS:
                    raise
                logger.warning("Port %s was taken before the server bound it; trying another port.", self.port)
            except BaseException:
                self.stop()
                raise

    def stop(self) -> None:
        """Stop the server's whole process group: SIGTERM, then SIGKILL after `stop_grace_s`. Idempotent."""
        process, self._process = self._process, None
        if process is None:
            return
        _LIVE_SERVERS.discard(self)
        stop_group(process, self.stop_grace_s, f"Model server group {process.pid} (log {self.log_path})")
        logger.info("Stopped model server %s (exit code %s).", process.pid, process.returncode)

    def is_running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ModelServer(backend={self.backend!r}, model={self.model!r}, port={self.port}, pid={self.pid})"

    # --- internals --------------------------------------------------------------------------------------------

    def _check_installed(self) -> None:
        # The seedwheel backend's packages are seedwheel's own dependencies; only vLLM is an extra.
        if self.backend == "vllm" and importlib.util.find_spec("vllm") is None:
            raise MissingServingDependencyError(
                "backend='vllm' needs vLLM, which is not installed. On a machine with a CUDA GPU install the "
                "`gpu` extra: pip install 'seedwheel[gpu]'. On CPU use backend='seedwheel'."
            )

    def _launch(self) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.log_path = self.log_dir / f"{self.backend}-serve-{stamp}-port{self.port}.log"
        command = self.command()
        with open(self.log_path, "ab") as log:
            log.write(f"$ {shlex.join(command)}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                tether.command_for(command),  # ends with this process, even when it is killed
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.log_dir,
                env=self.environment(),
                start_new_session=True,
            )
        _track(self)
        logger.info(
            "Started %s serve (pid %s) on %s; log %s", self.backend, self._process.pid, self.base_url, self.log_path
        )

    def _wait_until_ready(self) -> None:
        assert self._process is not None
        started = time.monotonic()
        deadline = started + self.startup_timeout_s
        health = f"http://{_url_host(self.host)}:{self.port}/health"
        while True:
            code = self._process.poll()
            if code is not None:
                raise self._error(
                    f"exited with code {code} before it became ready ({time.monotonic() - started:.1f} s)"
                )
            if _probe(health):
                self.startup_s = time.monotonic() - started
                logger.info("Model server ready in %.1f s: %s (model %s)", self.startup_s, self.base_url, self.model)
                return
            if time.monotonic() > deadline:
                raise self._error(
                    f"did not answer GET /health with 200 within {self.startup_timeout_s:.0f} s "
                    "(raise startup_timeout_s for a large model)"
                )
            time.sleep(_POLL_INTERVAL_S)

    def _error(self, what: str) -> ModelServerError:
        tail = _tail(self.log_path)
        message = (
            f"{self.backend} serve for {self.model!r} on port {self.port} {what}.\n"
            f"Command: {shlex.join(self.command())}\nLog: {self.log_path}, last lines:\n{tail}"
        )
        return ModelServerError(message, log_path=self.log_path, log_tail=tail)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def served_name(model: str | os.PathLike[str]) -> str:
    """The name a server serves `model` under: a local directory's absolute path, anything else (an id) as given.

    Args:
        model: A model directory or a model id.

    Returns:
        The name requests must send as `model`.

    Example:
        >>> served_name("HuggingFaceTB/SmolLM2-135M-Instruct")
        'HuggingFaceTB/SmolLM2-135M-Instruct'
    """
    local = Path(model).expanduser()
    return str(local.resolve()) if local.exists() else str(model)


def _looks_like_path(model: str) -> bool:
    """A hub id is `name` or `org/name`; these can only be filesystem paths."""
    return model.startswith(("/", "./", "../", "~")) or model.count("/") > 1


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # As servers bind: a port in TIME_WAIT counts as free, one with a listener does not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _probe(url: str) -> bool:
    try:
        with _OPENER.open(url, timeout=_PROBE_TIMEOUT_S) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _tail(path: Path | None, lines: int = _LOG_TAIL_LINES) -> str:
    if path is None:
        return "(no log)"
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 16_384))
            text = log.read().decode("utf-8", errors="replace")
    except OSError as error:
        return f"(log unreadable: {error})"
    # Progress bars redraw with carriage returns: keep the last state of each line.
    cleaned = [line.rsplit("\r", 1)[-1] for line in text.splitlines()]
    return "\n".join(cleaned[-lines:])


def stop_group(process: subprocess.Popen[bytes], grace_s: float, name: str) -> None:
    """Stop the process group that `process` leads (started with `start_new_session`): SIGTERM, then SIGKILL to
    whatever is left after `grace_s`, logged as the exception it should be, under `name`."""
    group = process.pid  # the leader of a new session: its pid is the group id
    _signal_group(group, signal.SIGTERM)
    if not wait_group_gone(process, group, grace_s):
        logger.warning("%s still alive %.0f s after SIGTERM; sending SIGKILL.", name, grace_s)
        _signal_group(group, signal.SIGKILL)
        if not wait_group_gone(process, group, 10.0):
            logger.error("%s survived SIGKILL.", name)


def _signal_group(group: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def wait_group_gone(process: subprocess.Popen[bytes], group: int, timeout_s: float) -> bool:
    """Reap the leader and wait until no live process of the group is left; False on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        process.poll()  # reap the leader, else its zombie keeps the group alive
        if not group_alive(group):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def group_alive(group: int) -> bool:
    """Whether a process group still has a live (not zombie) member.

    Orphaned members that have exited stay zombies until init reaps them, which some container inits do only
    now and then; they hold no resources, so they do not count. Without `/proc`, any member counts.

    Args:
        group: The process group id (for a `ModelServer`, its `pid`).

    Returns:
        True while a member is running.

    Example:
        >>> group_alive(server.pid)  # doctest: +SKIP
    """
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            # Fields after the parenthesised command: state, ppid, pgrp, ...
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # exited while we looked
        if int(fields[2]) == group and fields[0] not in ("Z", "X"):
            return True
    return False


def _track(server: ModelServer) -> None:
    """Stop servers left running when the interpreter exits normally (a safety net for `start()` without `stop()`)."""
    global _atexit_registered
    _LIVE_SERVERS.add(server)
    if not _atexit_registered:
        atexit.register(_stop_all)
        _atexit_registered = True


def _stop_all() -> None:
    for server in list(_LIVE_SERVERS):
        server.stop()
