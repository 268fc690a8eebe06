"""LLMClient against a real loopback HTTP server speaking the chat completions API (faults scripted per request)."""

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from langmodels import (
    CallBudgetExceeded,
    ChatRequest,
    EndpointConfig,
    EndpointRejected,
    EndpointUnavailable,
    LLMCache,
    LLMClient,
    MissingAPIKey,
)
from tests.fake_server import FakeOpenAIServer, Reply

# Retry waits in microseconds-to-milliseconds so fault tests stay fast.
FAST = {"backoff_base_s": 0.001, "backoff_max_s": 0.01, "timeout_s": 5.0, "max_retries": 2}


def ask(content: str, template_version: str = "t1", **kwargs) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": content}], template_version=template_version, **kwargs)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[LLMCache]:
    with LLMCache(tmp_path / "llm_cache") as llm_cache:
        yield llm_cache


def make_client(server: FakeOpenAIServer, cache: LLMCache | None, **overrides) -> LLMClient:
    config = EndpointConfig(base_url=server.base_url, **{"model": "fake-model", **FAST, **overrides})
    return LLMClient(config, cache, environ={})


def test_normal_batch_keeps_order_counts_tokens_and_reports_progress(server, cache):
    client = make_client(server, cache, max_concurrency=3)
    seen = []
    results = client.complete_many_sync(
        [ask(f"question {i}") for i in range(6)], progress=lambda d, t: seen.append((d, t))
    )
    assert [r.text for r in results] == [f"echo: question {i}" for i in range(6)]
    assert all(r.ok and not r.cached and r.attempts == 1 and r.finish_reason == "stop" for r in results)
    # The fake counts words as tokens: 2 words in, 3 out per request.
    assert (results[0].tokens_in, results[0].tokens_out) == (2, 3)
    assert client.stats.as_dict() == {
        "hits": 0,
        "misses": 6,
        "calls": 6,
        "attempts": 6,
        "retries": 0,
        "tokens_in": 12,
        "tokens_out": 18,
    }
    assert seen == [(i, 6) for i in range(1, 7)]
    assert '"content": "echo: question 0"' in results[0].raw  # the body as received, for audit
    assert server.requests[0]["model"] == "fake-model"
    assert server.requests[0]["temperature"] == 0.0


def test_transient_500s_are_retried_and_counted(server, cache):
    server.script("flaky", Reply.status(500), Reply.status(503))
    client = make_client(server, cache)
    [result] = client.complete_many_sync([ask("flaky")])
    assert result.text == "echo: flaky"
    assert result.attempts == 3
    assert client.stats.retries == 2
    assert server.status_counts[500] == server.status_counts[503] == 1


def test_persistent_500_gives_an_error_code_and_the_batch_continues(server, cache):
    server.script("broken", then=Reply.status(500, "model crashed"))
    client = make_client(server, cache, max_retries=2)
    results = client.complete_many_sync([ask("fine 1"), ask("broken"), ask("fine 2")])
    assert [r.error for r in results] == [None, "http_500", None]
    failed = results[1]
    assert failed.text is None
    assert failed.attempts == 3  # first try + max_retries
    assert server.base_url in failed.detail
    assert "model crashed" in failed.raw
    assert client.stats.errors == {"http_500": 1}
    # Errors are not cached: the next run asks again (and only for that one).
    rerun = make_client(server, cache, max_retries=0)
    assert [r.cached for r in rerun.complete_many_sync([ask("fine 1"), ask("broken"), ask("fine 2")])] == [
        True,
        False,
        True,
    ]
    assert rerun.stats.calls == 1


def test_429_waits_what_retry_after_asks(server, cache):
    server.script("busy", Reply.status(429, retry_after_ms=150))
    client = make_client(server, cache)  # backoff alone would wait at most 10 ms
    [result] = client.complete_many_sync([ask("busy")])
    assert result.ok
    assert server.status_counts[429] == 1
    assert server.request_times[1] - server.request_times[0] >= 0.15


def test_a_hanging_server_gives_timeout_not_unavailable(server, cache):
    server.script("slow", then=Reply.hang(10))
    client = make_client(server, cache, timeout_s=0.3, max_retries=1)
    started = time.monotonic()
    [result] = client.complete_many_sync([ask("slow")])
    assert result.error == "timeout"
    assert result.attempts == 2
    assert "0.3 s" in result.detail
    # The bound is the feature: two 0.3 s attempts end long before the 10 s hang. 10x their sum, for a busy machine.
    assert time.monotonic() - started < 10 * 2 * 0.3


def test_garbage_body_is_a_bad_response_with_the_raw_text_kept(server, cache):
    server.script("junk", Reply.garbage("<html>proxy error</html>"))
    client = make_client(server, cache)
    [result, good] = client.complete_many_sync([ask("junk"), ask("fine")])
    assert (result.error, result.raw, result.attempts) == ("bad_response", "<html>proxy error</html>", 1)
    assert good.ok
    assert len(cache) == 1  # only the good answer is cached


