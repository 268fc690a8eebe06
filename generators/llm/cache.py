"""A content-addressed, on-disk cache of successful chat completions (SQLite in WAL mode).

The key is the SHA-256 of the canonical JSON of everything that decides an answer:

    {"format": 1, "endpoint": config.endpoint_id, "model": ..., "template_version": ...,
     "params": effective generation params, "messages": [...], "response_format": schema or null,
     "sample": n}

- `endpoint` is in the key: the same model name on two servers (a quantised vLLM copy, another provider) can
  answer differently, and the judge must not reuse a verdict from a different endpoint. Loopback URLs collapse
  to `http://loopback/<path>` because local servers get a new port every run; `cache_endpoint` overrides it.
- Never in the key: the API key, timeouts, retries, concurrency (they do not change the answer).
- Params are the config's defaults merged with the request's overrides, None values dropped, so adding a new
  optional param later does not invalidate existing entries.

Only successful answers are stored: errors are retried on the next run. Rows are inserted with
`INSERT OR IGNORE` (first answer wins), one small transaction each, so a crash loses at most the answer in
flight and two processes can share the file (WAL lets readers run beside the single writer; `busy_timeout`
makes writers wait their turn instead of failing).
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generators.llm.types import ChatRequest, EndpointConfig
from validators.tasks import canonical_json

KEY_FORMAT = 1
DB_NAME = "llm_cache.sqlite3"
# SQLite's default limit on bound variables is 32766 since 3.32; 500 stays far below it on any build.
_LOOKUP_CHUNK = 500
_SELECT = "SELECT key, text, tokens_in, tokens_out, finish_reason, raw FROM responses"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    text TEXT NOT NULL,
    finish_reason TEXT,
    tokens_in INTEGER NOT NULL,
    tokens_out INTEGER NOT NULL,
    raw TEXT,
    request TEXT NOT NULL,
    created_at REAL NOT NULL
)
"""


def request_payload(config: EndpointConfig, request: ChatRequest) -> dict[str, Any]:
    """The keyed description of a request: what the endpoint is asked, minus transport settings.

    Example:
        >>> config = EndpointConfig(base_url="http://127.0.0.1:8000/v1", model="tiny")
        >>> request = ChatRequest([{"role": "user", "content": "hi"}], template_version="t1")
        >>> request_payload(config, request)["params"]
        {'max_tokens': 512, 'temperature': 0.0}
    """
    params = {**config.generation_params(), **request.params}
    if request.sample and params.get("seed") is not None:
        params["seed"] = params["seed"] + request.sample
    return {
        "format": KEY_FORMAT,
        "endpoint": config.endpoint_id,
        "model": config.model,
        "template_version": request.template_version,
        "params": {k: v for k, v in sorted(params.items()) if v is not None},
        "messages": [dict(m) for m in request.messages],
        "response_format": dict(request.response_format) if request.response_format is not None else None,
        "sample": request.sample,
    }


def payload_key(payload: Mapping[str, Any]) -> str:
    """SHA-256 hex of the payload's canonical JSON."""
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


def cache_key(config: EndpointConfig, request: ChatRequest) -> str:
    """The cache key of a request to an endpoint (64 hex characters; stable across machines and runs).

    Example:
        >>> config = EndpointConfig(base_url="http://127.0.0.1:8000/v1", model="tiny")
        >>> len(cache_key(config, ChatRequest([{"role": "user", "content": "hi"}], template_version="t1")))
        64
    """
    return payload_key(request_payload(config, request))


@dataclass(frozen=True)
class CachedResponse:
    """A stored answer."""

    text: str
    tokens_in: int = 0
    tokens_out: int = 0
    finish_reason: str | None = None
    raw: str | None = None


class LLMCache:
    """Successful chat completions on disk, by cache key; safe to share between threads and processes.

    Args:
        folder: a local directory (created if missing); the database is `<folder>/llm_cache.sqlite3`. The
            pipeline passes `<storage root>/llm_cache/`. SQLite needs a local filesystem: with an object-store
            storage root, give a local folder here.

    Example:
        >>> import tempfile
        >>> with LLMCache(tempfile.mkdtemp()) as cache:
        ...     cache.put("k", CachedResponse("hello"), request={})
        ...     cache.get_many(["k", "other"])["k"].text
        'hello'
    """

    def __init__(self, folder: str | Path) -> None:
        if "://" in str(folder):
            raise ValueError(f"LLMCache needs a local folder, got {folder!r}: give a path on this machine")
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / DB_NAME
        # One connection shared under a lock: the client may call from an event loop on a helper thread.
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout = 60000")
        self._db.execute("PRAGMA journal_mode = WAL")
        # NORMAL is durable against application crashes in WAL mode; only a power cut may drop the last
        # commits, which for a cache only means a few repeated calls.
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.execute(_SCHEMA)

    def get_many(self, keys: Iterable[str]) -> dict[str, CachedResponse]:
        """The stored answers among `keys` (missing keys are absent from the result).

        Args:
            keys: cache keys; duplicates are fine.

        Returns:
            `{key: CachedResponse}` for the keys found.
        """
        unique = list(dict.fromkeys(keys))
        found: dict[str, CachedResponse] = {}
        with self._lock:
            for i in range(0, len(unique), _LOOKUP_CHUNK):
                chunk = unique[i : i + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))  # placeholders only: keys are bound, never spliced
                rows = self._db.execute(f"{_SELECT} WHERE key IN ({marks})", chunk)
                for key, text, tokens_in, tokens_out, finish_reason, raw in rows:
                    found[key] = CachedResponse(text, tokens_in, tokens_out, finish_reason, raw)
        return found

    def get(self, key: str) -> CachedResponse | None:
        """The stored answer for one key, or None."""
        return self.get_many([key]).get(key)

    def put(self, key: str, response: CachedResponse, request: Mapping[str, Any]) -> None:
        """Store an answer (a no-op when the key is already stored: the first answer wins).

        Args:
            key: the cache key.
            response: the answer.
            request: the keyed payload (`request_payload`), stored beside the answer so the cache can be audited.
        """
        self.put_many([(key, response, request)])

    def put_many(self, items: Iterable[tuple[str, CachedResponse, Mapping[str, Any]]]) -> None:
        """Store several answers in one transaction (all or none)."""
        now = time.time()
        rows = [
            (key, r.text, r.finish_reason, r.tokens_in, r.tokens_out, r.raw, canonical_json(request), now)
            for key, r, request in items
        ]
        with self._lock:
            # BEGIN IMMEDIATE takes the write lock up front, so a busy database makes us wait, not fail midway.
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    "INSERT OR IGNORE INTO responses "
                    "(key, text, finish_reason, tokens_in, tokens_out, raw, request, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> LLMCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LLMCache({str(self.folder)!r})"
