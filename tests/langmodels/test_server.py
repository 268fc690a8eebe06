"""The local model server (`langmodels.server`) and its engine (`langmodels.generation`).

In-process, on the tiny random model (fast): grammar-constrained decoding, seeds, stop strings and limits, request
validation, the batch worker. A random model that writes schema-valid JSON under the grammar, and garbage without
it, is the strongest evidence that the constraint does the work.

For real, on the bundled SmolLM2-135M-Instruct: left padding in a batch (the random model's attention hardly
depends on positions), and one server process per module, started as the pipeline starts it (`ModelServer`,
backend "seedwheel") and driven with the `openai` client and raw HTTP.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
import torch
from click.testing import CliRunner
from fastapi.testclient import TestClient

from langmodels.generation import PREFIX_BLOCK, Engine, GenerationRequest, GenerationResult, prefill_groups, sample
from langmodels.launcher import ModelServer
from langmodels.server import Batcher, ServerConfig, create_app

# Every keyword bounds its value, so a random model cannot wander until max_tokens inside the answer.
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"enum": ["Paris", "Lima", "Oslo"]},
        "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
    },
    "required": ["name", "age", "city", "tags"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "Ada is 36 and lives in Paris. Give her name, age and city as JSON."}]


def json_schema_format(schema: dict[str, Any], name: str = "person") -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


# --- the engine, in-process on the tiny random model -------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> Engine:
    return Engine.load(str(tiny_model_dir))


def texts(result: GenerationResult) -> list[str]:
    return [c.text for c in result.completions]


def test_a_random_model_writes_schema_valid_json_under_the_grammar(engine: Engine) -> None:
    prompt = engine.prompt_ids(ASK)
    free, constrained = engine.generate(
        [
            GenerationRequest(prompt, n=8, max_tokens=120, temperature=1.0, seed=1),
            GenerationRequest(
                prompt, n=8, max_tokens=120, temperature=1.0, seed=1, grammar=engine.json_grammar(PERSON)
            ),
        ]
    )
    for completion in constrained.completions:
        assert completion.finish_reason == "stop", completion
        jsonschema.validate(json.loads(completion.text), PERSON)
    # The same model without the grammar: random weights write no JSON at all.
    for text in texts(free):
        with pytest.raises(ValueError):
            json.loads(text)


def test_any_json_object_grammar_and_a_cut_at_max_tokens(engine: Engine) -> None:
    prompt = engine.prompt_ids(ASK)
    anything, cut = engine.generate(
        [
            GenerationRequest(prompt, n=16, max_tokens=40, temperature=1.0, seed=3, grammar=engine.json_grammar(None)),
            GenerationRequest(prompt, n=2, max_tokens=3, temperature=1.0, seed=3, grammar=engine.json_grammar(PERSON)),
        ]
    )
    # Random weights close an open object within 40 tokens now and then (5 of these 16): each that stopped is a
    # whole object, each that did not ran to the limit.
    stopped = [c for c in anything.completions if c.finish_reason == "stop"]
    assert stopped
    for completion in anything.completions:
        assert completion.text.startswith("{")
        if completion.finish_reason == "stop":
            assert isinstance(json.loads(completion.text), dict)
        else:
            assert (completion.finish_reason, completion.tokens) == ("length", 40)
    # Cut by max_tokens: the reason says so, and the text is an unfinished start of the only possible opening.
    assert [(c.finish_reason, c.tokens) for c in cut.completions] == [("length", 3), ("length", 3)]
    for completion in cut.completions:
        assert '{"name": "'.startswith(completion.text) or completion.text.startswith('{"name": "')
        with pytest.raises(ValueError):
            json.loads(completion.text)


@pytest.fixture(scope="module")
def real_engine(real_model_dir: Path) -> Engine:
    return Engine.load(str(real_model_dir))


@pytest.mark.slow
def test_a_prompt_decodes_the_same_alone_and_left_padded_in_a_batch(real_engine: Engine) -> None:
    # On the real model: the tiny one's random attention hardly depends on positions, so it cannot tell.
    engine = real_engine
    short = engine.prompt_ids([{"role": "user", "content": "hi"}])
    long = engine.prompt_ids([{"role": "user", "content": "How many clips did Natalia sell in April and May?"}])
    assert len(long) > len(short) + 5  # the short prompt gets real left padding
    [alone] = engine.generate([GenerationRequest(short, max_tokens=12, temperature=0)])
    long_first, batched = engine.generate(
        [
            GenerationRequest(long, n=2, max_tokens=12, temperature=0),
            GenerationRequest(short, max_tokens=12, temperature=0),
        ]
    )
    assert texts(batched) == texts(alone)
    # Short first: the prefill holds rows longest first, and the answers still come back in request order.
    short_first, long_second = engine.generate(
        [
            GenerationRequest(short, max_tokens=12, temperature=0),
            GenerationRequest(long, n=2, max_tokens=12, temperature=0),
        ]
    )
    assert texts(short_first) == texts(alone)
    assert texts(long_second) == texts(long_first)
    # And transformers' own greedy decoding of the same prompt agrees.
    assert texts(alone) == [transformers_greedy(engine, short, 12)]


def transformers_greedy(engine: Engine, prompt: list[int], max_new_tokens: int) -> str:
    """transformers' own greedy decoding of one unpadded prompt: the reference the engine must match."""
    with torch.inference_mode():
        reference = engine.model.generate(
            torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long), do_sample=False,
            max_new_tokens=max_new_tokens, pad_token_id=engine.pad_id,
        )  # fmt: skip
    expected = [t for t in reference[0, len(prompt) :].tolist() if t not in engine.stop_ids]
    return engine.tokenizer.decode(expected, skip_special_tokens=True)


