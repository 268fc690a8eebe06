"""The OpenAI-compatible endpoint generation and judging call: a configured URL, or a local server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
from pydantic import PrivateAttr

from core.database import DATABASE_URL_ENV, database_url
from langmodels import LOCAL_PLACEHOLDER_URL, Endpoint, LLMClient
from langmodels.launcher import Backend, ModelServer
from langmodels.models import bundled_model, bundled_model_dir
from resources.mirror import ENDPOINT_FIELDS


class LLMEndpoint(dg.ConfigurableResource):
    """An OpenAI-compatible endpoint (OpenAI, vLLM, `seedwheel serve`) for generation and judging.

    With `base_url` empty, a local server is started on loopback the first time a step asks for a client, and
    stopped when the step ends (also on failure): `seedwheel serve` on CPU or `vllm serve` on GPU, serving
    `model` (a local directory or a model id), or, when `model` is empty too, the bundled SmolLM2-135M-Instruct
    converted under `models_dir` (the quickstart: offline, no weights to download). Every call is cached, so a
    rerun makes only the calls whose inputs changed: under `cache_dir` (SQLite, one machine), or, when the variable
    `cache_url_env` names is set, in the PostgreSQL database at its `postgresql://` URL, which a cluster's workers
    share (the URL holds a password, so only the variable's name is configuration).
    """

    base_url: str = ""
    model: str = ""
    # `langmodels.EndpointConfig`'s fields, with its defaults (each profile sets the generation params it samples).
    api_key_env: str = ENDPOINT_FIELDS.default("api_key_env")
    max_concurrency: int = ENDPOINT_FIELDS.default("max_concurrency")
    timeout_s: float = ENDPOINT_FIELDS.default("timeout_s")
    max_retries: int = ENDPOINT_FIELDS.default("max_retries")
    max_calls: int | None = ENDPOINT_FIELDS.default("max_calls")
    temperature: float = ENDPOINT_FIELDS.default("temperature")
    max_tokens: int = ENDPOINT_FIELDS.default("max_tokens")
    local_backend: Backend = "seedwheel"
    # torch threads of a local `seedwheel serve`; 1 when other work shares the cores (two spin against each other).
    local_threads: int = 1
    cache_dir: str
    cache_url_env: str = DATABASE_URL_ENV  # the production database (core.database)
    models_dir: str  # where the bundled model is converted when `model` is empty
    log_dir: str  # the local server's logs

    _endpoint: Endpoint | None = PrivateAttr(default=None)

    @contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext) -> Iterator[LLMEndpoint]:
        with self.endpoint() as endpoint:
            self._endpoint = endpoint
            try:
                yield self
            finally:
                self._endpoint = None

    def client(self) -> LLMClient:
        """A client for this endpoint. Without a `base_url`, the local server starts only when a request misses
        the cache, so a fully cached rerun starts nothing."""
        if self._endpoint is None:
            raise RuntimeError(
                "LLMEndpoint.client() is only available while a step runs; outside Dagster use "
                "`with llm.endpoint() as endpoint: endpoint.client()`"
            )
        return self._endpoint.client()

    def endpoint(self) -> Endpoint:
        """This endpoint as a plain `langmodels.Endpoint` (no Dagster), e.g. for `seedwheel judge`."""
        model = self.model
        if not model and not self.base_url:  # the bundled model, named before it is converted
            model = str(bundled_model_dir(self.models_dir))
        config = ENDPOINT_FIELDS.build(self, base_url=self.base_url or LOCAL_PLACEHOLDER_URL, model=model)
        cache = database_url(variable=self.cache_url_env) or self.cache_dir
        return Endpoint(config, cache=cache, local_server=None if self.base_url else self._local_server)

    @contextmanager
    def _local_server(self) -> Iterator[str]:
        model = self.model or str(bundled_model(self.models_dir))
        threads = ["--threads", str(self.local_threads)] if self.local_backend == "seedwheel" else []
        with ModelServer(model, log_dir=self.log_dir, backend=self.local_backend, extra_args=threads) as server:
            yield server.base_url
