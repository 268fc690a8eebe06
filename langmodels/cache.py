"""A content-addressed cache of successful chat completions: SQLite in WAL mode on one machine, PostgreSQL
for a cluster's workers.

The key covers everything that decides an answer, and nothing else: the payload

    {"format": 2, "endpoint": config.endpoint_id, "model": ..., "template_version": ...,
     "params": effective generation params, "messages": [...], "response_format": schema or null,
     "sample": n}

- `endpoint` is in the key: the same model name on two servers (a quantised vLLM copy, another provider) can
  answer differently, and the judge must not reuse a verdict from a different endpoint. Loopback URLs collapse
  to `http://loopback/<path>` because local servers get a new port every run; `cache_endpoint` overrides it.
- Never in the key: the API key, timeouts, retries, concurrency (they do not change the answer).
- Params are the config's defaults merged with the request's overrides, None values dropped, so adding a new
  optional param later does not invalidate existing entries.

Key format 2 is SHA-256 over three parts: the canonical JSON of the payload without its messages and schema
(one line), the canonical JSON of the schema (one line), then a 32-byte SHA-256 per message - of
`m<len(role)>:<role><content>` for a plain `{role, content}` text message, of `j` + its canonical JSON for any
other shape. Format 1 hashed the canonical JSON of the whole payload, which for a ~6 KB judge request meant
JSON-escaping the same 4.5 KB system prompt for every task (most of a cached rerun's time); format 2 hashes
the raw text, reuses the digest of a message it has just seen (a shared system prompt), and `cache_keys` hashes
the first two lines once for all the requests of a batch that share them: ~8 us per judge request instead of
~80. Format 1 entries simply miss.

Each answer is stored with the request it answers, for audit (`LLMCache.request`). The parts requests repeat
(each message, the response schema) are stored once, by SHA-256 of their canonical JSON, in a `parts` table,
and the request row names them by digest: a judge's ~4.5 KB system prompt and ~0.5 KB schema are in every
request, and storing them in every row made 100k judge entries take ~830 MB (now ~200 MB).

Only successful answers are stored: errors are retried on the next run. Rows are inserted only when their key
is new (first answer wins), one small transaction each, so a crash loses at most the answer in flight. Two
processes can share the SQLite file (WAL lets readers run beside the single writer; `busy_timeout` makes writers
wait their turn instead of failing); a cluster's workers share a PostgreSQL database instead (`LLMCache` with a
`postgresql://` URL, the `postgres` extra), where the database orders concurrent writers.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.database import DATABASE_URL_ENV, connect, create_tables, is_postgres_url, redact_url
from langmodels.types import ChatRequest, EndpointConfig, canonical_encode, shared_json

KEY_FORMAT = 2
DB_NAME = "llm_cache.sqlite3"
# SQLite's default limit on bound variables is 32766 since 3.32; 500 stays far below it on any build.
_LOOKUP_CHUNK = 500
# Digests of recent text messages: a batch repeats its system prompt in every request, and an LRU keeps that
# one entry hot while each request's own user message passes through.
_MESSAGE_DIGESTS = 4096
# Key prefixes remembered within one `cache_keys` call.
_PREFIXES = 1024
_SELECT = "SELECT key, text, tokens_in, tokens_out, finish_reason, raw FROM responses"
# The tables, in both databases; `{seconds}` is the type of seconds since the epoch (PostgreSQL's REAL is 4 bytes,
# too few for them: it takes DOUBLE PRECISION) and `{parts_options}` SQLite's WITHOUT ROWID.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    text TEXT NOT NULL,
    finish_reason TEXT,
    tokens_in INTEGER NOT NULL,
    tokens_out INTEGER NOT NULL,
    raw TEXT,
    request TEXT NOT NULL,
    created_at {seconds} NOT NULL
);
CREATE TABLE IF NOT EXISTS parts (
    digest TEXT PRIMARY KEY,
    json TEXT NOT NULL
){parts_options};
"""
_COLUMNS = ("key", "text", "finish_reason", "tokens_in", "tokens_out", "raw", "request", "created_at")
_PARTS_COLUMNS = ("digest", "json")
# Where a request row names its messages and its schema by `parts` digest (rows written before hold them whole).
_MESSAGES, _RESPONSE_FORMAT = "message_digests", "response_format_digest"