@pytest.mark.slow
def test_a_shared_prompt_prefix_is_prefilled_once_and_reused_with_the_same_answers(real_engine: Engine) -> None:
    engine = Engine(real_engine.model, real_engine.tokenizer)  # an empty prefix cache of its own
    rules = " ".join(f"Rule {i}: answer in plain words, and never mention rule {i + 1}." for i in range(20))
    system = {"role": "system", "content": f"You are a terse assistant. {rules}"}
    questions = ["What colour is the sky?", "Name a fruit.", "What is two plus two?"]
    prompts = [engine.prompt_ids([system, {"role": "user", "content": q}]) for q in questions]
    assert len(prompts[0]) > 2 * PREFIX_BLOCK
    first = engine.generate([GenerationRequest(p, max_tokens=10, temperature=0) for p in prompts[:2]])
    assert [r.cached_tokens for r in first] == [0, 0]  # computed here, once for both
    [later] = engine.generate([GenerationRequest(prompts[2], max_tokens=10, temperature=0)])
    assert later.cached_tokens >= PREFIX_BLOCK and later.cached_tokens % PREFIX_BLOCK == 0
    # Prefix from the cache, padding between it and each row's own tokens: the answers are those of an
    # unshared, unpadded prefill.
    for prompt, result in zip(prompts, [*first, later], strict=True):
        assert texts(result) == [transformers_greedy(engine, prompt, 10)]


@pytest.mark.slow
def test_rows_of_very_different_lengths_are_prefilled_apart_and_joined_with_the_same_answers(
    real_engine: Engine,
) -> None:
    engine = Engine(real_engine.model, real_engine.tokenizer)
    system = {"role": "system", "content": "You are a terse assistant. " + "Answer in plain words. " * 30}
    recipe = " ".join(f"Step {i}: stir the soup and add {i} pinches of salt." for i in range(12))
    questions = [f"{recipe} How many steps are there?", "Name a fruit.", "What colour is grass?", "Say hi."]
    prompts = [engine.prompt_ids([system, {"role": "user", "content": q}]) for q in questions]
    # The rows share the system message, so their own lengths differ as their whole lengths do.
    assert len(prefill_groups([len(p) for p in prompts], engine.prefill_padding)) > 1  # the long row goes alone
    results = engine.generate(
        [GenerationRequest(p, n=2 if i == 1 else 1, max_tokens=10, temperature=0) for i, p in enumerate(prompts)]
    )
    # Each group's cache padded into one batch: every row answers as its prompt alone, unpadded.
    for prompt, result in zip(prompts, results, strict=True):
        assert set(texts(result)) == {transformers_greedy(engine, prompt, 10)}


