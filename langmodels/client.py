"""`LLMClient`: many chat completions against an OpenAI-compatible endpoint, cached, bounded, retried.

Retry policy (tenacity; `max_retries` extra attempts, exponential backoff with full jitter between
`backoff_base_s` and `backoff_max_s`, or the server's `Retry-After`/`Retry-After-Ms` when it sends one, capped at
`retry_after_max_s`):

| what happened                                 | retried | outcome after the last attempt                   |
| --------------------------------------------- | ------- | ------------------------------------------------ |
| 429, 408, 409, 5xx                            | yes     | result error `http_<status>`, batch continues    |
| timeout                                       | yes     | result error `timeout`, batch continues          |
| connection refused / unreachable / dropped    | yes     | result error `connection_*`; if the endpoint      |
|                                               |         | looks down (below), `EndpointUnavailable`        |
| 401, 403, 404                                 | no      | `EndpointRejected` at once (every request would  |
|                                               |         | fail the same way: key, URL or model is wrong)   |
| other 4xx (400 context too long, 422, ...)    | no      | result error `http_<status>`, batch continues    |
| 200 that is not a chat completion             | no      | result error `bad_response`, raw body kept       |

"Looks down": `min(requests to call, max_concurrency)` requests in a row end with a connection-level error,
i.e. a whole wave of in-flight requests failed to reach the server even after retries. Stopping there keeps a
dead endpoint from costing `requests x retries x backoff`; answers received so far are cached, so a rerun
resumes where this one stopped.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import ssl
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import openai
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_random_exponential
from tenacity.wait import wait_base

from langmodels.cache import CachedResponse, LLMCache, cache_keys, request_payload
from langmodels.types import (
    CONNECTION_ERRORS,
    CallBudgetExceeded,
    ChatRequest,
    ChatResult,
    EndpointConfig,
    EndpointRejected,
    EndpointUnavailable,
    LLMStats,
    resolve_api_key,
)

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]

# Statuses that say the client itself is wrong (key, URL, model): retrying or continuing cannot help.
_REJECTING = frozenset({401, 403, 404})
_RETRIED_STATUSES = frozenset({408, 409, 429})


class LLMClient:
    """Chat completions for many requests at once, through an on-disk cache.

    Args:
        config: the endpoint and generation defaults.
        cache: where successful answers are kept; None disables caching.
        api_key: the key itself, for callers that resolve secrets their own way (a Dagster `EnvVar`);
            None reads `config.api_key_env` now (a loopback endpoint may go without).
        environ: the environment to read the key from (default: the process environment).
        connect: called once, just before the first request that the cache cannot answer, to bring the endpoint
            up (e.g. start a local model server); it returns the base URL to use. Cache keys do not change,
            because a loopback endpoint's identity ignores its port.

    Raises:
        MissingAPIKey: a remote endpoint and no key, before any call is made.

    Example:
        >>> from tests.fake_server import FakeOpenAIServer
        >>> with FakeOpenAIServer() as server:
        ...     client = LLMClient(EndpointConfig(base_url=server.base_url, model="fake"))
        ...     [r.text for r in client.complete_many_sync([ChatRequest([{"role": "user", "content": "hi"}], "t1")])]
        ['echo: hi']
    """

    def __init__(
        self,
        config: EndpointConfig,
        cache: LLMCache | None = None,
        *,
        api_key: str | None = None,
        environ: Mapping[str, str] | None = None,
        connect: Callable[[], str] | None = None,
    ) -> None:
        self.config = config
        self.cache = cache
        self._api_key = api_key or resolve_api_key(config, environ)
        self._connect = connect
        self.stats = LLMStats()

    def __repr__(self) -> str:
        # The key stays out of reprs and logs.
        return f"LLMClient(base_url={self.config.base_url!r}, model={self.config.model!r}, cache={self.cache!r})"

    def complete_many_sync(
        self, requests: Iterable[ChatRequest], progress: Progress | None = None
    ) -> list[ChatResult]:
        """`complete_many` from synchronous code (a Dagster op, a CLI), on an event loop of its own.

        Inside an already running loop (a notebook, an async op) it runs on a helper thread, since a
        loop cannot be nested.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.complete_many(requests, progress))
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="llm-client") as pool:
            return pool.submit(asyncio.run, self.complete_many(requests, progress)).result()

    async def complete_many(
        self, requests: Iterable[ChatRequest], progress: Progress | None = None
    ) -> list[ChatResult]:
        """Answer every request: cached ones from the cache, the rest from the endpoint, `max_concurrency` at once.

        Identical requests in one batch share one call. Each answer is cached as soon as it arrives, so a
        run that crashes or is interrupted resumes without repeating calls.

        Args:
            requests: the requests; results come back in the same order.
            progress: called as `progress(done, total)` when results complete (cache hits first, in one call).

        Returns:
            One `ChatResult` per request; failures carry an error code instead of text (see the module doc).

        Raises:
            EndpointRejected: the endpoint answered 401/403/404.
            EndpointUnavailable: the endpoint could not be reached (see the module doc).
            CallBudgetExceeded: more calls were needed than `max_calls` allows; the allowed ones were made and
                cached first.

        Example:
            >>> results = await client.complete_many(requests, progress=lambda done, total: None)  # doctest: +SKIP
        """
        requests = list(requests)
        total = len(requests)
        keys = cache_keys(self.config, requests)
        results: list[ChatResult | None] = [None] * total
        found = self.cache.get_many(keys) if self.cache is not None else {}
        waiting: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            hit = found.get(key)
            if hit is not None:
                results[i] = ChatResult(
                    key,
                    hit.text,
                    raw=hit.raw,
                    tokens_in=hit.tokens_in,
                    tokens_out=hit.tokens_out,
                    cached=True,
                    finish_reason=hit.finish_reason,
                )
            else:
                waiting.setdefault(key, []).append(i)
        hits = done = total - sum(len(v) for v in waiting.values())
        self.stats.hits += hits
        self.stats.misses += total - done
        if done and progress is not None:
            progress(done, total)

        to_call = list(waiting)
        skipped = 0
        if self.config.max_calls is not None:
            allowed = max(0, self.config.max_calls - self.stats.calls)
            skipped = max(0, len(to_call) - allowed)
            to_call = to_call[:allowed]

        def deliver(key: str, result: ChatResult) -> None:
            nonlocal done
            for i in waiting[key]:
                results[i] = result
            done += len(waiting[key])
            if progress is not None:
                progress(done, total)

        started = time.monotonic()
        if to_call and self._connect is not None:
            # A local server starts only when the cache cannot answer everything: a fully cached rerun needs none.
            self.config = replace(self.config, base_url=self._connect())
            self._connect = None
        if to_call:
            jobs = [(key, requests[waiting[key][0]]) for key in to_call]
            await self._call_all(jobs, deliver)
        errors = Counter(r.error for r in results if r is not None and r.error is not None)
        logger.log(
            logging.WARNING if errors else logging.INFO,
            "LLM batch on %s: %d requests, %d cached, %d calls in %.1f s; errors: %s",
            self.config.base_url,
            total,
            hits,
            len(to_call),
            time.monotonic() - started,
            dict(errors) or "none",
        )
        if skipped:
            raise CallBudgetExceeded(
                f"this batch needs {len(to_call) + skipped} calls but max_calls={self.config.max_calls} allowed only "
                f"{len(to_call)} more ({self.stats.calls} made by this client); the {len(to_call)} answers received "
                f"are cached. Raise max_calls, or run again to continue from the cache"
            )
        return [r for r in results if r is not None]

    async def _call_all(self, jobs: list[tuple[str, ChatRequest]], deliver: Callable[[str, ChatResult], None]) -> None:
        # A fixed pool of max_concurrency workers pulling from one iterator bounds concurrency like a semaphore,
        # without creating one task per request up front (100k pending tasks cost memory and scheduling time).
        # The AsyncOpenAI client lives for one batch: its connection pool is tied to this event loop.
        watch = _OutageWatch(self.config, threshold=min(len(jobs), self.config.max_concurrency))
        queue: Iterator[tuple[str, ChatRequest]] = iter(jobs)
        http_client = openai.DefaultAsyncHttpxClient(verify=_tls_context())
        async with openai.AsyncOpenAI(
            base_url=self.config.base_url,
            api_key=self._api_key,
            timeout=self.config.timeout_s,
            max_retries=0,  # tenacity retries, with the policy in the module doc
            http_client=http_client,
        ) as client:

            async def worker() -> None:
                for key, request in queue:
                    # Built for calls only: a cached answer needs its key, not a copy of its request.
                    payload = request_payload(self.config, request)
                    result = await self._call_one(client, key, request, payload)
                    self._record(result, payload)
                    deliver(key, result)
                    watch.observe(result)

            workers = [asyncio.create_task(worker()) for _ in range(watch.threshold)]
            try:
                await asyncio.gather(*workers)
            finally:
                for task in workers:
                    task.cancel()
                await asyncio.gather(*workers, return_exceptions=True)

    async def _call_one(
        self, client: openai.AsyncOpenAI, key: str, request: ChatRequest, payload: Mapping[str, Any]
    ) -> ChatResult:
        self.stats.calls += 1
        kwargs: dict[str, Any] = {"model": self.config.model, "messages": payload["messages"], **payload["params"]}
        if request.response_format is not None:
            kwargs["response_format"] = _openai_response_format(request.response_format)
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.config.max_retries + 1),
            wait=_RetryAfterOr(
                wait_random_exponential(multiplier=self.config.backoff_base_s, max=self.config.backoff_max_s),
                cap=self.config.retry_after_max_s,
            ),
            retry=retry_if_exception(_is_transient),
            before_sleep=_log_retry,
            reraise=True,
        )
        attempts = 0
        where = f"endpoint {self.config.base_url}"
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    self.stats.attempts += 1
                    response = await client.chat.completions.with_raw_response.create(**kwargs)
        except openai.APIStatusError as exc:
            status = exc.status_code
            body = exc.response.text
            if status in _REJECTING:
                answer = f"{where} answered {status} for model {self.config.model!r}: {body[:300]}"
                raise EndpointRejected(f"{answer} - {self._fix_for(status)}") from exc
            detail = f"{where} answered {status} after {attempts} attempt(s): {body[:300]}"
            return ChatResult(key, None, f"http_{status}", detail, body, attempts=attempts)
        except openai.APITimeoutError:
            detail = f"{where} did not answer within {self.config.timeout_s} s, {attempts} attempt(s)"
            return ChatResult(key, None, "timeout", detail, attempts=attempts)
        except openai.APIConnectionError as exc:
            code = _connection_code(exc)
            detail = f"{where}: {code} after {attempts} attempt(s) ({_root_cause(exc)})"
            return ChatResult(key, None, code, detail, attempts=attempts)
        return _parse_completion(key, response.http_response.text, attempts, where)

    def _fix_for(self, status: int) -> str:
        if status == 404:
            return (
                f"check base_url (most servers want it to end in /v1) and that the server serves model "
                f"{self.config.model!r} (GET {self.config.base_url.rstrip('/')}/models lists them)"
            )
        verb = "holds a valid key" if status == 401 else "holds a key allowed to use this model"
        return f"check that ${self.config.api_key_env} {verb} for this endpoint"

    def _record(self, result: ChatResult, payload: Mapping[str, Any]) -> None:
        if result.error is not None:
            self.stats.errors[result.error] += 1
            logger.debug("LLM request %s failed: %s", result.key[:12], result.detail)
            return
        self.stats.tokens_in += result.tokens_in
        self.stats.tokens_out += result.tokens_out
        if self.cache is not None and result.text is not None:
            cached = CachedResponse(result.text, result.tokens_in, result.tokens_out, result.finish_reason, result.raw)
            # A synchronous write on the loop's thread: one small WAL commit, far shorter than a call.
            self.cache.put(result.key, cached, payload)


