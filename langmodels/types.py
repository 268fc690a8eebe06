"""The LLM client's records: endpoint config, request, result, run statistics, and the errors it raises."""

from __future__ import annotations

import copy
import ipaddress
import json
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any
from urllib.parse import urlsplit

import jsonschema

from core import SeedwheelError

# Per-request overrides a ChatRequest may give; anything else is a typo or a param this client does not send.
PARAM_NAMES = ("temperature", "max_tokens", "seed", "top_p", "stop")
_PARAM_SET = frozenset(PARAM_NAMES)
# Endpoint-level failures: the request never reached a working server. Timeouts are not among them (a slow
# server is up), nor are HTTP errors (the server answered).
CONNECTION_ERRORS = frozenset({"connection_refused", "connection_failed", "connection_error"})
# Loopback servers (tests, `seedwheel serve`, a local vLLM) need no key; OpenAI's client insists on one.
LOOPBACK_DUMMY_KEY = "sk-no-key-required"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class EndpointConfigError(SeedwheelError, ValueError):
    """An `EndpointConfig` (or `Endpoint`) with an impossible value; the message gives the value and the fix."""


class MissingAPIKey(SeedwheelError, ValueError):
    """The endpoint is not on this machine and the environment variable meant to hold its key is unset."""


class CallBudgetExceeded(SeedwheelError, ValueError):
    """A batch needed more endpoint calls than `max_calls` allows; the calls made are cached."""


class EndpointRejected(SeedwheelError, ValueError):
    """The endpoint refused the client itself (401/403/404): every request would fail the same way."""


class EndpointUnavailable(SeedwheelError, ConnectionError):
    """Requests could not reach the endpoint at all (refused, unreachable, dropped), even after retries."""


def is_loopback_url(url: str) -> bool:
    """Whether the URL's host is this machine (`localhost`, `127.0.0.0/8`, `::1`).

    Example:
        >>> is_loopback_url("http://127.0.0.1:8000/v1"), is_loopback_url("https://api.openai.com/v1")
        (True, False)
    """
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class EndpointConfig:
    """Where and how to call an OpenAI-compatible chat endpoint (OpenAI, vLLM, `seedwheel serve`).

    The API key itself is never a field: `api_key_env` names the environment variable that holds it, read
    when an `LLMClient` is built, so configs can be logged, compared and stored without leaking secrets.

    Args:
        base_url: the API root, ending in `/v1` for most servers (`http://127.0.0.1:8000/v1`).
        model: the model name the server expects (for `seedwheel serve`, the served directory's absolute path).
        api_key_env: name of the environment variable holding the key. Loopback URLs may leave it unset.
        max_concurrency: requests in flight at once.
        timeout_s: seconds one HTTP attempt may take.
        max_retries: extra attempts for transient failures (429, 408/409, 5xx, timeouts, connection errors).
        max_calls: cap on requests sent to the endpoint by one client (cache hits are free); None: no cap,
            0: replay from the cache only.
        temperature, max_tokens, seed: default generation params (a request may override them).
        backoff_base_s, backoff_max_s: exponential backoff with full jitter between retries.
        retry_after_max_s: the longest server-requested `Retry-After` the client honours.
        cache_endpoint: the endpoint's identity in cache keys; None derives it from `base_url` (see
            `endpoint_id`). Set it to share a cache between URLs that serve the same model.

    Example:
        >>> EndpointConfig(base_url="http://127.0.0.1:8000/v1", model="tiny").endpoint_id
        'http://loopback/v1'
    """

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    max_concurrency: int = 8
    timeout_s: float = 60.0
    max_retries: int = 4
    max_calls: int | None = None
    temperature: float = 0.0
    max_tokens: int = 512
    seed: int | None = None
    backoff_base_s: float = 0.5
    backoff_max_s: float = 20.0
    retry_after_max_s: float = 60.0
    cache_endpoint: str | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EndpointConfigError(
                f"base_url ({self.base_url!r}) must be an http(s) URL with a host, "
                "e.g. 'http://127.0.0.1:8000/v1' or 'https://api.openai.com/v1'"
            )
        if not self.model.strip():
            raise EndpointConfigError("model is empty: give the model name the endpoint serves (see its /v1/models)")
        if not _ENV_NAME.match(self.api_key_env):
            # A key pasted here by mistake must not end up in an error message either.
            raise EndpointConfigError(
                "api_key_env must be the NAME of an environment variable (e.g. 'OPENAI_API_KEY'), not the key; "
                "export the key in that variable"
            )
        _check(self.max_concurrency >= 1, f"max_concurrency ({self.max_concurrency}) must be >= 1")
        _check(self.timeout_s > 0, f"timeout_s ({self.timeout_s}) must be > 0 seconds")
        _check(self.max_retries >= 0, f"max_retries ({self.max_retries}) must be >= 0 (0 disables retries)")
        _check(
            self.max_calls is None or self.max_calls >= 0,
            f"max_calls ({self.max_calls}) must be >= 0 (0 replays from the cache only) or None for no cap",
        )
        _check(0 <= self.temperature <= 2, f"temperature ({self.temperature}) must be between 0 and 2")
        _check(self.max_tokens >= 1, f"max_tokens ({self.max_tokens}) must be >= 1")
        _check(
            0 <= self.backoff_base_s <= self.backoff_max_s,
            f"backoff_base_s ({self.backoff_base_s}) must be >= 0 and <= backoff_max_s ({self.backoff_max_s})",
        )
        _check(self.retry_after_max_s >= 0, f"retry_after_max_s ({self.retry_after_max_s}) must be >= 0")

    @cached_property
    def is_loopback(self) -> bool:
        """Whether the endpoint runs on this machine (then a missing API key is fine)."""
        return is_loopback_url(self.base_url)

    @cached_property  # part of every cache key: computed once, not per request
    def endpoint_id(self) -> str:
        """The endpoint part of cache keys: `cache_endpoint`, or the normalised base URL.

        Scheme, lowercased host, port and path; a loopback host and its port become `loopback`, because
        local servers get a new port every run and the model name already says what is served there.
        """
        if self.cache_endpoint is not None:
            return self.cache_endpoint
        parts = urlsplit(self.base_url)
        host = "loopback" if self.is_loopback else (parts.hostname or "").lower()
        port = f":{parts.port}" if parts.port and not self.is_loopback else ""
        return f"{parts.scheme}://{host}{port}{parts.path.rstrip('/')}"

    def generation_params(self) -> dict[str, Any]:
        """The default generation params sent with every request (None values left out)."""
        params = {"temperature": self.temperature, "max_tokens": self.max_tokens, "seed": self.seed}
        return {k: v for k, v in params.items() if v is not None}


