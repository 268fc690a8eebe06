"""System services the integration tests start on loopback (Debian packages installed by `make test`).

A missing service makes its tests skip with the install command, so a laptop without root can still run the
rest; under CI (`CI` or `SEEDWHEEL_REQUIRE_SERVICES=1`) tests/tiers.py turns that skip into a failure.
"""

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from core.signals import dispositions_kept
from langmodels.launcher import stop_group, wait_group_gone
from pipeline.settings import Settings
from tests.paths import REPO

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

# The flags CI's Chromium runs with: no sandbox (root in a container), no GPU, nothing fetched in the background.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking")


def require(executable: str, package: str) -> str:
    """The executable's path, or a skip naming the package (a failure under CI: tests/tiers.py)."""
    found = shutil.which(executable)
    if found is None:
        pytest.skip(f"{executable} is not installed: apt-get install {package} (make test installs it as root)")
    return found


def released_together(scripts: Sequence[Sequence[str]], timeout_s: float = 120) -> list[str]:
    """Run each `python -c` script (with its arguments) in a process of its own, from the repository, and release
    them together: each prints `ready` once set up, then waits for a line on stdin. Returns their stdouts, in
    order, after each exits 0 (else the assertion shows its stderr)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", *script],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for script in scripts
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline() == "ready\n", proc.stderr.read()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout_s)
        assert proc.returncode == 0, err
        outputs.append(out)
    return outputs


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def redis_server(workdir: Path) -> Iterator[int]:
    """A throwaway `redis-server` on 127.0.0.1 (no persistence); yields its port, stops it afterwards."""
    executable = require("redis-server", "redis-server")
    port = free_port()
    command = [executable, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"]
    with open(workdir / "redis.log", "wb") as log:
        process = subprocess.Popen([*command, "--dir", str(workdir)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start: {(workdir / 'redis.log').read_text()[-2000:]}")
            time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextmanager
def s3_server(workdir: Path) -> Iterator[str]:
    """moto's standalone S3 server on 127.0.0.1 (the `moto[server]` dev dependency); yields its endpoint URL.

    moto speaks the S3 protocol as boto3, s3fs and the AWS CLI use it, create-only writes (`If-None-Match: *`)
    included, and keeps objects in memory: it stands in for S3, MinIO or R2, not for their durability or speed.
    """
    executable = Path(sys.executable).with_name("moto_server")
    if not executable.exists():
        pytest.skip("moto's S3 server is not installed: pip install 'moto[server]' (make test installs it)")
    port = free_port()
    with open(workdir / "s3.log", "wb") as log:
        process = subprocess.Popen(
            [str(executable), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT
        )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(endpoint, timeout=1).close()
                break
            # Refused, reset, or (a server still starting on busy cores) accepted and answered after the timeout.
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    log = (workdir / "s3.log").read_text()[-2000:]
                    raise RuntimeError(f"moto_server did not start: {log}") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        process.terminate()
        process.wait(timeout=10)


def s3_environment(endpoint: str) -> dict[str, str]:
    """The variables that point boto3 and s3fs at `endpoint` with throwaway credentials."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "seedwheel-test",
        "AWS_SECRET_ACCESS_KEY": "seedwheel-test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def fresh_bucket(endpoint: str) -> str:
    """A new, empty bucket on the S3 server at `endpoint`; its name (a test's own)."""
    import boto3

    name = f"test-{secrets.token_hex(6)}"
    environ = s3_environment(endpoint)
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=environ["AWS_SECRET_ACCESS_KEY"],
        region_name=environ["AWS_DEFAULT_REGION"],
    ).create_bucket(Bucket=name)
    return name


@contextmanager
def postgres_server(workdir: Path) -> Iterator[str]:
    """A throwaway PostgreSQL server on 127.0.0.1 (Debian `postgresql`), password-protected; yields its URL and
    stops it afterwards. As root, the server runs as the `postgres` user (it refuses root), from a data folder
    that user owns outside pytest's root-only temporary folders; its log is `workdir/postgres.log`."""
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parent.parent.name))
    if not versions:
        pytest.skip("PostgreSQL is not installed: apt-get install postgresql (make test installs it as root)")
    bindir = versions[-1].parent
    data = Path(tempfile.mkdtemp(prefix="seedwheel-postgres-"))
    as_owner: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]
    password = secrets.token_hex(16)
    (data / "password").write_text(password)
    if as_owner:
        shutil.chown(data / "password", "postgres", "postgres")
    port = free_port()
    process = None
    try:
        db = str(data / "db")
        initdb = [str(bindir / "initdb"), "-D", db, "-U", "seedwheel", "-A", "scram-sha-256", "--no-sync"]
        subprocess.run([*as_owner, *initdb, f"--pwfile={data / 'password'}"], check=True, capture_output=True)
        server = [str(bindir / "postgres"), "-D", db, "-h", "127.0.0.1", "-p", str(port), "-k", str(data)]
        with open(workdir / "postgres.log", "wb") as log:  # fsync off: a throwaway server
            process = subprocess.Popen([*as_owner, *server, "-c", "fsync=off"], stdout=log, stderr=subprocess.STDOUT)
        url = f"postgresql://seedwheel:{password}@127.0.0.1:{port}/postgres"
        _wait_for_postgres(url, process, workdir / "postgres.log")
        yield url
    finally:
        if process is not None:
            process.terminate()  # SIGTERM: PostgreSQL's smart shutdown
            process.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)