@pytest.mark.parametrize(
    ("body", "why"),
    [
        # JSON, but not a chat completion.
        ('{"status": "ok"}', "KeyError"),
        # No choices at all.
        ('{"choices": []}', "IndexError"),
        # A completion whose content is null (tool-call style answer we did not ask for).
        ('{"choices": [{"message": {"role": "assistant", "content": null}}]}', "without text content"),
    ],
)
def test_completion_shaped_garbage_is_a_bad_response(server, cache, body, why):
    server.script("odd", Reply.garbage(body))
    [result] = make_client(server, cache).complete_many_sync([ask("odd")])
    assert result.error == "bad_response"
    assert why in result.detail


def test_dropped_connection_is_retried(server, cache):
    server.script("drop", Reply.close())
    [result] = make_client(server, cache).complete_many_sync([ask("drop")])
    assert result.ok and result.attempts == 2


def test_one_persistently_dropped_request_does_not_stop_the_batch(server, cache):
    server.script("drop", then=Reply.close())
    client = make_client(server, cache, max_concurrency=2, max_retries=1)
    results = client.complete_many_sync([ask("drop"), ask("a"), ask("b"), ask("c")])
    assert [r.error for r in results] == ["connection_error", None, None, None]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_refused_connection_raises_endpoint_unavailable_naming_the_url(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    config = EndpointConfig(base_url=url, model="m", max_concurrency=2, **FAST)
    client = LLMClient(config, LLMCache(tmp_path / "c"), environ={})
    with pytest.raises(EndpointUnavailable, match="Is the server running") as info:
        client.complete_many_sync([ask(f"q{i}") for i in range(5)])
    assert url in str(info.value)
    assert "connection_refused" in str(info.value)
    assert isinstance(info.value, ConnectionError)
    # It stops after one wave of max_concurrency failures instead of trying all five (the third was in flight).
    assert client.stats.calls <= 3


@pytest.mark.parametrize(
    ("status", "fix"),
    [
        # A wrong key: every request would be refused.
        (401, "check that $FAKE_KEY holds a valid key"),
        # A key without access to the model.
        (403, "allowed to use this model"),
        # A wrong URL or model name.
        (404, "serves model 'fake-model'"),
    ],
)
def test_client_errors_fail_fast_without_retry(server, cache, status, fix):
    server.script("q", then=Reply.status(status))
    client = make_client(server, cache, max_concurrency=1, api_key_env="FAKE_KEY")
    with pytest.raises(EndpointRejected) as info:
        client.complete_many_sync([ask("q1"), ask("q2"), ask("q3")])
    message = str(info.value)
    assert server.base_url in message and f"answered {status}" in message and fix in message
    assert len(server.requests) == 1  # no retry, no further requests


def test_a_400_is_not_retried_and_the_batch_continues(server, cache):
    server.script("long", then=Reply.status(400, "context length exceeded"))
    client = make_client(server, cache)
    results = client.complete_many_sync([ask("too long"), ask("short")])
    assert [r.error for r in results] == ["http_400", None]
    assert results[0].attempts == 1
    assert "context length exceeded" in results[0].detail


def test_rerun_is_served_from_the_cache_and_new_requests_cost_one_call_each(server, cache):
    batch = [ask(f"q{i}") for i in range(4)]
    first = make_client(server, cache).complete_many_sync(batch)
    rerun_client = make_client(server, cache)
    rerun = rerun_client.complete_many_sync(batch)
    assert len(server.requests) == 4  # zero new calls
    assert [r.text for r in rerun] == [r.text for r in first]
    assert all(r.cached and r.attempts == 0 for r in rerun)
    assert (rerun_client.stats.hits, rerun_client.stats.calls) == (4, 0)
    grown = make_client(server, cache)
    grown.complete_many_sync([*batch, ask("q4")])
    assert (grown.stats.hits, grown.stats.calls, len(server.requests)) == (4, 1, 5)


@pytest.mark.parametrize(
    ("change", "recalls"),
    [
        # A new prompt template version must re-ask.
        ({"template_version": "t2"}, True),
        # Another model must re-ask.
        ({"model": "other-model"}, True),
        # Another temperature is another distribution.
        ({"temperature": 0.7}, True),
        # Transport settings do not change the answer: still cached.
        ({"timeout_s": 9.0, "max_concurrency": 7, "max_retries": 0}, False),
    ],
)
def test_what_invalidates_the_cache(server, cache, change, recalls):
    make_client(server, cache).complete_many_sync([ask("same")])
    settings = dict(change)
    template_version = settings.pop("template_version", "t1")
    client = make_client(server, cache, **settings)
    [result] = client.complete_many_sync([ask("same", template_version=template_version)])
    assert result.cached is not recalls
    assert len(server.requests) == (2 if recalls else 1)


def test_duplicates_in_one_batch_share_one_call(server, cache):
    client = make_client(server, cache)
    results = client.complete_many_sync([ask("dup"), ask("other"), ask("dup")])
    assert results[0] == results[2]
    assert len(server.requests) == 2
    assert (client.stats.misses, client.stats.calls) == (3, 2)


def test_an_interrupted_run_resumes_without_repeating_calls(server, cache):
    batch = [ask(f"q{i}") for i in range(6)]

    def crash_after_three(done: int, total: int) -> None:
        if done == 3:
            raise KeyboardInterrupt  # the operator pressed Ctrl-C mid-run

    with pytest.raises(KeyboardInterrupt):
        make_client(server, cache, max_concurrency=1).complete_many_sync(batch, progress=crash_after_three)
    resumed = make_client(server, cache)
    assert all(r.ok for r in resumed.complete_many_sync(batch))
    assert (resumed.stats.hits, resumed.stats.calls, len(server.requests)) == (3, 3, 6)


def test_max_calls_caps_a_run_and_keeps_what_was_made(server, cache):
    batch = [ask(f"q{i}") for i in range(5)]
    client = make_client(server, cache, max_calls=3)
    with pytest.raises(CallBudgetExceeded, match=r"needs 5 calls but max_calls=3 allowed only 3") as info:
        client.complete_many_sync(batch)
    assert "cached" in str(info.value)
    assert (len(server.requests), len(cache)) == (3, 3)
    # The budget is per client (per run): the same client has none left, a new run finishes the batch.
    with pytest.raises(CallBudgetExceeded, match="allowed only 0"):
        client.complete_many_sync(batch)
    assert all(r.ok for r in make_client(server, cache, max_calls=3).complete_many_sync(batch))
    # max_calls=0 replays from the cache only.
    assert all(r.cached for r in make_client(server, cache, max_calls=0).complete_many_sync(batch))


def test_missing_api_key_for_a_remote_endpoint_fails_before_any_call():
    config = EndpointConfig(base_url="https://llm.example.com/v1", model="m", api_key_env="SEEDWHEEL_TEST_KEY")
    with pytest.raises(MissingAPIKey, match=r"export SEEDWHEEL_TEST_KEY=") as info:
        LLMClient(config, environ={})
    assert "https://llm.example.com/v1" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_the_key_is_sent_but_never_shown(server, cache, tmp_path):
    config = EndpointConfig(base_url=server.base_url, model="fake-model", api_key_env="FAKE_KEY", **FAST)
    client = LLMClient(config, cache, environ={"FAKE_KEY": "sk-secret-123"})
    client.complete_many_sync([ask("hi")])
    assert server.authorizations == ["Bearer sk-secret-123"]
    assert "sk-secret" not in repr(client) + repr(config)
    stored = b"".join(path.read_bytes() for path in (tmp_path / "llm_cache").iterdir())  # the database and its WAL
    assert b"sk-secret" not in stored


def test_concurrency_is_bounded(cache):
    with FakeOpenAIServer(latency_s=0.05) as slow:
        client = make_client(slow, cache, max_concurrency=4)
        client.complete_many_sync([ask(f"q{i}") for i in range(20)])
        assert slow.max_in_flight == 4


def test_response_format_seed_and_sample_are_sent(server, cache):
    schema = {"title": "Judge verdict", "type": "object", "properties": {"score": {"type": "integer"}}}
    client = make_client(server, cache, seed=7)
    client.complete_many_sync([ask("judge", response_format=schema), ask("judge", sample=2, params={"top_p": 0.9})])
    # The two requests run concurrently: tell them apart by seed (7 + sample), not by arrival order.
    first, second = sorted(server.requests, key=lambda body: body["seed"])
    assert first["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Judge_verdict", "schema": schema},
    }
    assert (first["seed"], second["seed"], second["top_p"]) == (7, 9, 0.9)


