"""A small HTTP server on loopback that stops on SIGTERM or Ctrl-C: what `seedwheel reward-server` and `seedwheel
review` share. The server carries its config for its handlers and knows its URL; a handler sends a body with its
length and logs requests at debug level only; `serve` binds, says where it listens, and serves until stopped
(`core.signals.serve_until_stopped`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Protocol, TypeVar

from core.errors import SeedwheelError
from core.signals import serve_until_stopped

logger = logging.getLogger(__name__)


class Address(Protocol):
    """Where a server listens (a frozen config's fields qualify)."""

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


ConfigT = TypeVar("ConfigT", bound=Address)


class ConfiguredServer(ThreadingHTTPServer, Generic[ConfigT]):
    """A threading HTTP server bound to `config.host:config.port`, holding `config` for its handlers."""

    daemon_threads = True

    def __init__(self, config: ConfigT, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__((config.host, config.port), handler)
        self.config = config

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that sends whole bodies and logs each request at debug level, not on stderr."""

    def send_body(
        self, status: HTTPStatus, data: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), format % args)


def serve(
    config: ConfigT,
    handler: type[BaseHTTPRequestHandler],
    what: str,
    error: type[SeedwheelError],
    on_ready: Callable[[ConfiguredServer[ConfigT]], None] | None = None,
) -> None:
    """Bind `handler` on `config`'s address and serve until SIGTERM or SIGINT; call it from the main thread.

    Raises:
        error: the address cannot be bound (in use, or not this machine's), with the fix.
    """
    try:
        server: ConfiguredServer[ConfigT] = ConfiguredServer(config, handler)
    except OSError as exc:
        raise error(
            f"cannot listen on {config.host}:{config.port} ({exc.strerror})",
            hint="pick another --port (0: any free one), or stop what holds it",
        ) from None
    serve_until_stopped(server, what, None if on_ready is None else lambda: on_ready(server))