def resolve_api_key(config: EndpointConfig, environ: Mapping[str, str] | None = None) -> str:
    """The API key for `config`, read from `environ` (default: the process environment).

    Args:
        config: the endpoint.
        environ: where to look up `config.api_key_env`.

    Returns:
        The key; for a loopback endpoint without one, a dummy (local servers ignore it).

    Raises:
        MissingAPIKey: a remote endpoint and the variable is unset or empty.

    Example:
        >>> resolve_api_key(EndpointConfig(base_url="http://localhost:8000/v1", model="m"), environ={})
        'sk-no-key-required'
    """
    env = os.environ if environ is None else environ
    key = env.get(config.api_key_env, "").strip()
    if key:
        return key
    if config.is_loopback:
        return LOOPBACK_DUMMY_KEY
    raise MissingAPIKey(
        f"endpoint {config.base_url} is not on this machine and needs an API key, but the environment variable "
        f"{config.api_key_env} is unset or empty: export {config.api_key_env}=<your key>, or set api_key_env to "
        "the variable that holds it"
    )


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion to make.

    Args:
        messages: chat messages `[{"role": ..., "content": ...}]`, sent as given.
        template_version: version of the prompt template that built the messages; bump it to re-call.
        response_format: a JSON Schema the answer must follow. Sent as OpenAI's
            `{"type": "json_schema", ...}` (`seedwheel serve` and vLLM enforce it; other servers may ignore it,
            and an answer cut by `max_tokens` is incomplete, so check answers with `parse_json_response` anyway).
        params: per-request overrides of the config's generation params (`temperature`, `max_tokens`, `seed`,
            `top_p`, `stop`).
        sample: distinguishes repeated samples of the same prompt (part of the cache key; with a `seed`, the
            seed sent is `seed + sample` so the samples differ).

    Example:
        >>> ChatRequest([{"role": "user", "content": "2+2?"}], template_version="rewrite-v1").sample
        0
    """

    messages: Sequence[Mapping[str, Any]]
    template_version: str
    response_format: Mapping[str, Any] | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    sample: int = 0

    def __post_init__(self) -> None:
        if not self.messages:
            raise ValueError("messages is empty: give at least one {'role': 'user', 'content': ...} message")
        for i, message in enumerate(self.messages):
            # `type(...) is dict` first: the ABC check alone costs ~0.8 us, paid by every message of 100k requests.
            is_mapping = type(message) is dict or isinstance(message, Mapping)
            if not is_mapping or "role" not in message or "content" not in message:
                raise ValueError(f"messages[{i}] must be a mapping with 'role' and 'content', got {message!r:.80}")
        if not self.template_version:
            raise ValueError("template_version is empty: name the prompt template's version, e.g. 'rewrite-v1'")
        if not _PARAM_SET.issuperset(self.params):
            unknown = sorted(set(self.params) - _PARAM_SET)
            raise ValueError(f"unknown params {unknown}: allowed overrides are {list(PARAM_NAMES)}")
        if self.sample < 0:
            raise ValueError(f"sample ({self.sample}) must be >= 0")
        if self.response_format is not None:
            try:
                schema_json = shared_json(self.response_format)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"response_format must be plain JSON data: {exc}") from exc
            problem = _schema_problem(schema_json)
            if problem is not None:
                raise ValueError(
                    f"response_format is not a valid JSON Schema ({problem}); give the schema itself, "
                    "e.g. {'type': 'object', 'properties': {...}}, not OpenAI's wrapper"
                )


# `validators.tasks.canonical_json` as one encoder object: json.dumps with non-default options builds a new
# encoder on each call, which costs more than encoding a small value.
canonical_encode = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


class SharedJSON:
    """Canonical JSON of the mappings many requests share (a batch's `response_format`), encoded once per object.

    Encoding a judge's ~0.5 KB schema with sorted keys takes ~15 us, more than the rest of a request's cache key,
    and every request of a batch carries the same schema object. An entry is reused only for the very object it
    was made for, while that object still equals the deep copy taken then, so a schema edited in place is
    encoded again rather than keyed stale. (Equality is Python's: an in-place edit from `1` to `1.0` keeps the
    old text, and both mean the same schema.)

    Args:
        max_entries: objects remembered at once; the memo is emptied when it is full.

    Example:
        >>> shared = SharedJSON()
        >>> schema = {"type": "object", "title": "t"}
        >>> shared(schema)
        '{"title":"t","type":"object"}'
        >>> schema["title"] = "u"; shared(schema)
        '{"title":"u","type":"object"}'
    """

    def __init__(self, max_entries: int = 64) -> None:
        self.max_entries = max_entries
        self._entries: dict[int, tuple[Mapping[str, Any], Mapping[str, Any], str]] = {}

    def __call__(self, value: Mapping[str, Any]) -> str:
        """The canonical JSON of `value` (`validators.tasks.canonical_json`'s format).

        Raises:
            TypeError, ValueError: `value` is not plain JSON data.
        """
        entry = self._entries.get(id(value))
        if entry is not None and entry[0] is value and entry[1] == value:
            return entry[2]
        text = canonical_encode(value)
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        # The entry holds `value` itself, so its id cannot be reused by another object while the entry lives.
        self._entries[id(value)] = (value, copy.deepcopy(value), text)
        return text


shared_json = SharedJSON()


@lru_cache(maxsize=256)
def _schema_problem(schema_json: str) -> str | None:
    # Checking a schema against its metaschema takes ~5 ms; a batch sends one schema with thousands of requests,
    # so each distinct schema (keyed by its sorted JSON) is checked once per process.
    schema = json.loads(schema_json)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        return exc.message
    return None


@dataclass(frozen=True)
class ChatResult:
    """The outcome of one request: text, or an error code, never both.

    Attributes:
        key: the request's cache key.
        text: the assistant's answer (may be empty), or None when `error` is set.
        error: None, or `timeout`, `http_<status>`, `connection_refused`, `connection_failed`,
            `connection_error` (dropped mid-request) or `bad_response` (a 200 that is not a chat completion).
        detail: a sentence saying what happened and where, for logs.
        raw: the response body as received (for audit: garbage stays visible), or None if none came.
        tokens_in, tokens_out: usage the server reported (0 when it reported none).
        cached: answered from the cache without a call.
        attempts: HTTP attempts made (0 when cached).
        finish_reason: the server's finish reason (`stop`, `length`, ...).
    """

    key: str
    text: str | None
    error: str | None = None
    detail: str | None = None
    raw: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cached: bool = False
    attempts: int = 0
    finish_reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class LLMStats:
    """Counters of one client over its lifetime (one Dagster run, one CLI invocation).

    `hits` + `misses` = requests seen; `calls` = requests sent (in-batch duplicates share one call);
    `attempts` - `calls` = retries; `errors` counts final error codes.
    """

    hits: int = 0
    misses: int = 0
    calls: int = 0
    attempts: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def retries(self) -> int:
        return self.attempts - self.calls

    def as_dict(self) -> dict[str, Any]:
        """Flat numbers for logs and Dagster metadata (`errors/<code>` per error code).

        Example:
            >>> LLMStats(hits=3, misses=1, calls=1, attempts=2).as_dict()["retries"]
            1
        """
        flat: dict[str, Any] = {
            "hits": self.hits,
            "misses": self.misses,
            "calls": self.calls,
            "attempts": self.attempts,
            "retries": self.retries,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
        }
        flat.update({f"errors/{code}": n for code, n in sorted(self.errors.items())})
        return flat


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise EndpointConfigError(message)
