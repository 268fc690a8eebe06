"""Endpoint: clients on a URL or on a local server started only on a cache miss, stopped when the block ends."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from langmodels import LOCAL_PLACEHOLDER_URL, ChatRequest, Endpoint, EndpointConfig
from tests.fake_server import FakeOpenAIServer

FAST = {"backoff_base_s": 0.001, "backoff_max_s": 0.01, "timeout_s": 5.0, "max_retries": 0}


def ask(content: str) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": content}], template_version="t1")


class FakeLocalServer:
    """Stands in for `ModelServer`: a fake API server that records when it starts and stops."""

    def __init__(self) -> None:
        self.events: list[str] = []

    @contextmanager
    def __call__(self) -> Iterator[str]:
        with FakeOpenAIServer() as server:
            self.events.append("start")
            try:
                yield server.base_url
            finally:
                self.events.append("stop")


def local_endpoint(local: FakeLocalServer, cache_dir: Path) -> Endpoint:
    config = EndpointConfig(base_url=LOCAL_PLACEHOLDER_URL, model="tiny", **FAST)
    return Endpoint(config, cache=cache_dir, local_server=local)


def test_a_url_endpoint_shares_one_cache_between_its_clients(tmp_path):
    with FakeOpenAIServer() as server:
        config = EndpointConfig(base_url=server.base_url, model="fake-model", **FAST)
        with Endpoint(config, cache=tmp_path / "cache") as endpoint:
            first = endpoint.client().complete_many_sync([ask("a")])
            second = endpoint.client()
            again = second.complete_many_sync([ask("a")])
        assert [r.text for r in first] == ["echo: a"]
        assert again[0].cached and second.stats.calls == 0  # each client counts its own calls
        assert len(server.requests) == 1


def test_the_local_server_starts_on_the_first_miss_only_and_stops_with_the_block(tmp_path):
    local = FakeLocalServer()
    with local_endpoint(local, tmp_path / "cache") as endpoint:
        client = endpoint.client()
        assert local.events == []  # a client alone starts nothing
        assert [r.text for r in client.complete_many_sync([ask("a")])] == ["echo: a"]
        endpoint.client().complete_many_sync([ask("b")])  # a second client reuses the running server
        assert local.events == ["start"] and endpoint.started
    assert local.events == ["start", "stop"]
    # A fully cached rerun starts nothing.
    with local_endpoint(local, tmp_path / "cache") as endpoint:
        results = endpoint.client().complete_many_sync([ask("a"), ask("b")])
        assert all(r.cached for r in results) and not endpoint.started
    assert local.events == ["start", "stop"]


def test_the_local_server_stops_when_the_block_fails(tmp_path):
    local = FakeLocalServer()
    with pytest.raises(KeyError), local_endpoint(local, tmp_path / "cache") as endpoint:
        endpoint.client().complete_many_sync([ask("a")])
        raise KeyError("a step failing after its calls")
    assert local.events == ["start", "stop"]


def test_clients_need_the_endpoint_open(tmp_path):
    endpoint = local_endpoint(FakeLocalServer(), tmp_path / "cache")
    with pytest.raises(RuntimeError, match=r"with Endpoint\(...\) as endpoint"):
        endpoint.client()


def test_a_local_server_needs_a_loopback_url():
    config = EndpointConfig(base_url="https://api.example.com/v1", model="m")
    with pytest.raises(ValueError, match="not on this machine, but a local server was given"):
        Endpoint(config, local_server=FakeLocalServer())