def _head(config: EndpointConfig, request: ChatRequest) -> dict[str, Any]:
    """The payload without its messages and schema."""
    params = {**config.generation_params(), **request.params}
    if request.sample and params.get("seed") is not None:
        params["seed"] = params["seed"] + request.sample
    return {
        "format": KEY_FORMAT,
        "endpoint": config.endpoint_id,
        "model": config.model,
        "template_version": request.template_version,
        "params": {k: v for k, v in sorted(params.items()) if v is not None},
        "sample": request.sample,
    }


def request_payload(config: EndpointConfig, request: ChatRequest) -> dict[str, Any]:
    """The keyed description of a request: what the endpoint is asked, minus transport settings.

    Example:
        >>> config = EndpointConfig(base_url="http://127.0.0.1:8000/v1", model="tiny")
        >>> request = ChatRequest([{"role": "user", "content": "hi"}], template_version="t1")
        >>> request_payload(config, request)["params"]
        {'max_tokens': 512, 'temperature': 0.0}
    """
    return {
        **_head(config, request),
        "messages": [dict(m) for m in request.messages],
        "response_format": dict(request.response_format) if request.response_format is not None else None,
    }


def cache_key(config: EndpointConfig, request: ChatRequest) -> str:
    """The cache key of a request to an endpoint (64 hex characters; stable across machines and runs).

    Example:
        >>> config = EndpointConfig(base_url="http://127.0.0.1:8000/v1", model="tiny")
        >>> len(cache_key(config, ChatRequest([{"role": "user", "content": "hi"}], template_version="t1")))
        64
    """
    return cache_keys(config, [request])[0]


def cache_keys(config: EndpointConfig, requests: Iterable[ChatRequest]) -> list[str]:
    """The cache keys of many requests, each equal to its `cache_key`, with the shared part hashed once.

    Requests built from one template share their params and schema objects (`JudgePrompt` passes the same ones
    to every request): the first two lines of the key are hashed once per template version, sample and pair of
    objects, and each key continues from a copy of that hash. For a judge batch this leaves ~5 us per key,
    mostly hashing the task's own message.

    Args:
        config: the endpoint.
        requests: the requests.

    Returns:
        One key per request, in order.
    """
    requests = list(requests)  # holds every object while ids are compared: no id can be reused meanwhile
    prefixes: dict[tuple[str, int, int, int], Any] = {}
    keys = []
    for request in requests:
        shared = (request.template_version, request.sample, id(request.params), id(request.response_format))
        prefix = prefixes.get(shared)
        if prefix is None:
            if len(prefixes) >= _PREFIXES:  # nothing shared (a new params dict per request): stay bounded
                prefixes.clear()
            prefix = prefixes[shared] = _prefix(_head(config, request), request.response_format)
        keys.append(_finish(prefix.copy(), request.messages))
    return keys


def _prefix(head: Mapping[str, Any], schema: Mapping[str, Any] | None) -> Any:
    """A SHA-256 object fed with the key's first two lines: the head and the schema."""
    # Canonical JSON escapes raw newlines, so each line ends exactly where its part does, and every message
    # digest added after them is 32 bytes: distinct payloads cannot produce the same byte stream.
    schema_json = "null" if schema is None else shared_json(schema)
    return hashlib.sha256(f"{canonical_encode(head)}\n{schema_json}\n".encode())