@pytest.mark.slow
def test_decode_steps_outgrowing_their_reserved_room_still_answer_as_transformers_does(
    real_engine: Engine,
) -> None:
    # Room for 3 tokens at a time: 12 new tokens grow each layer's buffers 4 times, and rows that finish early
    # leave the batch between growths.
    engine = Engine(real_engine.model, real_engine.tokenizer, prefix_cache_entries=0, decode_room=3)
    questions = ["Name a fruit.", "Say hi.", "How many legs does a spider have? Explain in one sentence."]
    prompts = [engine.prompt_ids([{"role": "user", "content": q}]) for q in questions]
    results = engine.generate(
        [GenerationRequest(p, max_tokens=4 * i + 4, temperature=0) for i, p in enumerate(prompts)]
    )
    for i, (prompt, result) in enumerate(zip(prompts, results, strict=True)):
        assert texts(result) == [transformers_greedy(engine, prompt, 4 * i + 4)]


def test_prefill_groups_keep_rows_within_the_padding_allowance_longest_first() -> None:
    assert prefill_groups([900, 40, 880, 30, 5], 32) == [[0, 2], [1, 3], [4]]
    assert prefill_groups([7, 7, 7], 0) == [[0, 1, 2]]
    assert prefill_groups([10, 20], 100) == [[1, 0]]
    assert prefill_groups([1, 2, 3], 0) == [[2], [1], [0]]
    assert prefill_groups([1, 2, 3], None) == [[0, 1, 2]]  # one padded prefill, as the batch came


def test_a_seed_repeats_a_request_whatever_shares_its_batch(engine: Engine) -> None:
    prompt = engine.prompt_ids(ASK)
    seeded = GenerationRequest(prompt, n=3, max_tokens=10, temperature=1.0, seed=42)
    [alone] = engine.generate([seeded])
    _, batched = engine.generate([GenerationRequest(prompt, n=2, max_tokens=10, temperature=1.0), seeded])
    assert texts(batched) == texts(alone)
    assert len(set(texts(alone))) > 1  # the n rows of one request are different samples