def fresh_database(server_url: str) -> str:
    """A new, empty database on the server at `server_url`; its URL (a test's own, so tests stay independent)."""
    import psycopg2

    name = f"test_{secrets.token_hex(6)}"
    db = psycopg2.connect(server_url)
    try:
        db.autocommit = True  # CREATE DATABASE cannot run in a transaction
        with db.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {name}")  # a name made here, never input
    finally:
        db.close()
    return server_url.rsplit("/", 1)[0] + f"/{name}"


def _wait_for_postgres(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    import psycopg2

    deadline = time.monotonic() + 30
    while True:
        try:
            psycopg2.connect(url, connect_timeout=2).close()
            return
        except psycopg2.OperationalError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not start: {log.read_text()[-2000:]}") from None
            time.sleep(0.1)


def require_chromium() -> tuple[str, str]:
    """Paths of `chromium` and `chromedriver`, or a skip (a failure under CI)."""
    return require("chromium", "chromium"), require("chromedriver", "chromium-driver")


@contextmanager
def headless_chromium(window_size: tuple[int, int] = (1600, 1000)) -> Iterator["WebDriver"]:
    """Headless Chromium driven by Selenium through the Debian `chromedriver` (no driver download); quits after."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = require_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (*CHROMIUM_FLAGS, f"--window-size={window_size[0]},{window_size[1]}"):
        options.add_argument(flag)
    chrome = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    try:
        yield chrome
    finally:
        chrome.quit()


def graphql(base_url: str, query: str, variables: Mapping[str, Any] | None = None, timeout_s: float = 30) -> dict:
    """POST a query to the Dagster webserver's GraphQL API; its `data`, or an AssertionError with the errors."""
    body = json.dumps({"query": query, "variables": dict(variables or {})}).encode()
    request = urllib.request.Request(f"{base_url}/graphql", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        answer = json.load(response)
    assert not answer.get("errors"), f"GraphQL errors: {answer['errors']}"
    return answer["data"]


_LOCATIONS = """
query Locations {
  workspaceOrError {
    __typename
    ... on Workspace {
      locationEntries {
        name
        loadStatus
        locationOrLoadError { __typename ... on PythonError { message } }
      }
    }
  }
}
"""


# How long `seedwheel ui` may take to stop on SIGTERM, with its webserver, daemon and code servers (about 3 s
# alone, about 8 s until the last code server is gone).
UI_STOP_S = 60.0


@contextmanager
def seedwheel_ui(settings: Settings, workdir: Path, timeout_s: float = 240) -> Iterator[str]:
    """`seedwheel ui` (`dagster dev`: webserver, daemon, code servers) on 127.0.0.1, started as a user starts it in
    the background (a shell's `seedwheel ui &`: SIGINT ignored), with `settings.environ()`.

    Yields the base URL once the code location has loaded. Afterwards it is stopped as a user stops it, `kill PID`
    (SIGTERM to the `seedwheel ui` process alone), and it must be gone, with every process it started, within
    `UI_STOP_S`: else the group is killed and the stop fails. Its log is `workdir/dagster.log`.
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = workdir / "dagster.log"
    command = [str(Path(sys.executable).with_name("seedwheel")), "ui", "--port", str(port)]
    with open(log_path, "wb") as log, dispositions_kept():
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited by the child, as for a shell's background job
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env={**os.environ, **settings.environ()},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: what it started can be found, and killed if it lingers
        )
    stopped = False
    try:
        _wait_for_location(url, process, log_path, time.monotonic() + timeout_s)
        yield url
        process.send_signal(signal.SIGTERM)
        stopped = wait_group_gone(process, process.pid, UI_STOP_S)
        assert stopped, f"seedwheel ui was still running {UI_STOP_S:g} s after SIGTERM (log: {log_path})"
    finally:
        if not stopped:
            stop_group(process, 20, "seedwheel ui")


def _wait_for_location(url: str, process: subprocess.Popen[bytes], log_path: Path, deadline: float) -> None:
    """Until `/server_info` answers and every code location has loaded; a load error fails with its message."""

    def tail() -> str:
        return log_path.read_text(errors="replace")[-3000:]

    while True:
        if process.poll() is not None:
            raise RuntimeError(f"dagster dev exited with {process.returncode}:\n{tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"dagster dev did not load the code location at {url} in time:\n{tail()}")
        try:
            with urllib.request.urlopen(f"{url}/server_info", timeout=2):
                pass
            entries = graphql(url, _LOCATIONS, timeout_s=10)["workspaceOrError"].get("locationEntries") or []
        except (OSError, urllib.error.URLError):
            entries = []
        if entries and all(entry["loadStatus"] == "LOADED" for entry in entries):
            errors = [e["locationOrLoadError"].get("message") for e in entries if e["locationOrLoadError"]]
            errors = [e for e in errors if e]
            if errors:
                raise RuntimeError(f"the code location failed to load: {errors[0]}")
            return
        time.sleep(0.5)
