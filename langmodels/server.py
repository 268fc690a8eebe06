"""An OpenAI-compatible chat completions server for one causal LM, with structured outputs on CPU.

`python -m langmodels.server --model DIR_OR_ID [--host H] [--port P] [--max-batch N] [--device cpu] [--threads 1]` (or
`seedwheel serve`) loads the model with transformers, *then* binds the port, so the first `GET /health` = 200
means the model is in memory (what `langmodels.launcher.ModelServer` waits for). It serves:

- `GET /health`: 200 `{"status": "ok"}`.
- `GET /v1/models`: the served model, under the name it was started with (a directory: its absolute path).
- `POST /v1/chat/completions`: `messages`, `n`, `temperature` (0 = greedy), `top_p`, `max_tokens` /
  `max_completion_tokens`, `seed`, `stop`, and `response_format` `{"type": "json_schema", "json_schema":
  {"name", "schema", "strict"?}}` or `{"type": "json_object"}`, enforced by grammar-constrained decoding
  (llguidance, see `langmodels.generation`): every choice that ends with finish reason "stop" is valid JSON for the
  schema; one cut by `max_tokens` ends with "length".
- `GET /stats`: counters of requests, batches and tokens (the largest batch shows that batching happens, and
  `cached_prompt_tokens` that shared prompt prefixes are reused; a response's `usage.prompt_tokens_details`
  says the same per request, as OpenAI's does).

Concurrent requests are batched: the handlers validate and tokenize a request, hand it to one worker thread and
await its future; the worker takes the first waiting request, gathers whatever else arrives within
`batch_window_s` (up to `max_batch` rows, a request's `n` counting as n rows), and generates them in one batch.

Errors use OpenAI's shape `{"error": {"message", "type", "param", "code"}}`: 400 for a malformed request (the
message says what is wrong and how to fix it), 404 `model_not_found` for another model's name, 500 when
generation itself fails. The server keeps serving after any of them.

Example:
    >>> serve(ServerConfig(model="/models/smollm2", port=8000))  # doctest: +SKIP
    >>> # elsewhere: openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import queue
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from core import SeedwheelError
from langmodels.generation import Engine, GenerationRequest, GenerationResult, InvalidGenerationRequest
from langmodels.launcher import served_name

logger = logging.getLogger(__name__)

MAX_STOP_STRINGS = 4  # OpenAI's limit; a client written for OpenAI sends no more
_SEED_RANGE = 1 << 63  # torch seeds are 64-bit; OpenAI's seed is any integer
_UNION_MEMBER = re.compile(r"^(str|int|float|bool|list\[.*\]|dict\[.*\]|function-.*)$")


@dataclass(frozen=True)
class ServerConfig:
    """How to serve one model; checks itself on construction.

    Args:
        model: A model directory (served under its absolute path) or a model id in the local hub cache.
        host: Address to bind.
        port: Port to bind.
        device: Where the model runs: `cpu`, `cuda`, `cuda:1`.
        threads: torch's CPU threads. One by default: intra-op threads spin while they wait for each other, so
            on cores that other work also uses (the pipeline's steps, other jobs) two threads measured 5-7x
            slower than one on 2 cores. Raise it on a machine the server has to itself.
        max_batch: Most rows (choices) generated together; also the largest `n` a request may ask for.
        batch_window_s: How long the worker waits for more requests after the first one of a batch arrives.
            Concurrent requests reach the server tens of milliseconds apart (a long judge prompt takes that to
            read and tokenize), and generation takes seconds: at 20 ms the quickstart's 8 concurrent judge
            requests split into batches of 3 and 6, at 100 ms they form one (judge_calibration 105 -> 81 s).
        default_max_tokens: Tokens per choice when a request gives no `max_tokens` (capped by the context).

    Raises:
        ValueError: A setting is out of range; the message gives the value and the allowed range.

    Example:
        >>> ServerConfig(model="/models/smollm2", port=8000).max_batch
        16
    """

    model: str
    host: str = "127.0.0.1"
    port: int = 8000
    device: str = "cpu"
    threads: int = 1
    max_batch: int = 16
    batch_window_s: float = 0.1
    default_max_tokens: int = 512

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535:
            raise ValueError(f"port ({self.port}) must be in 1..65535.")
        if min(self.threads, self.max_batch, self.default_max_tokens) < 1:
            raise ValueError(
                f"threads ({self.threads}), max_batch ({self.max_batch}) and default_max_tokens "
                f"({self.default_max_tokens}) must all be >= 1."
            )
        if self.batch_window_s < 0:
            raise ValueError(f"batch_window_s ({self.batch_window_s}) must be >= 0 (0: no waiting for company).")

    @property
    def base_url(self) -> str:
        """The OpenAI base URL clients use, e.g. `http://127.0.0.1:8000/v1`."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"


# --- the request body -------------------------------------------------------------------------------------------


class _Body(BaseModel):
    # Fields this server does not implement (user, metadata, frequency_penalty, ...) are ignored, as an
    # OpenAI-compatible server must accept what OpenAI's clients send by default.
    model_config = ConfigDict(extra="ignore")


class TextPart(_Body):
    """A text part of a message's content, as OpenAI's clients send multi-part content."""

    type: Literal["text"]
    text: str


class Message(_Body):
    """One chat message; `developer` is OpenAI's newer name for `system`."""

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]

    def plain(self) -> dict[str, str]:
        """The message as the chat template takes it: a system/user/assistant role and plain text."""
        text = self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)
        return {"role": "system" if self.role == "developer" else self.role, "content": text}