def test_sync_wrapper_works_inside_a_running_event_loop(server, cache):
    client = make_client(server, cache)

    async def notebook_cell():
        return client.complete_many_sync([ask("from a loop")])

    [result] = asyncio.run(notebook_cell())
    assert result.text == "echo: from a loop"


def test_an_empty_batch_makes_no_calls(server, cache):
    assert make_client(server, cache).complete_many_sync([]) == []
    assert server.requests == []


def test_connect_runs_once_and_only_when_the_cache_cannot_answer(server, cache):
    # A local model server is started through `connect`: a fully cached rerun must not start it.
    started = []

    def connect() -> str:
        started.append(server.base_url)
        return server.base_url

    def lazy_client() -> LLMClient:
        config = EndpointConfig(base_url="http://127.0.0.1:1/v1", **{"model": "fake-model", **FAST})
        return LLMClient(config, cache, environ={}, connect=connect)

    first = lazy_client()
    assert [r.text for r in first.complete_many_sync([ask("a"), ask("b")])] == ["echo: a", "echo: b"]
    first.complete_many_sync([ask("c")])
    assert len(started) == 1  # once per client, however many batches
    rerun = lazy_client()
    assert [r.cached for r in rerun.complete_many_sync([ask("a"), ask("b"), ask("c")])] == [True, True, True]
    assert len(started) == 1  # everything cached: nothing started
