"""The LLM cache: what the key covers, storage round trips, batch lookups, two processes at once."""

import copy
import json
import subprocess
import sys
import threading

import pytest

from core.database import DatabaseUnavailable
from langmodels import CachedResponse, ChatRequest, EndpointConfig, LLMCache, cache_key, request_payload
from langmodels.cache import DB_NAME, cache_keys
from tests.paths import REPO
from tests.services import free_port, fresh_database

BASE = {"base_url": "http://127.0.0.1:8000/v1", "model": "tiny"}
MESSAGES = [{"role": "system", "content": "Rewrite the task."}, {"role": "user", "content": "2+2?"}]


def key_of(config_changes: dict | None = None, **request_changes) -> str:
    config = EndpointConfig(**{**BASE, **(config_changes or {})})
    request = ChatRequest(**{"messages": MESSAGES, "template_version": "rewrite-v1", **request_changes})
    return cache_key(config, request)


def test_key_is_stable_across_versions_of_the_code():
    # A golden value: if this changes, every existing cache is silently invalidated. Bump KEY_FORMAT instead.
    # (Format 1, the canonical JSON of the whole payload, gave 06dfd10e...; its entries now miss.)
    assert key_of() == "cfaa7f4dca173755051c602fb44f309040dd1f0351e6044010351a886c86ad12"


@pytest.mark.parametrize(
    ("config_changes", "request_changes", "same"),
    [
        # A local server gets a new port every run: still the same endpoint.
        ({"base_url": "http://127.0.0.1:9123/v1"}, {}, True),
        # localhost is the same machine as 127.0.0.1.
        ({"base_url": "http://localhost:8000/v1/"}, {}, True),
        # Transport settings and where the key lives do not change answers.
        ({"timeout_s": 5, "max_retries": 0, "max_concurrency": 64, "api_key_env": "OTHER", "max_calls": 3}, {}, True),
        # Explicit defaults equal to the config's are the same request.
        ({}, {"params": {"temperature": 0.0, "max_tokens": 512}}, True),
        # Another (remote) endpoint may serve another build of the model.
        ({"base_url": "https://llm.example.com/v1"}, {}, False),
        # Another model.
        ({"model": "tiny-2"}, {}, False),
        # Another prompt template version.
        ({}, {"template_version": "rewrite-v2"}, False),
        # Other generation params, from the config or from the request.
        ({"temperature": 0.7}, {}, False),
        ({}, {"params": {"max_tokens": 64}}, False),
        ({"seed": 1}, {}, False),
        # Another message.
        ({}, {"messages": [*MESSAGES[:1], {"role": "user", "content": "2+3?"}]}, False),
        # A structured-output schema changes what is asked.
        ({}, {"response_format": {"type": "object"}}, False),
        # Another sample of the same prompt.
        ({}, {"sample": 1}, False),
        # Text moved across a message boundary: per-message digests keep the boundary.
        (
            {},
            {"messages": [{"role": "system", "content": "Rewrite the task.2"}, {"role": "user", "content": "+2?"}]},
            False,
        ),
        # Text moved from the role into the content.
        ({}, {"messages": [MESSAGES[0], {"role": "use", "content": "r2+2?"}]}, False),
        # A message with more than role and content (a name, tool calls) is keyed by all of its fields.
        ({}, {"messages": [MESSAGES[0], {**MESSAGES[1], "name": "alice"}]}, False),
    ],
)
def test_what_the_key_covers(config_changes, request_changes, same):
    assert (key_of(config_changes, **request_changes) == key_of()) is same


def test_batch_keys_equal_one_by_one_keys():
    # cache_keys hashes the part requests share once; each key must still be that request's own.
    config = EndpointConfig(**BASE, seed=3)
    schema, params = {"type": "object"}, {"temperature": 0.5}
    requests = [
        ChatRequest(MESSAGES, "t", response_format=schema, params=params),  # these three share params and schema
        ChatRequest([*MESSAGES[:1], {"role": "user", "content": "3+3?"}], "t", response_format=schema, params=params),
        ChatRequest(MESSAGES, "t", response_format=schema, params=params, sample=1),  # another sample
        ChatRequest(MESSAGES, "t", response_format={"type": "object"}, params={"temperature": 0.5}),  # equal copies
        ChatRequest(MESSAGES, "t2", params={"temperature": 0.9}),
    ]
    keys = cache_keys(config, iter(requests))
    assert keys == [cache_key(config, r) for r in requests]
    assert len(set(keys)) == 4 and keys[0] == keys[3]  # equal content, other objects: the same key


def test_a_schema_edited_in_place_is_keyed_by_its_new_content():
    # Requests share one schema object whose JSON is remembered; an in-place edit must not reuse the old text.
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    before = key_of(response_format=schema)
    assert key_of(response_format=schema) == before
    schema["properties"]["answer"]["type"] = "string"
    assert key_of(response_format=schema) != before
    assert key_of(response_format=schema) == key_of(response_format=copy.deepcopy(schema))


def test_two_remote_urls_can_share_a_cache_by_name():
    shared = {"cache_endpoint": "vllm-qwen-7b"}
    a = key_of({"base_url": "https://a.example.com/v1", **shared})
    b = key_of({"base_url": "https://b.example.com/v1", **shared})
    assert a == b