@cache
def _tls_context() -> ssl.SSLContext:
    # Loading the CA bundle takes ~0.1 s; done once per process instead of once per batch's HTTP client.
    return ssl.create_default_context()


@dataclass
class _OutageWatch:
    """Raises EndpointUnavailable once `threshold` requests in a row failed at the connection level."""

    config: EndpointConfig
    threshold: int
    streak: int = 0

    def observe(self, result: ChatResult) -> None:
        self.streak = self.streak + 1 if result.error in CONNECTION_ERRORS else 0
        if self.streak >= self.threshold:
            raise EndpointUnavailable(
                f"endpoint {self.config.base_url} is unavailable: {self.streak} request(s) in a row failed to "
                f"connect after {self.config.max_retries} retries each (last: {result.detail}). Is the server "
                "running? Check base_url. Answers received so far are cached; rerun to resume"
            )


class _RetryAfterOr(wait_base):
    """Wait what the server asked for (`Retry-After-Ms` / `Retry-After`, capped), else the fallback backoff."""

    def __init__(self, fallback: wait_base, cap: float) -> None:
        self.fallback = fallback
        self.cap = cap

    def __call__(self, retry_state: RetryCallState) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome is not None else None
        asked = _retry_after_s(exc.response.headers) if isinstance(exc, openai.APIStatusError) else None
        return min(asked, self.cap) if asked is not None else self.fallback(retry_state)


