"""`seedwheel reward-server`: NeMo Gym's `POST /verify`, answered by seedwheel's verifier registry.

A NeMo Gym resources server gets the row's fields with the policy's `response` (an OpenAI Responses API object)
and answers `{"reward": float, ...}`; this one answers the same request with the verdict of `validators.verify`,
so a rollout scored here gets the score `seedwheel verify` gives the same completion:

    POST /verify  {"responses_create_params": {...}, "response": {"output": [...]}, "verifier": {...}, ...}
    200           {...the request..., "reward": 1.0, "passed": true, "reason": "ok", "verifier": "tool_call"}

The verifier comes from, in order: the row's seedwheel `verifier` spec (what `seedwheel export --format
nemo-gym` writes), its `task_id` looked up in the `--tasks` file, or NeMo Gym's own gold fields read as `seedwheel
seeds import --from nemo-gym` reads them (`interop.nemo_gym.row_verifier`). The response becomes a completion
through `interop.nemo_gym.completion_from_response`. Code and SQL verifiers run model output in the sandbox, as
they do everywhere (the registry's verifiers); this server runs nothing else.

A request that cannot be scored is answered with a 4xx and one line, `{"error": "<reason>; <fix>"}`: 400 for a
body that is not a JSON object or lacks its response, 404 for another path, 411 without a length, 413 over
`MAX_BODY_BYTES`, 422 for a row whose verifier cannot be found or whose spec is invalid. A verifier that raises on
one response is a verdict, reward 0 and reason `verifier_error: ...`, as in `seedwheel verify`; never a traceback.

Why the standard library's `ThreadingHTTPServer` and not fastapi + uvicorn: one endpoint with a JSON body needs
neither routing nor async, and the verifiers are synchronous (CPU work, or a sandbox subprocess to wait on), so a
thread per connection is what an async server would hand them to anyway. It imports nothing heavy (a start
takes well under a second, so a test or a NeMo Gym config starts it cheaply), and stopping it is `shutdown()`
from a signal handler, with no second signal-handling layer to reconcile with `core.signals`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

from core import SeedwheelError, loopback
from core.loopback import ConfiguredServer, QuietHandler
from interop.nemo_gym import DEFAULT_ANSWER_VERIFIER, NemoGymRowError, completion_from_response, row_verifier
from validators.registry import VerifyContext, spec_problems, verify

logger = logging.getLogger(__name__)

VERIFY_PATH = "/verify"
# A rollout's response with long reasoning is tens of KiB; this bounds what one request may make the server hold.
MAX_BODY_BYTES = 16 * 1024 * 1024


class RewardRequestError(SeedwheelError, ValueError):
    """A verify request that cannot be scored; `status` is the HTTP status it is answered with."""

    def __init__(self, status: HTTPStatus, message: str, *, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.status = status


@dataclass(frozen=True)
class RewardServerConfig:
    """Where the server listens and what it scores with.

    Attributes:
        host: the address to bind (loopback by default: the verify endpoint has no authentication).
        port: the port; 0 picks a free one (the bound URL is passed to `on_ready`).
        tasks: task records by task id, for requests that name a `task_id` and carry no verifier spec.
        answer_verifier: the verifier of NeMo Gym rows with an `expected_answer`.
        context: where verifier fixtures (SQLite files) resolve.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    tasks: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    answer_verifier: str = DEFAULT_ANSWER_VERIFIER
    context: VerifyContext = field(default_factory=VerifyContext)


def score_request(body: Any, config: RewardServerConfig) -> dict[str, Any]:
    """The answer to one verify request body: the request, with `reward`, `passed`, `reason` and `verifier`.

    Raises:
        RewardRequestError: the body cannot be scored (its status and reason say why).

    Example:
        >>> body = {"response": {"output": [{"type": "message", "role": "assistant",
        ...          "content": [{"type": "output_text", "text": "#### 4"}]}]},
        ...         "verifier": {"name": "numeric_answer", "params": {"answer": 4}}}
        >>> score_request(body, RewardServerConfig())["reward"]
        1.0
    """
    if not isinstance(body, dict):
        raise RewardRequestError(HTTPStatus.BAD_REQUEST, "the body is not a JSON object", hint="send the verify row")
    if not isinstance(body.get("response"), Mapping):
        raise RewardRequestError(
            HTTPStatus.BAD_REQUEST, "no response object", hint="send the policy's Responses API response as response"
        )
    spec = _spec(body, config)
    problems = spec_problems(spec, config.context)
    if problems:
        raise RewardRequestError(HTTPStatus.UNPROCESSABLE_ENTITY, f"bad verifier spec: {'; '.join(problems)}")
    try:
        completion = completion_from_response(body["response"])
    except NemoGymRowError as exc:
        raise RewardRequestError(HTTPStatus.BAD_REQUEST, str(exc)) from None
    try:
        verdict = verify({"verifier": spec}, completion, context=config.context)
        score, passed, reason = verdict.score, verdict.passed, verdict.reason
    except Exception as exc:  # one broken verifier call is this response's verdict, never a dead server
        logger.warning("verifier %s raised %s: %s", spec.get("name"), type(exc).__name__, exc)
        score, passed, reason = 0.0, False, f"verifier_error: {type(exc).__name__}: {exc}"
    return {**body, "reward": float(score), "passed": passed, "reason": reason, "verifier": spec}