def test_the_payload_is_readable_and_holds_no_secrets():
    config = EndpointConfig(**BASE, api_key_env="MY_KEY", seed=3)
    payload = request_payload(config, ChatRequest(MESSAGES, template_version="rewrite-v1", sample=2))
    assert payload["endpoint"] == "http://loopback/v1"
    assert payload["params"] == {"max_tokens": 512, "seed": 5, "temperature": 0.0}  # seed + sample
    assert "MY_KEY" not in str(payload)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def location(request, tmp_path) -> str:
    """Where a cache lives: a local folder (SQLite), or a database of its own on a real PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "cache")
    return fresh_database(request.getfixturevalue("postgres_url"))


def test_round_trip_and_first_answer_wins(location):
    with LLMCache(location) as cache:
        cache.put("k1", CachedResponse("first", 3, 4, "stop", '{"raw": 1}'), request={"messages": []})
        cache.put("k1", CachedResponse("second"), request={})
        assert cache.get("k1") == CachedResponse("first", 3, 4, "stop", '{"raw": 1}')
        assert cache.get("missing") is None
        assert len(cache) == 1
    # It is stored: a new instance sees it.
    with LLMCache(location) as reopened:
        assert reopened.get("k1").text == "first"


def test_sqlite_keeps_one_file_in_the_folder(tmp_path):
    with LLMCache(tmp_path / "cache") as cache:
        cache.put("k1", CachedResponse("first"), request={})
    assert (tmp_path / "cache" / DB_NAME).exists()


SCHEMA_REQUEST = {"template_version": "j", "response_format": {"type": "object", "required": ["verdict"]}}


def test_requests_are_kept_for_audit_with_each_part_stored_once(location):
    system = {"role": "system", "content": "You grade tasks. " * 300}  # a judge's long shared prompt
    config = EndpointConfig(**BASE)
    requests = [ChatRequest([system, {"role": "user", "content": f"task {i}"}], **SCHEMA_REQUEST) for i in range(50)]
    keys, payloads = cache_keys(config, requests), [request_payload(config, r) for r in requests]
    with LLMCache(location) as cache:
        answers = [(k, CachedResponse(f"verdict {i}"), p) for i, (k, p) in enumerate(zip(keys, payloads, strict=True))]
        cache.put_many(answers)
        # Each request reads back whole, in order; the system prompt and the schema are stored once, not 50 times.
        assert all(cache.request(k) == p for k, p in zip(keys, payloads, strict=True))
        assert cache.request("missing") is None
        [(parts,)] = cache._store.query("SELECT COUNT(*) FROM parts")
        [(stored,)] = cache._store.query("SELECT SUM(LENGTH(request)) FROM responses")
    assert parts == 52
    assert stored < 50 * 400 < 50 * len(system["content"])


def test_requests_stored_whole_by_an_earlier_version_still_read(tmp_path):
    payload = {"format": 2, "messages": [{"role": "user", "content": "hi"}], "response_format": None}
    with LLMCache(tmp_path / "cache") as cache:
        cache._store.db.execute(  # a row as the cache wrote it before messages had their own table
            "INSERT INTO responses (key, text, tokens_in, tokens_out, request, created_at) VALUES (?, ?, 0, 0, ?, 0)",
            ("old", "hello", json.dumps(payload)),
        )
        assert cache.request("old") == payload and cache.get("old").text == "hello"


def test_an_object_store_url_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="local folder"):
        LLMCache("s3://bucket/llm_cache")


def test_batch_lookups_span_many_chunks(location):
    # More keys than one SQL statement binds (their speed is measured in bench/bench_llm_client.py).
    n = 20_000
    with LLMCache(location) as cache:
        cache.put_many((f"key{i:06d}", CachedResponse(f"answer {i}"), {}) for i in range(n))
        found = cache.get_many([f"key{i:06d}" for i in range(0, 2 * n, 2)])  # half present, half missing
    assert len(found) == n // 2
    assert found["key000010"].text == "answer 10" and "key000011" not in found


WRITER = """
import sys
from langmodels.cache import CachedResponse, LLMCache
cache = LLMCache(sys.argv[1])
start = int(sys.argv[2])
for i in range(start, start + 300):
    cache.put(f"key{i}", CachedResponse(f"answer {i}"), request={"i": i})
"""


def test_two_processes_can_write_at_once(location):
    # Overlapping ranges: both processes insert keys 200..299, one wins each, none fails or duplicates. Neither
    # finds the tables made: both create them.
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, location, str(start)], cwd=REPO, stderr=subprocess.PIPE)
        for start in (0, 200)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
    with LLMCache(location) as cache:
        assert len(cache) == 500
        found = cache.get_many(f"key{i}" for i in range(500))
        assert all(found[f"key{i}"].text == f"answer {i}" for i in range(500))


def open_together(url: str, openers: int) -> list[Exception]:
    """Open `openers` caches on `url` from threads released at once; the errors they raised."""
    barrier, errors = threading.Barrier(openers), []

    def open_cache() -> None:
        barrier.wait()
        try:
            LLMCache(url).close()
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_cache) for _ in range(openers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_workers_creating_the_postgres_tables_at_once_all_succeed(postgres_url):
    # Without the advisory lock, concurrent CREATE TABLE IF NOT EXISTS fails in PostgreSQL's catalogue
    # (duplicate key in pg_type_typname_nsp_index): eight openers released together hit it reliably.
    for _ in range(3):
        assert open_together(fresh_database(postgres_url), 8) == []


def test_an_unreachable_postgres_names_the_url_without_its_password_and_the_fix():
    url = f"postgresql://seedwheel:hunter2@127.0.0.1:{free_port()}/cache"
    with pytest.raises(DatabaseUnavailable, match=r"seedwheel:\*\*\*@127\.0\.0\.1.*cannot be reached") as caught:
        LLMCache(url)
    assert "hunter2" not in str(caught.value) and "SEEDWHEEL_DATABASE_URL" in caught.value.hint
