"""EndpointConfig and ChatRequest check themselves; API keys resolve from the environment, never stored."""

import pytest

from langmodels import ChatRequest, EndpointConfig, MissingAPIKey, is_loopback_url, resolve_api_key

BASE = {"base_url": "http://127.0.0.1:8000/v1", "model": "tiny"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # Not a URL at all.
        ({"base_url": "127.0.0.1:8000"}, "must be an http(s) URL with a host"),
        # No model name.
        ({"model": " "}, "model is empty"),
        # The key pasted where its variable's name belongs: refused, and not echoed back.
        ({"api_key_env": "sk-abc123-secret"}, "NAME of an environment variable"),
        # Concurrency below one.
        ({"max_concurrency": 0}, "max_concurrency (0) must be >= 1"),
        # A zero timeout.
        ({"timeout_s": 0}, "timeout_s (0) must be > 0"),
        # Negative retries.
        ({"max_retries": -1}, "max_retries (-1) must be >= 0"),
        # A negative call cap.
        ({"max_calls": -5}, "max_calls (-5) must be >= 0"),
        # Temperature out of range.
        ({"temperature": 3.0}, "temperature (3.0) must be between 0 and 2"),
        # Backoff base above its max.
        ({"backoff_base_s": 5, "backoff_max_s": 1}, "backoff_base_s (5) must be >= 0 and <= backoff_max_s (1)"),
    ],
)
def test_bad_config_says_the_numbers_and_the_fix(changes, message):
    with pytest.raises(ValueError) as info:
        EndpointConfig(**{**BASE, **changes})
    assert message in str(info.value)
    assert "secret" not in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        # No messages.
        ({"messages": []}, "messages is empty"),
        # A message without content.
        ({"messages": [{"role": "user"}]}, "messages[0] must be a mapping with 'role' and 'content'"),
        # No template version: the cache could not tell prompt versions apart.
        ({"template_version": ""}, "template_version is empty"),
        # A misspelt param override.
        ({"params": {"temprature": 0.2}}, "unknown params ['temprature']"),
        # OpenAI's wrapper instead of the schema.
        ({"response_format": {"type": "json_schema"}}, "not a valid JSON Schema"),
    ],
)
def test_bad_request_says_what_to_fix(kwargs, message):
    with pytest.raises(ValueError) as info:
        ChatRequest(**{"messages": [{"role": "user", "content": "hi"}], "template_version": "t1", **kwargs})
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("url", "environ", "key"),
    [
        # The variable is set: it is used, loopback or not.
        ("https://api.example.com/v1", {"OPENAI_API_KEY": "sk-real"}, "sk-real"),
        ("http://127.0.0.1:8000/v1", {"OPENAI_API_KEY": "sk-real"}, "sk-real"),
        # Loopback without a key: a dummy (local servers ignore it, the openai client insists on one).
        ("http://127.0.0.1:8000/v1", {}, "sk-no-key-required"),
        ("http://localhost:8000/v1", {"OPENAI_API_KEY": "  "}, "sk-no-key-required"),
        ("http://[::1]:8000/v1", {}, "sk-no-key-required"),
    ],
)
def test_api_key_resolution(url, environ, key):
    assert resolve_api_key(EndpointConfig(base_url=url, model="m"), environ) == key


@pytest.mark.parametrize(
    "url",
    [
        # A remote host.
        "https://api.example.com/v1",
        # A LAN address is not this machine.
        "http://10.0.0.5:8000/v1",
        # A name that merely contains "localhost".
        "http://localhost.example.com/v1",
    ],
)
def test_remote_endpoint_without_key_fails_with_the_fix(url):
    with pytest.raises(MissingAPIKey, match="export OPENAI_API_KEY=<your key>"):
        resolve_api_key(EndpointConfig(base_url=url, model="m"), {})
    assert not is_loopback_url(url)