def _spec(body: Mapping[str, Any], config: RewardServerConfig) -> dict[str, Any]:
    if not isinstance(body.get("verifier"), Mapping) and isinstance(body.get("task_id"), str):
        task = config.tasks.get(body["task_id"])
        if task is None:
            where = f"the {len(config.tasks)} tasks given with --tasks" if config.tasks else "no --tasks file"
            raise RewardRequestError(
                HTTPStatus.UNPROCESSABLE_ENTITY,
                f"task_id {body['task_id']} is not among {where}",
                hint="start the server with --tasks FILE holding that task, or send its verifier spec",
            )
        return dict(task["verifier"])
    try:
        spec = row_verifier(body, config.answer_verifier)
    except NemoGymRowError as exc:
        raise RewardRequestError(HTTPStatus.UNPROCESSABLE_ENTITY, str(exc)) from None
    if not isinstance(spec.get("name"), str) or not isinstance(spec.get("params", {}), Mapping):
        raise RewardRequestError(
            HTTPStatus.UNPROCESSABLE_ENTITY,
            "the verifier spec is not {name, params}",
            hint='send e.g. {"name": "numeric_answer", "params": {"answer": 4}}',
        )
    return spec


class _Handler(QuietHandler):
    server: ConfiguredServer[RewardServerConfig]
    protocol_version = "HTTP/1.1"  # keep-alive: NeMo Gym sends many requests over one connection

    def do_POST(self) -> None:
        try:
            if self.path.split("?", 1)[0] != VERIFY_PATH:
                raise RewardRequestError(HTTPStatus.NOT_FOUND, f"no endpoint {self.path}", hint=f"POST {VERIFY_PATH}")
            answer = score_request(self._body(), self.server.config)
        except RewardRequestError as exc:
            self._send(exc.status, {"error": str(exc)})
            return
        self._send(HTTPStatus.OK, answer)

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] in ("/", "/health"):
            self._send(HTTPStatus.OK, {"status": "ok", "verify": VERIFY_PATH})
        else:
            self._send(HTTPStatus.NOT_FOUND, {"error": f"no endpoint {self.path}; POST {VERIFY_PATH}"})

    def _body(self) -> Any:
        length_header = self.headers.get("Content-Length")
        if length_header is None:
            raise RewardRequestError(HTTPStatus.LENGTH_REQUIRED, "no Content-Length", hint="send the body's length")
        try:
            length = int(length_header)
        except ValueError:
            raise RewardRequestError(
                HTTPStatus.BAD_REQUEST, f"Content-Length {length_header!r} is not a number"
            ) from None
        if length > MAX_BODY_BYTES:
            self.close_connection = True  # the unread body must not be taken for the next request
            raise RewardRequestError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"a body of {length} bytes, over {MAX_BODY_BYTES}"
            )
        raw = self.rfile.read(length)
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RewardRequestError(HTTPStatus.BAD_REQUEST, f"the body is not UTF-8 JSON ({exc})") from None

    def _send(self, status: HTTPStatus, payload: Mapping[str, Any]) -> None:
        self.send_body(status, json.dumps(payload, ensure_ascii=False).encode("utf-8"), "application/json")


def serve(config: RewardServerConfig, *, on_ready: Callable[[str], None] | None = None) -> None:
    """Answer verify requests until SIGTERM or SIGINT (Ctrl-C), then return once the server is closed.

    Call it from the main thread (the signal handlers live there); the handlers it sets are restored on return.

    Args:
        config: where to listen and what to score with.
        on_ready: called with the base URL (`http://127.0.0.1:PORT`) once the port is bound.

    Raises:
        RewardServerError: the address cannot be bound (in use, or not this machine's).
    """

    def ready(server: ConfiguredServer[RewardServerConfig]) -> None:
        if on_ready is not None:
            on_ready(server.url)
        logger.info("seedwheel reward server at %s%s", server.url, VERIFY_PATH)

    loopback.serve(config, _Handler, "reward server", RewardServerError, ready)


class RewardServerError(SeedwheelError, OSError):
    """The reward server cannot start (its address cannot be bound); the message says what to change."""


def load_task_index(path: Path | None, context: VerifyContext) -> dict[str, dict[str, Any]]:
    """Task records by id from a tasks file, as `seedwheel verify` reads one (`validators.offline_verify.load_tasks`);
    empty without a path."""
    if path is None:
        return {}
    from validators.offline_verify import load_tasks

    return load_tasks(path, context=context)