def _retry_after_s(headers: Mapping[str, str]) -> float | None:
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:  # the HTTP-date form
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in _RETRIED_STATUSES or exc.status_code >= 500
    # Timeouts are a subclass of connection errors in openai's hierarchy.
    return isinstance(exc, openai.APIConnectionError)


def _log_retry(retry_state: RetryCallState) -> None:
    exc = retry_state.outcome.exception() if retry_state.outcome is not None else None
    wait = retry_state.next_action.sleep if retry_state.next_action is not None else 0.0
    logger.debug("LLM attempt %d failed (%r); retrying in %.2f s", retry_state.attempt_number, exc, wait)


def _causes(exc: BaseException, implicit: bool) -> Iterator[BaseException]:
    # anyio reports a refused connection as the implicit context of its own OSError, so the code lookup needs
    # `__context__`; the message uses explicit causes only, as contexts also pick up unrelated handled errors.
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (current.__context__ if implicit else None)


def _connection_code(exc: BaseException) -> str:
    chain = list(_causes(exc, implicit=True))
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return "connection_refused"
    # A failure to connect at all (DNS, unreachable network) versus a connection that broke mid-request.
    if any(type(e).__name__ == "ConnectError" for e in chain):
        return "connection_failed"
    return "connection_error"


def _root_cause(exc: BaseException) -> str:
    for e in reversed(list(_causes(exc, implicit=False))):
        if str(e):
            return f"{type(e).__name__}: {e}"
    return type(exc).__name__