def test_a_stop_string_cuts_the_text_before_it(engine: Engine) -> None:
    prompt = engine.prompt_ids(ASK)
    [free] = engine.generate([GenerationRequest(prompt, max_tokens=30, temperature=0)])
    text = free.completions[0].text
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    [stopped] = engine.generate([GenerationRequest(prompt, max_tokens=30, temperature=0, stop=(stop, "\x00never"))])
    assert stopped.completions[0].text == text[: text.index(stop)]
    assert stopped.completions[0].finish_reason == "stop"


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"type": "integr"}, "Invalid type"),  # a typo: llguidance names the bad type
        ({"type": "string", "pattern": "(("}, "unclosed group"),  # a regex that does not parse
        ({"properties": {"a": {"$ref": "#/defs/missing"}}}, "does not exist"),  # a dangling reference
    ],
)
def test_a_schema_llguidance_cannot_compile_is_a_request_error(engine: Engine, schema: dict, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as caught:
        engine.json_grammar(schema)
    assert caught.value.param == "response_format.json_schema.schema"


def test_sampling_follows_the_mask_temperature_and_top_p() -> None:
    logits = torch.tensor([[0.0, 3.0, 1.0], [0.0, 3.0, float("-inf")], [5.0, 4.9, 4.8]])
    generators = [torch.Generator().manual_seed(i) for i in range(3)]
    greedy = sample(logits.clone(), torch.zeros(3), torch.ones(3), generators)
    assert greedy.tolist() == [1, 1, 0]
    draws = {
        tuple(sample(logits.clone(), torch.full((3,), 2.0), torch.tensor([1.0, 1.0, 0.3]), generators).tolist())
        for _ in range(200)
    }
    assert {d[1] for d in draws} == {0, 1}  # a forbidden (-inf) token is never drawn, even when hot
    assert {d[2] for d in draws} == {0}  # top_p 0.3 keeps only the most likely of three near-equal tokens
    assert {d[0] for d in draws} == {0, 1, 2}  # T=2, top_p=1: every token can come up


# --- the app, in-process: validation and errors -------------------------------------------------------------------


@pytest.fixture(scope="module")
def app_client(engine: Engine, tiny_model_dir: Path) -> Iterator[TestClient]:
    with TestClient(create_app(engine, ServerConfig(model=str(tiny_model_dir), max_batch=4))) as client:
        yield client


def post(client: TestClient, model: str, **body: Any) -> Any:
    return client.post("/v1/chat/completions", json={"model": model, **body})


MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({}, "messages", "messages: Field required"),
        ({"messages": []}, "messages", "at least 1 item"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role", "'user'"),
        ({"messages": MESSAGES, "n": 0}, "n", "greater than or equal to 1 (got 0)"),
        ({"messages": MESSAGES, "n": 5}, "n", "at most 4 choices"),  # more than --max-batch
        ({"messages": MESSAGES, "temperature": -0.5}, "temperature", "greater than or equal to 0"),
        ({"messages": MESSAGES, "max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
        ({"messages": MESSAGES, "max_tokens": 10**6}, "max_tokens", "ask for at most"),  # past the context
        ({"messages": MESSAGES, "stop": ["", "x"]}, "stop", "non-empty strings"),
        ({"messages": MESSAGES, "stream": True}, "stream", "stream=false"),
        ({"messages": MESSAGES, "response_format": {"type": "xml"}}, "response_format", "'json_schema'"),
        (
            {"messages": MESSAGES, "response_format": {"type": "json_schema", "json_schema": {"name": "a"}}},
            "response_format.json_schema.schema",
            "Field required",
        ),
        (
            {"messages": MESSAGES, "response_format": json_schema_format({"type": "integr"})},
            "response_format.json_schema.schema",
            "Invalid type: integr",
        ),
    ],
)
def test_a_malformed_request_gets_a_400_that_names_the_field(
    app_client: TestClient, tiny_model_dir: Path, body: dict, param: str, says: str
) -> None:
    response = post(app_client, str(tiny_model_dir), **body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert says in error["message"], error["message"]


def test_a_body_that_is_not_json_gets_a_400_and_the_server_keeps_serving(
    app_client: TestClient, tiny_model_dir: Path
) -> None:
    for raw in (b"{not json", b'"a string"'):
        response = app_client.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
        assert response.status_code == 400
        assert "not a JSON object" in response.json()["error"]["message"]
    response = post(app_client, str(tiny_model_dir), messages=MESSAGES, max_tokens=2)
    assert response.status_code == 200
    assert response.json()["usage"]["prompt_tokens"] > 0


def test_another_model_name_is_model_not_found(app_client: TestClient, tiny_model_dir: Path) -> None:
    response = post(app_client, "gpt-4o", messages=MESSAGES)
    assert response.status_code == 404
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("model_not_found", "model")
    assert str(tiny_model_dir.resolve()) in error["message"]
    unknown = app_client.get("/v2/models")
    assert unknown.status_code == 404 and "/v1" in unknown.json()["error"]["message"]


# --- the batch worker, with a recording stand-in for the engine ------------------------------------------------


class RecordingEngine:
    """Answers each row with its request's first prompt token; records every batch; fails when told to."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.fail_next = False

    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        self.batches.append([r.n for r in requests])
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("out of memory")
        from langmodels.generation import Completion

        return [GenerationResult([Completion(str(r.prompt_ids[0]), "stop", 1)] * r.n, 1) for r in requests]


def test_waiting_requests_are_batched_up_to_max_rows_in_arrival_order() -> None:
    engine = RecordingEngine()
    batcher = Batcher(engine, max_rows=4, window_s=0.0)  # type: ignore[arg-type]  # a recording fake Engine
    # Queued before the worker starts, so the batches do not depend on timing.
    futures = [batcher.submit(GenerationRequest([i], n=n)) for i, n in enumerate([1, 2, 1, 3, 4])]
    with batcher:
        results = [f.result(timeout=10) for f in futures]
    assert engine.batches == [[1, 2, 1], [3], [4]]
    assert [r.completions[0].text for r in results] == ["0", "1", "2", "3", "4"]
    stats = batcher.snapshot()
    assert (stats["batches"], stats["requests"], stats["largest_batch_requests"], stats["rows"]) == (3, 5, 3, 11)


def test_a_failed_batch_fails_its_requests_and_the_worker_goes_on() -> None:
    engine = RecordingEngine()
    engine.fail_next = True
    with Batcher(engine, max_rows=8, window_s=0.0) as batcher:  # type: ignore[arg-type]  # a recording fake Engine
        with pytest.raises(RuntimeError, match="out of memory"):
            batcher.submit(GenerationRequest([7])).result(timeout=10)
        assert batcher.submit(GenerationRequest([8])).result(timeout=10).completions[0].text == "8"
    assert batcher.snapshot()["failed_batches"] == 1


# --- `seedwheel serve`, without serving --------------------------------------------------------------------------


def test_seedwheel_serve_defaults_to_the_bundled_model_in_the_models_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import langmodels.models
    import langmodels.server
    from pipeline.cli import main

    served: list[ServerConfig] = []
    monkeypatch.setenv("SEEDWHEEL_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setattr(langmodels.models, "bundled_model", lambda models_dir: Path(models_dir) / "smollm2")

    def fake_serve(config: ServerConfig, on_loaded: Any) -> None:
        served.append(config)
        on_loaded(config.base_url, config.model)

    monkeypatch.setattr(langmodels.server, "serve", fake_serve)
    result = CliRunner().invoke(main, ["serve", "--port", "8123", "--max-batch", "4"])
    assert result.exit_code == 0, result.output
    [config] = served
    assert config.model == str(tmp_path / "models" / "smollm2")  # the folder the pipeline converts it in
    assert (config.host, config.port, config.max_batch, config.device, config.threads) == (
        "127.0.0.1",
        8123,
        4,
        "cpu",
        1,
    )
    assert "http://127.0.0.1:8123/v1" in result.output and config.model in result.output


# --- for real: the bundled model behind `ModelServer` --------------------------------------------------------------


@pytest.fixture(scope="module")
def real_server(real_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    logs = tmp_path_factory.mktemp("server-logs")
    with ModelServer(real_model_dir, log_dir=logs, backend="seedwheel", startup_timeout_s=300) as server:
        yield server


@pytest.fixture(scope="module")
def real_client(real_server: ModelServer) -> Iterator[openai.OpenAI]:
    client = openai.OpenAI(base_url=real_server.base_url, api_key="unused", max_retries=0, timeout=300)
    yield client
    client.close()


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


@pytest.mark.slow
def test_real_model_json_schema_answers_all_validate(real_server: ModelServer, real_client: openai.OpenAI) -> None:
    models = real_client.models.list().data
    assert [m.id for m in models] == [real_server.model]

    reply = real_client.chat.completions.create(
        model=real_server.model,
        messages=ASK,
        n=3,
        temperature=1.0,
        max_tokens=80,
        response_format=json_schema_format(PERSON),
    )
    assert len(reply.choices) == 3 and reply.usage.completion_tokens > 0
    for choice in reply.choices:
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(choice.message.content), PERSON)

    anything = real_client.chat.completions.create(
        model=real_server.model, messages=ASK, temperature=0, max_tokens=80, response_format={"type": "json_object"}
    )
    assert isinstance(json.loads(anything.choices[0].message.content), dict)


@pytest.mark.slow
def test_real_server_answers_bad_requests_with_a_400_and_keeps_serving(
    real_server: ModelServer, real_client: openai.OpenAI
) -> None:
    with pytest.raises(openai.BadRequestError) as bad_schema:
        real_client.chat.completions.create(
            model=real_server.model,
            messages=ASK,
            response_format=json_schema_format({"type": "object", "properties": {"a": {"type": "nope"}}}),
        )
    assert "Invalid type: nope" in bad_schema.value.message and "json_object" in bad_schema.value.message

    request = urllib.request.Request(
        f"{real_server.base_url}/chat/completions", data=b'{"model": ', headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as bad_body:
        urllib.request.urlopen(request, timeout=30)
    assert bad_body.value.code == 400
    assert "not a JSON object" in json.loads(bad_body.value.read())["error"]["message"]

    good = real_client.chat.completions.create(
        model=real_server.model, messages=[{"role": "user", "content": "Say hello."}], temperature=0, max_tokens=8
    )
    assert good.choices[0].message.content and good.choices[0].finish_reason in ("stop", "length")


@pytest.mark.slow
def test_real_server_batches_concurrent_requests(real_server: ModelServer, real_client: openai.OpenAI) -> None:
    before = get_json(real_server.base_url.removesuffix("/v1") + "/stats")
    start = threading.Barrier(4)

    def ask(i: int) -> str:
        start.wait()
        reply = real_client.chat.completions.create(
            model=real_server.model,
            messages=[{"role": "user", "content": f"Count from {i} to {i + 5}."}],
            temperature=0,
            max_tokens=16,
        )
        return reply.choices[0].message.content

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(ask, range(4)))
    assert all(answers)
    after = get_json(real_server.base_url.removesuffix("/v1") + "/stats")
    assert after["requests"] - before["requests"] == 4
    # Four requests in fewer than four batches: some were generated together.
    assert after["batches"] - before["batches"] < 4 and after["largest_batch_requests"] > 1
