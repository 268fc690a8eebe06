"""`Endpoint`: clients for one OpenAI-compatible endpoint, at a URL or started on this machine when first needed.

The one place that turns "where is the model" into `LLMClient`s: the Dagster `LLMEndpoint` resource wraps it for
a step, `seedwheel judge` for one command. Both share the cache, so a judgment made by one is free for the other.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path

from core.database import redact_url
from langmodels.cache import LLMCache
from langmodels.client import LLMClient
from langmodels.types import EndpointConfig, EndpointConfigError

# The base URL of a local server before it runs: any loopback URL will do, since a loopback endpoint is cached
# without its port (`EndpointConfig.endpoint_id`) and the server's real URL replaces it when it starts.
LOCAL_PLACEHOLDER_URL = "http://127.0.0.1/v1"

LocalServer = Callable[[], AbstractContextManager[str]]


class Endpoint:
    """Clients for one endpoint, sharing one cache, inside a `with` block that owns everything they start.

    Args:
        config: the endpoint and generation defaults. With `local_server`, its `base_url` must be a loopback URL
            (`LOCAL_PLACEHOLDER_URL`): the server's address is only known once it runs.
        cache: where answers are cached (`LLMCache`): a local folder, or a `postgresql://` URL a cluster's workers
            share; None disables caching.
        local_server: starts a server on this machine and yields its base URL while it runs (e.g. a
            `langmodels.launcher.ModelServer` on `config.model`). It is entered the first time a request misses the
            cache, at most once per `with` block, and left when the block ends, also on failure; a fully cached
            run starts nothing.
        api_key: the key itself, for callers that resolve secrets their own way; None reads `config.api_key_env`.

    Raises:
        ValueError: `local_server` with a non-loopback `base_url`.

    Example:
        >>> from tests.fake_server import FakeOpenAIServer
        >>> from langmodels import ChatRequest
        >>> with FakeOpenAIServer() as server, Endpoint(EndpointConfig(server.base_url, "fake")) as endpoint:
        ...     client = endpoint.client()
        ...     [r.text for r in client.complete_many_sync([ChatRequest([{"role": "user", "content": "hi"}], "t1")])]
        ['echo: hi']
    """

    def __init__(
        self,
        config: EndpointConfig,
        *,
        cache: str | Path | None = None,
        local_server: LocalServer | None = None,
        api_key: str | None = None,
    ) -> None:
        if local_server is not None and not config.is_loopback:
            raise EndpointConfigError(
                f"base_url {config.base_url!r} is not on this machine, but a local server was given: use "
                f"base_url={LOCAL_PLACEHOLDER_URL!r} for a server started here, or drop local_server"
            )
        self.config = config
        self.cache = cache
        self.local_server = local_server
        self.api_key = api_key
        self._stack: ExitStack | None = None
        self._cache: LLMCache | None = None
        self._base_url: str | None = None

    def __enter__(self) -> Endpoint:
        self._stack = ExitStack()
        return self

    def __exit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        self._cache = None
        self._base_url = None
        if stack is not None:
            stack.close()  # stops the local server, then closes the cache (last in, first out)

    @property
    def started(self) -> bool:
        """Whether a local server was started in this `with` block."""
        return self._base_url is not None

    def client(self) -> LLMClient:
        """A new client (its own `stats`) on this endpoint and the shared cache.

        Raises:
            RuntimeError: outside the `with` block.
            MissingAPIKey: a remote endpoint and no key, before any call is made.
        """
        if self._stack is None:
            raise RuntimeError("Endpoint.client() needs the endpoint open: `with Endpoint(...) as endpoint:`")
        if self._cache is None and self.cache is not None:
            self._cache = self._stack.enter_context(LLMCache(self.cache))
        connect = self._connect if self.local_server is not None else None
        return LLMClient(self.config, self._cache, api_key=self.api_key, connect=connect)

    def _connect(self) -> str:
        if self._base_url is None:
            if self._stack is None or self.local_server is None:
                raise RuntimeError("a client needed the local server after its endpoint was closed: keep it open")
            self._base_url = self._stack.enter_context(self.local_server())
        return self._base_url

    def __repr__(self) -> str:
        where = "local server" if self.local_server is not None else self.config.base_url
        cache = redact_url(str(self.cache)) if self.cache is not None else None
        return f"Endpoint({where}, model={self.config.model!r}, cache={cache!r})"
