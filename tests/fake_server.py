"""A loopback fake of the OpenAI chat completions API, for tests, benchmarks and offline dry runs.

`FakeOpenAIServer` answers `POST /v1/chat/completions` (and `GET /v1/models`) in the shape the `openai` client
expects, from a thread in the current process. By default it echoes the last message; a `responder` function
can return any text instead (for example fixed JSON, to dry-run a pipeline without a model). Faults are
scripted per request: a request whose last message contains a marker gets the scripted replies in order
(`Reply.status(500)` twice, then the normal answer), so one batch can mix healthy and failing requests.

It records what it saw (`requests`, `max_in_flight`, `status_counts`) so tests can assert on traffic.

From a shell (the port is printed on stdout, then it serves until interrupted):

    python -m tests.fake_server --port 8011 --latency-ms 50
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

logger = logging.getLogger(__name__)

ReplyKind = Literal["ok", "status", "hang", "garbage", "close"]


@dataclass(frozen=True)
class Reply:
    """One scripted server behaviour. Build with the class methods rather than by hand.

    Example:
        >>> Reply.status(429, retry_after_ms=20).kind
        'status'
    """

    kind: ReplyKind
    http_status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: str = ""
    content: str | None = None  # for "ok": the assistant text (None: the server's responder decides)
    seconds: float = 0.0  # for "hang": how long to stall before closing

    @classmethod
    def ok(cls, content: str | None = None) -> Reply:
        """A normal chat completion; `content` overrides the responder's text."""
        return cls("ok", content=content)

    @classmethod
    def status(cls, code: int, message: str = "", retry_after_ms: int | None = None) -> Reply:
        """An HTTP error in OpenAI's error shape; `retry_after_ms` adds `Retry-After-Ms` (and `Retry-After`)."""
        headers = {}
        if retry_after_ms is not None:
            headers = {"retry-after-ms": str(retry_after_ms), "retry-after": str(max(1, retry_after_ms // 1000))}
        text = message or HTTPStatus(code).phrase
        body = json.dumps({"error": {"message": text, "type": "fake_error", "code": code}})
        return cls("status", http_status=code, headers=headers, body=body)

    @classmethod
    def hang(cls, seconds: float = 30.0) -> Reply:
        """Accept the request and say nothing for `seconds` (longer than the client's timeout), then close."""
        return cls("hang", seconds=seconds)

    @classmethod
    def garbage(cls, body: str = "<html>502 upstream</html>") -> Reply:
        """A 200 whose body is not a chat completion."""
        return cls("garbage", body=body)

    @classmethod
    def close(cls) -> Reply:
        """Read the request, then close the connection without answering."""
        return cls("close")


def echo_responder(body: Mapping[str, Any]) -> str:
    """The default answer: `echo: ` plus the last message's content.

    Example:
        >>> echo_responder({"messages": [{"role": "user", "content": "hi"}]})
        'echo: hi'
    """
    messages = body.get("messages") or [{}]
    return f"echo: {messages[-1].get('content', '')}"


@dataclass
class _Script:
    replies: list[Reply]
    then: Reply


class FakeOpenAIServer:
    """A threaded HTTP server on 127.0.0.1 speaking the chat completions API; use as a context manager.

    Args:
        latency_s: added to every answered request (simulates model time; requests overlap).
        responder: maps the request body to the assistant's text (default: `echo_responder`).
        port: 0 picks a free port.

    Example:
        >>> with FakeOpenAIServer() as server:
        ...     server.base_url.startswith("http://127.0.0.1:")
        True
    """

    def __init__(
        self, latency_s: float = 0.0, responder: Callable[[Mapping[str, Any]], str] = echo_responder, port: int = 0
    ) -> None:
        self.latency_s = latency_s
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str] = []  # the Authorization header of each chat request, in arrival order
        self.request_times: list[float] = []
        self.status_counts: Counter[int | str] = Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self._scripts: dict[str, _Script] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = _Server(("127.0.0.1", port), _Handler)
        self._httpd.fake = self
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """The URL to give an OpenAI client: `http://127.0.0.1:<port>/v1`."""
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, marker: str, *replies: Reply, then: Reply | None = None) -> None:
        """Requests whose last message contains `marker` get `replies` in order, then `then` (default: ok).

        Example: `server.script("flaky", Reply.status(500), Reply.status(500))` fails the first two requests
        that mention "flaky", then answers normally. `then=Reply.status(500)` makes the failure permanent.
        """
        with self._lock:
            self._scripts[marker] = _Script(list(replies), then or Reply.ok())

    def start(self) -> FakeOpenAIServer:
        """Serve in a daemon thread; returns self."""
        # A short poll interval makes stop() quick (the default 0.5 s would dominate a fast test).
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port (hanging handlers are woken up)."""
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next_reply(self, body: Mapping[str, Any], authorization: str) -> Reply:
        messages = body.get("messages") or [{}]
        last = str(messages[-1].get("content", ""))
        with self._lock:
            self.requests.append(dict(body))
            self.authorizations.append(authorization)
            self.request_times.append(time.monotonic())
            for marker, script in self._scripts.items():
                if marker in last:
                    return script.replies.pop(0) if script.replies else script.then
        return Reply.ok()

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self, outcome: int | str) -> None:
        with self._lock:
            self.in_flight -= 1
            self.status_counts[outcome] += 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    # Benchmarks open dozens of connections at once; the default backlog of 5 would refuse some.
    request_queue_size = 256
    fake: FakeOpenAIServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Scripted faults (closed connections, clients that time out and leave) end handlers with socket
        # errors; they are expected here, so keep them out of stderr.
        logger.debug("fake_server: handler for %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 keeps connections alive, as real servers do; every response sets Content-Length.
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, the client's delayed ACK adds ~40 ms to each.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("fake_server: " + format, *args)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(200, {"object": "list", "data": [{"id": "fake-model", "object": "model", "created": 0}]})
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send_json(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}})
            return
        reply = fake._next_reply(body, self.headers.get("authorization", ""))
        fake._enter()
        outcome: int | str = reply.kind
        try:
            if reply.kind == "hang":
                fake._stopping.wait(reply.seconds)
                self.close_connection = True
                return
            if reply.kind == "close":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fake.latency_s:
                time.sleep(fake.latency_s)
            if reply.kind == "status":
                outcome = reply.http_status
                self._send(reply.http_status, reply.body.encode(), "application/json", reply.headers)
            elif reply.kind == "garbage":
                self._send(200, reply.body.encode(), "application/json")
            else:
                outcome = 200
                text = reply.content if reply.content is not None else fake.responder(body)
                self._send_json(200, _completion(body, text))
        finally:
            fake._leave(outcome)

    def _send_json(self, status: int, payload: Mapping[str, Any]) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _send(self, status: int, data: bytes, content_type: str, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def _completion(body: Mapping[str, Any], text: str) -> dict[str, Any]:
    prompt_words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
    completion_words = len(text.split())
    return {
        "id": f"chatcmpl-fake-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake-model"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        # Word counts stand in for tokens: deterministic, and enough to test the accounting.
        "usage": {
            "prompt_tokens": prompt_words,
            "completion_tokens": completion_words,
            "total_tokens": prompt_words + completion_words,
        },
    }


@contextmanager
def fake_server_process(latency_ms: float = 0.0, reply: str | None = None) -> Iterator[str]:
    """This fake server in a child process (so it does not share the caller's GIL); yields its base URL.

    Args:
        latency_ms: added to every answered request.
        reply: a fixed assistant text for every request (None: echo the last message).

    Example:
        >>> with fake_server_process(latency_ms=10) as base_url:  # doctest: +SKIP
        ...     client = LLMClient(EndpointConfig(base_url=base_url, model="fake"))
    """
    command = [sys.executable, "-m", "tests.fake_server", "--latency-ms", str(latency_ms)]
    if reply is not None:
        command += ["--reply", reply]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        base_url = proc.stdout.readline().strip()
        if not base_url.startswith("http://"):
            raise RuntimeError(f"fake server did not start (printed {base_url!r})")
        yield base_url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main(argv: list[str] | None = None) -> None:
    """Serve until interrupted; writes `base_url` as the first line of stdout so scripts can read it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added to every answered request")
    parser.add_argument("--reply", default=None, help="a fixed assistant text for every request (default: echo)")
    args = parser.parse_args(argv)
    responder = echo_responder if args.reply is None else (lambda body: args.reply)
    server = FakeOpenAIServer(latency_s=args.latency_ms / 1000, responder=responder, port=args.port).start()
    sys.stdout.write(server.base_url + "\n")
    sys.stdout.flush()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