class JsonSchemaSpec(_Body):
    """`response_format.json_schema`: the schema every choice must follow (enforced whatever `strict` says)."""

    name: str = Field(min_length=1, max_length=64)
    json_schema: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextFormat(_Body):
    """`{"type": "text"}`: free text (the default)."""

    type: Literal["text"]


class JsonObjectFormat(_Body):
    """`{"type": "json_object"}`: any JSON object."""

    type: Literal["json_object"]


class JsonSchemaFormat(_Body):
    """`{"type": "json_schema", "json_schema": {...}}`: JSON that follows the schema."""

    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


ResponseFormat = Annotated[TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")]


class ChatCompletionBody(_Body):
    """The body of `POST /v1/chat/completions`; `None` means the default, as with OpenAI."""

    model: str
    messages: list[Message] = Field(min_length=1)
    n: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    response_format: ResponseFormat | None = None
    stream: bool | None = None


class APIError(SeedwheelError):
    """An error answered in OpenAI's shape.

    Args:
        status: HTTP status.
        message: What is wrong and how to fix it.
        type: OpenAI's error type (`invalid_request_error`, `server_error`).
        param: The request field at fault.
        code: A machine-readable code (`model_not_found`).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def response(self) -> JSONResponse:
        """The error as a JSON response."""
        body = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return JSONResponse({"error": body}, status_code=self.status)


def prepare(body: ChatCompletionBody, engine: Engine, config: ServerConfig) -> GenerationRequest:
    """Check a parsed body against the model and the server's limits, and tokenize it.

    Args:
        body: The parsed request body.
        engine: The model (its chat template, context length and grammar compiler).
        config: The server's limits (`max_batch`, `default_max_tokens`).

    Returns:
        The request for `Engine.generate`.

    Raises:
        InvalidGenerationRequest: The request cannot be served as given; the message says how to fix it.

    Example:
        >>> body = ChatCompletionBody(model="m", messages=[{"role": "user", "content": "hi"}])
        >>> prepare(body, engine, config).n  # doctest: +SKIP
        1
    """
    n = 1 if body.n is None else body.n
    if n > config.max_batch:
        raise InvalidGenerationRequest(
            f"n ({n}) is more than this server generates at once (--max-batch {config.max_batch}): ask for at "
            f"most {config.max_batch} choices per request, or restart the server with a larger --max-batch.",
            param="n",
        )
    if body.stream:
        raise InvalidGenerationRequest(
            "Streaming is not supported by this server: send stream=false (or leave it out).", param="stream"
        )
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    if len(stop) > MAX_STOP_STRINGS or not all(stop):
        raise InvalidGenerationRequest(
            f"stop must be up to {MAX_STOP_STRINGS} non-empty strings, got {stop!r}.", param="stop"
        )
    grammar = None
    if isinstance(body.response_format, JsonSchemaFormat):
        grammar = engine.json_grammar(body.response_format.json_schema.json_schema)
    elif isinstance(body.response_format, JsonObjectFormat):
        grammar = engine.json_grammar(None)
    prompt = engine.prompt_ids([m.plain() for m in body.messages])
    room = None if engine.context_length is None else engine.context_length - len(prompt)
    if room is not None and room < 1:
        raise InvalidGenerationRequest(
            f"The prompt has {len(prompt)} tokens and the model's context is {engine.context_length}: "
            "shorten the messages.",
            param="messages",
        )
    asked = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    if asked is not None and room is not None and asked > room:
        raise InvalidGenerationRequest(
            f"The prompt ({len(prompt)} tokens) plus max_tokens ({asked}) exceeds the model's context "
            f"({engine.context_length} tokens): ask for at most {room} tokens, or shorten the messages.",
            param="max_tokens",
        )
    limit = asked if asked is not None else min(config.default_max_tokens, room or config.default_max_tokens)
    return GenerationRequest(
        prompt_ids=prompt,
        n=n,
        max_tokens=limit,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        seed=None if body.seed is None else body.seed % _SEED_RANGE,
        stop=tuple(stop),
        grammar=grammar,
    )


def validation_message(errors: Sequence[Any]) -> tuple[str, str | None]:
    """One readable message for pydantic's (FastAPI's 422) errors, and the first field at fault.

    Args:
        errors: `RequestValidationError.errors()`.

    Returns:
        The message (each problem as `field: what is wrong (got value)`, then how to fix it) and the param.

    Example:
        >>> message, param = validation_message([{"loc": ("body", "n"), "msg": "Input should be >= 1", "input": 0}])
        >>> message.split(". See")[0], param
        ('n: Input should be >= 1 (got 0)', 'n')
    """
    problems, params = [], []
    for error in errors:
        # A union (content, stop) names its member in the path, and response_format its tag: nobody wrote those.
        parts = [str(part) for part in error.get("loc", ())]
        location = [part for part in parts if part != "body" and not _UNION_MEMBER.match(part)]
        if location[:1] == ["response_format"] and len(location) > 2:
            del location[1]
        field = ".".join(location)
        if error.get("type") == "json_invalid" or not field:
            reason = error.get("ctx", {}).get("error") or error.get("msg")
            problems.append(
                f"The request body is not a JSON object ({reason}): send Content-Type: application/json and an "
                'object such as {"model": "...", "messages": [{"role": "user", "content": "hi"}]}'
            )
            continue
        got = "" if error.get("type") == "missing" else f" (got {_short(error.get('input'))})"
        problems.append(f"{field or 'body'}: {error.get('msg')}{got}")
        params.append(field)
    fix = " See https://platform.openai.com/docs/api-reference/chat/create for the request format."
    return "; ".join(problems) + "." + fix, (params[0] if params else None) or None


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- batching ---------------------------------------------------------------------------------------------------


@dataclass
class ServerStats:
    """What the worker has generated so far (`GET /stats`)."""

    requests: int = 0
    batches: int = 0
    rows: int = 0
    largest_batch_requests: int = 0
    largest_batch_rows: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0  # prompt tokens read from the prefix cache instead of prefilled
    completion_tokens: int = 0
    generation_s: float = 0.0
    failed_batches: int = 0


@dataclass
class _Job:
    request: GenerationRequest
    future: concurrent.futures.Future[GenerationResult]


class Batcher:
    """Gathers concurrent requests into batches and generates them on one worker thread.

    Args:
        engine: The model; only the worker thread generates with it.
        max_rows: Most rows per batch (requests whose `n` would overflow it wait for the next batch).
        window_s: After the first request of a batch arrives, how long to wait for more.

    Example:
        >>> with Batcher(engine, max_rows=16, window_s=0.02) as batcher:  # doctest: +SKIP
        ...     result = batcher.submit(request).result()
    """

    def __init__(self, engine: Engine, *, max_rows: int, window_s: float) -> None:
        self.engine = engine
        self.max_rows = max_rows
        self.window_s = window_s
        self.stats = ServerStats()
        self._lock = threading.Lock()
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    def submit(self, request: GenerationRequest) -> concurrent.futures.Future[GenerationResult]:
        """Queue a request; the future resolves with its result, or the error that failed its batch."""
        if request.n > self.max_rows:
            raise ValueError(f"n ({request.n}) is more than a batch holds ({self.max_rows}).")
        job = _Job(request, concurrent.futures.Future())
        self._queue.put(job)
        return job.future

    def snapshot(self) -> dict[str, Any]:
        """The counters, read consistently."""
        with self._lock:
            return dataclasses.asdict(self.stats)

    def __enter__(self) -> Batcher:
        self._thread = threading.Thread(target=self._run, name="generation-worker", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._queue.put(None)
        if self._thread is not None:
            # A batch in progress is not interrupted; the thread is a daemon, so a long one cannot hold up exit.
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        waiting: deque[_Job] = deque()
        while True:
            if not waiting:
                first = self._queue.get()
                if first is None:
                    return
                waiting.append(first)
            if not self._gather(waiting):
                return
            batch: list[_Job] = []
            while waiting and sum(j.request.n for j in batch) + waiting[0].request.n <= self.max_rows:
                job = waiting.popleft()
                if job.future.set_running_or_notify_cancel():  # False: its client went away
                    batch.append(job)
            if batch:
                self._generate(batch)

    def _gather(self, waiting: deque[_Job]) -> bool:
        """Wait up to the window for more requests while the batch has room; False when told to stop."""
        deadline = time.monotonic() + self.window_s
        while sum(j.request.n for j in waiting) < self.max_rows:
            try:
                job = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return True
            if job is None:
                for pending in waiting:
                    pending.future.cancel()
                return False
            waiting.append(job)
        return True

    def _generate(self, batch: list[_Job]) -> None:
        started = time.perf_counter()
        try:
            results = self.engine.generate([job.request for job in batch])
        except Exception as exc:  # one bad batch must not stop the worker: its requests get the error
            logger.exception("Generation failed for a batch of %d requests.", len(batch))
            with self._lock:
                self.stats.failed_batches += 1
            for job in batch:
                job.future.set_exception(exc)
            return
        elapsed = time.perf_counter() - started
        rows = sum(job.request.n for job in batch)
        tokens = sum(result.completion_tokens for result in results)
        with self._lock:
            stats = self.stats
            stats.requests += len(batch)
            stats.batches += 1
            stats.rows += rows
            stats.largest_batch_requests = max(stats.largest_batch_requests, len(batch))
            stats.largest_batch_rows = max(stats.largest_batch_rows, rows)
            stats.prompt_tokens += sum(result.prompt_tokens for result in results)
            stats.cached_prompt_tokens += sum(result.cached_tokens for result in results)
            stats.completion_tokens += tokens
            stats.generation_s += elapsed
        logger.info(
            "batch: %d requests, %d rows, %d tokens in %.2f s (%.1f tokens/s)",
            len(batch),
            rows,
            tokens,
            elapsed,
            tokens / elapsed if elapsed else 0.0,
        )
        for job, result in zip(batch, results, strict=True):
            job.future.set_result(result)


# --- the app ----------------------------------------------------------------------------------------------------


def create_app(engine: Engine, config: ServerConfig) -> FastAPI:
    """The FastAPI app serving `engine` under `served_name(config.model)`; its lifespan runs the batch worker.

    Args:
        engine: The loaded model.
        config: Name and limits.

    Returns:
        The app, for `uvicorn.run` or `fastapi.testclient.TestClient`.

    Example:
        >>> with TestClient(create_app(engine, ServerConfig(model=path))) as client:  # doctest: +SKIP
        ...     client.get("/v1/models").json()["data"][0]["id"]
    """
    name = served_name(config.model)
    created = int(time.time())
    batcher = Batcher(engine, max_rows=config.max_batch, window_s=config.batch_window_s)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        with batcher:
            yield

    app = FastAPI(title="seedwheel model server", lifespan=lifespan)
    app.state.batcher = batcher

    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(InvalidGenerationRequest)
    async def invalid_request(_: Request, exc: InvalidGenerationRequest) -> JSONResponse:
        return APIError(400, str(exc), param=exc.param).response()

    @app.exception_handler(RequestValidationError)
    async def malformed_body(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = validation_message(exc.errors())
        return APIError(400, message, param=param).response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        hint = {404: f"{request.url.path} is not served here: the API is under /v1 (see GET /v1/models)."}
        return APIError(exc.status_code, hint.get(exc.status_code, str(exc.detail))).response()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        return batcher.snapshot()

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": name, "object": "model", "created": created, "owned_by": "local"}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionBody) -> dict[str, Any]:
        if body.model != name:
            raise APIError(
                404,
                f"The model {body.model!r} is not served here; this server serves {name!r} "
                "(GET /v1/models lists it): send that name as `model`.",
                param="model",
                code="model_not_found",
            )
        # Templating, tokenizing and compiling a schema take milliseconds to seconds: off the event loop.
        request = await run_in_threadpool(prepare, body, engine, config)
        try:
            result = await asyncio.wrap_future(batcher.submit(request))
        except InvalidGenerationRequest:
            raise
        except Exception as exc:
            raise APIError(500, f"Generation failed: {exc}", type="server_error") from exc
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": name,
            "choices": [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": c.text},
                    "finish_reason": c.finish_reason,
                    "logprobs": None,
                }
                for i, c in enumerate(result.completions)
            ],
            "usage": {
                "prompt_tokens": result.prompt_tokens,
                "completion_tokens": result.completion_tokens,
                "total_tokens": result.prompt_tokens + result.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": result.cached_tokens},
            },
        }

    return app


def serve(config: ServerConfig, *, on_loaded: Callable[[str, str], None] | None = None) -> None:
    """Load the model, then serve it until interrupted (Ctrl-C or SIGTERM).

    Args:
        config: What to serve and where.
        on_loaded: Called with the base URL and the served model name once the model is loaded, just before
            the port is bound (a command line prints them).

    Example:
        >>> serve(ServerConfig(model="/models/smollm2"), on_loaded=lambda url, name: None)  # doctest: +SKIP
    """
    import torch
    import uvicorn

    torch.set_num_threads(config.threads)
    started = time.perf_counter()
    engine = Engine.load(served_name(config.model), device=config.device)
    logger.info("Loaded %s on %s in %.1f s.", config.model, config.device, time.perf_counter() - started)
    app = create_app(engine, config)
    if on_loaded is not None:
        on_loaded(config.base_url, served_name(config.model))
    uvicorn.run(app, host=config.host, port=config.port, log_level="info")


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m langmodels.server --model DIR_OR_ID ...`: what `langmodels.launcher.ModelServer` starts."""
    defaults = ServerConfig(model="")
    parser = argparse.ArgumentParser(prog="python -m langmodels.server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="Model directory or model id in the local hub cache.")
    parser.add_argument("--host", default=defaults.host)
    parser.add_argument("--port", type=int, default=defaults.port)
    parser.add_argument("--max-batch", type=int, default=defaults.max_batch, help="Most rows generated together.")
    parser.add_argument("--device", default=defaults.device, help="cpu, cuda, cuda:1, ...")
    parser.add_argument("--threads", type=int, default=defaults.threads, help="torch CPU threads (see ServerConfig).")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = ServerConfig(
            model=args.model,
            host=args.host,
            port=args.port,
            device=args.device,
            threads=args.threads,
            max_batch=args.max_batch,
        )
    except ValueError as exc:
        parser.error(str(exc))
    serve(config)


if __name__ == "__main__":
    main()
