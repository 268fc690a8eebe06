"""The LLMEndpoint resource is a thin wrapper: its config becomes a plain `langmodels.Endpoint`."""

import pytest

from langmodels import LOCAL_PLACEHOLDER_URL, ChatRequest, LLMCache
from resources import LLMEndpoint
from tests.fake_server import FakeOpenAIServer
from tests.services import fresh_database


def resource(tmp_path, **fields) -> LLMEndpoint:
    return LLMEndpoint(
        cache_dir=str(tmp_path / "cache"),
        models_dir=str(tmp_path / "models"),
        log_dir=str(tmp_path / "logs"),
        **fields,
    )


def test_a_configured_url_is_used_as_is(tmp_path):
    endpoint = resource(tmp_path, base_url="http://10.0.0.5:8000/v1", model="qwen", max_tokens=64).endpoint()
    assert endpoint.local_server is None
    assert (endpoint.config.base_url, endpoint.config.model, endpoint.config.max_tokens) == (
        "http://10.0.0.5:8000/v1",
        "qwen",
        64,
    )
    assert endpoint.cache == str(tmp_path / "cache")


def test_without_a_url_a_local_server_serves_the_bundled_model(tmp_path):
    endpoint = resource(tmp_path).endpoint()
    assert endpoint.local_server is not None and endpoint.config.base_url == LOCAL_PLACEHOLDER_URL
    # Named before it is converted (the cache keys on it), under the models dir, after a hash of the GGUF file.
    assert endpoint.config.model.startswith(str(tmp_path / "models" / "smollm2-135m-instruct-"))
    assert not (tmp_path / "models").exists()  # nothing is converted until a request misses the cache


def test_a_remote_url_without_a_model_fails_with_the_fix(tmp_path):
    with pytest.raises(ValueError, match="model is empty"):
        resource(tmp_path, base_url="http://10.0.0.5:8000/v1").endpoint()


def test_client_outside_a_step_says_what_to_use(tmp_path):
    with pytest.raises(RuntimeError, match=r"outside Dagster use `with llm.endpoint\(\) as endpoint"):
        resource(tmp_path, base_url="http://10.0.0.5:8000/v1", model="qwen").client()


def test_a_cache_url_in_the_environment_moves_the_cache_to_postgres(tmp_path, monkeypatch, postgres_url):
    """A cluster's workers share answers through PostgreSQL; the URL (with its password) stays in the environment."""
    url = fresh_database(postgres_url)
    monkeypatch.setenv("SEEDWHEEL_DATABASE_URL", url)
    request = ChatRequest([{"role": "user", "content": "hi"}], template_version="t1")
    with FakeOpenAIServer() as server:
        llm = resource(tmp_path, base_url=server.base_url, model="fake")
        for _ in range(2):
            with llm.endpoint() as endpoint:
                client = endpoint.client()
                [answer] = client.complete_many_sync([request])
        assert answer.text == "echo: hi" and client.stats.hits == 1  # the second endpoint read the first's answer
    assert not (tmp_path / "cache").exists()  # nothing went to the local folder
    assert url.split("@")[0].split(":")[-1] not in repr(llm.endpoint())  # the password is not shown
    with LLMCache(url) as cache:
        assert len(cache) == 1