def _finish(digest: Any, messages: Sequence[Mapping[str, Any]]) -> str:
    for message in messages:
        role, content = message["role"], message["content"]
        if len(message) == 2 and type(role) is str and type(content) is str:
            digest.update(_text_message_digest(role, content))
        else:
            digest.update(hashlib.sha256(b"j" + canonical_encode(dict(message)).encode()).digest())
    return digest.hexdigest()


@lru_cache(maxsize=_MESSAGE_DIGESTS)
def _text_message_digest(role: str, content: str) -> bytes:
    return hashlib.sha256(f"m{len(role)}:{role}{content}".encode()).digest()


@dataclass(frozen=True)
class CachedResponse:
    """A stored answer."""

    text: str
    tokens_in: int = 0
    tokens_out: int = 0
    finish_reason: str | None = None
    raw: str | None = None


class _SQLiteStore:
    """The cache's tables in one SQLite file in WAL mode (one machine; several processes may share it)."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.where = str(folder)
        self.db = sqlite3.connect(folder / DB_NAME, timeout=60.0, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA busy_timeout = 60000")
        self.db.execute("PRAGMA journal_mode = WAL")
        # NORMAL is durable against application crashes in WAL mode; only a power cut may drop the last
        # commits, which for a cache only means a few repeated calls.
        self.db.execute("PRAGMA synchronous = NORMAL")
        # Reads through a memory map skip a copy per page: a 100k-key lookup takes ~40% less CPU. Address space
        # only (pages load on demand), and writes still go through the WAL.
        self.db.execute("PRAGMA mmap_size = 1073741824")  # 1 GiB
        self.db.executescript(_SCHEMA.format(seconds="REAL", parts_options=" WITHOUT ROWID"))

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.db.execute(sql, params).fetchall()

    def insert_new(self, groups: Sequence[tuple[str, Sequence[str], list[tuple[Any, ...]]]]) -> None:
        """Insert each group's rows into its table, skipping keys already stored, all in one transaction."""
        # BEGIN IMMEDIATE takes the write lock up front, so a busy database makes us wait, not fail midway.
        self.db.execute("BEGIN IMMEDIATE")
        try:
            for table, columns, rows in groups:
                marks = ", ".join("?" * len(columns))
                self.db.executemany(f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()


class _PostgresStore:
    """The cache's tables in a PostgreSQL database: machines share it, and concurrent writers are safe by its
    guarantees (`ON CONFLICT DO NOTHING`: the first answer wins, as in SQLite)."""

    def __init__(self, url: str) -> None:
        self.where = redact_url(url)
        self.db = connect(url, what="the LLM cache")
        self.db.autocommit = False
        with self.db, self.db.cursor() as cursor:  # one process at a time: see `create_tables`
            create_tables(cursor, _SCHEMA.format(seconds="DOUBLE PRECISION", parts_options=""))

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.db, self.db.cursor() as cursor:
            cursor.execute(sql.replace("?", "%s"), tuple(params))
            return cursor.fetchall()

    def insert_new(self, groups: Sequence[tuple[str, Sequence[str], list[tuple[Any, ...]]]]) -> None:
        """Insert each group's rows into its table, skipping keys already stored, all in one transaction."""
        from psycopg2.extras import execute_values

        with self.db, self.db.cursor() as cursor:  # commits on success, rolls back on any error
            for table, columns, rows in groups:
                sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES %s ON CONFLICT DO NOTHING"
                execute_values(cursor, sql, rows, page_size=1000)

    def close(self) -> None:
        self.db.close()


class LLMCache:
    """Successful chat completions by cache key, in SQLite or PostgreSQL; safe to share between threads and
    processes (and, in PostgreSQL, machines).

    Args:
        location: a local directory (created if missing; the database is `<folder>/llm_cache.sqlite3`, and the
            pipeline passes `<storage root>/llm_cache/`), or a `postgresql://` URL: the cache a cluster's workers
            share (SQLite needs a local file system; NFS does not keep its locks).

    Raises:
        ValueError: another kind of URL (an object store cannot hold a database).
        core.database.DatabaseUnavailable: the PostgreSQL server cannot be reached, or its driver is not installed.

    Example:
        >>> import tempfile
        >>> with LLMCache(tempfile.mkdtemp()) as cache:
        ...     cache.put("k", CachedResponse("hello"), request={})
        ...     cache.get_many(["k", "other"])["k"].text
        'hello'
    """

    def __init__(self, location: str | Path) -> None:
        text = str(location)
        self._store: _SQLiteStore | _PostgresStore
        if is_postgres_url(text):
            self._store = _PostgresStore(text)
        elif "://" in text:
            raise ValueError(
                f"LLMCache needs a local folder or a postgresql:// URL, got {redact_url(text)!r}: an object store "
                f"cannot hold its database; with the storage root on one, set {DATABASE_URL_ENV} (the cache lives "
                "there then)"
            )
        else:
            self._store = _SQLiteStore(Path(location))
        # One connection shared under a lock: the client may call from an event loop on a helper thread.
        self._lock = threading.Lock()

    def get_many(self, keys: Iterable[str]) -> dict[str, CachedResponse]:
        """The stored answers among `keys` (missing keys are absent from the result).

        Args:
            keys: cache keys; duplicates are fine.

        Returns:
            `{key: CachedResponse}` for the keys found.
        """
        # In index order: neighbouring keys share b-tree pages, which makes a large lookup ~1.5x faster.
        unique = sorted(set(keys))
        found: dict[str, CachedResponse] = {}
        with self._lock:
            for i in range(0, len(unique), _LOOKUP_CHUNK):
                chunk = unique[i : i + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(chunk))  # placeholders only: keys are bound, never spliced
                for key, text, tokens_in, tokens_out, finish_reason, raw in self._store.query(
                    f"{_SELECT} WHERE key IN ({marks})", chunk
                ):
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
        rows, parts = [], {}

        def part(value: Any) -> str:
            text = canonical_encode(value)
            digest = hashlib.sha256(text.encode()).hexdigest()
            parts[digest] = text
            return digest

        for key, r, request in items:
            stored = dict(request)
            if isinstance(stored.get("messages"), list):
                stored[_MESSAGES] = [part(message) for message in stored.pop("messages")]
            if stored.get("response_format") is not None:
                stored[_RESPONSE_FORMAT] = part(stored.pop("response_format"))
            rows.append(
                (key, r.text, r.finish_reason, r.tokens_in, r.tokens_out, r.raw, canonical_encode(stored), now)
            )
        with self._lock:
            self._store.insert_new([("parts", _PARTS_COLUMNS, list(parts.items())), ("responses", _COLUMNS, rows)])

    def request(self, key: str) -> dict[str, Any] | None:
        """The request stored with an answer (`request_payload`, messages included), or None for an unknown key."""
        with self._lock:
            rows = self._store.query("SELECT request FROM responses WHERE key = ?", (key,))
            if not rows:
                return None
            request = json.loads(rows[0][0])
            digests = [
                *request.get(_MESSAGES, []),
                *([request[_RESPONSE_FORMAT]] if _RESPONSE_FORMAT in request else []),
            ]
            found: dict[str, str] = {}
            if digests:
                marks = ",".join("?" * len(digests))
                found = dict(self._store.query(f"SELECT digest, json FROM parts WHERE digest IN ({marks})", digests))
        if _MESSAGES in request:
            request["messages"] = [json.loads(found[digest]) for digest in request.pop(_MESSAGES)]
        if _RESPONSE_FORMAT in request:
            request["response_format"] = json.loads(found[request.pop(_RESPONSE_FORMAT)])
        return request

    def __len__(self) -> int:
        with self._lock:
            return self._store.query("SELECT COUNT(*) FROM responses")[0][0]

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._store.close()

    def __enter__(self) -> LLMCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LLMCache({self._store.where!r})"