def _parse_completion(key: str, body: str, attempts: int, where: str) -> ChatResult:
    try:
        data = json.loads(body)
        choice = data["choices"][0]
        content = choice["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        detail = f"{where} answered 200 but not with a chat completion ({type(exc).__name__}: {exc}): {body[:200]!r}"
        return ChatResult(key, None, "bad_response", detail, body, attempts=attempts)
    if not isinstance(content, str):
        detail = f"{where} answered a completion without text content: {body[:200]!r}"
        return ChatResult(key, None, "bad_response", detail, body, attempts=attempts)
    usage = data.get("usage") if isinstance(data.get("usage"), Mapping) else {}
    return ChatResult(
        key,
        content,
        raw=body,
        tokens_in=_count(usage.get("prompt_tokens")),
        tokens_out=_count(usage.get("completion_tokens")),
        attempts=attempts,
        finish_reason=choice.get("finish_reason") if isinstance(choice, Mapping) else None,
    )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def _openai_response_format(schema: Mapping[str, Any]) -> dict[str, Any]:
    # OpenAI wants a name matching [a-zA-Z0-9_-]{1,64}; the schema's title is the natural one.
    title = str(schema.get("title") or "response")
    name = "".join(c if c.isalnum() or c in "_-" else "_" for c in title)[:64] or "response"
    return {"type": "json_schema", "json_schema": {"name": name, "schema": dict(schema)}}
