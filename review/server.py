"""`seedwheel review`: the review page, served on loopback from the standard library.

One page (`page.html`: plain HTML and a little vanilla JavaScript, nothing fetched from elsewhere, so it works
offline) with three tabs: **Rewards** (the sampled outputs, agree or disagree with the verifier), **Judge**
(calibration items and real verdicts, accept or reject the task) and **Review queue** (complete a failure's seed
stub). Every label is written at once into its reviewer's file under the seeds folder; the numbers on the page
(labels, agreement per family and verifier, kappa between reviewers) are computed from those files after each one.

    GET  /                the page
    GET  /api/state?reviewer=NAME    outputs, judge items, queue items, numbers, and NAME's labels
    POST /api/reward      {reviewer, id, agree, reason}
    POST /api/judge       {reviewer, id, accept, reason}
    POST /api/queue       {failure_id, seed}   -> {ok, path} or {ok: false, problems}

Why the standard library's `ThreadingHTTPServer` (as `seedwheel reward-server`): five routes and JSON bodies need
no framework, it starts in well under a second, and it stops on SIGTERM or Ctrl-C through `core.signals`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from core import SeedwheelError, loopback
from core.loopback import ConfiguredServer, QuietHandler
from review.judging import hand_written_agreement, judge_items, judge_label, save_judge_label
from review.labels import check_reviewer, load_labels, pairwise_agreement
from review.queue import complete_item, open_items
from review.rewards import reviewed_agreement, reward_label, save_reward_label
from review.sampling import read_outputs
from validators.registry import VerifyContext

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024


class ReviewRequestError(SeedwheelError, ValueError):
    """A request the page cannot act on; answered with `status` and one line."""

    def __init__(self, message: str, *, status: HTTPStatus = HTTPStatus.BAD_REQUEST, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.status = status


class ReviewServerError(SeedwheelError, OSError):
    """The review server cannot start (its address cannot be bound)."""


@dataclass
class ReviewConfig:
    """What the page reviews and where it listens.

    Args:
        home: the storage root (a local folder): the sampled outputs, `review_queue`, the judge's tables.
        seeds_folder: where the labels and completed seeds are written.
        host, port: where to listen (loopback by default; port 0: any free one).
        context: where verifier fixtures resolve.
        judge_model: the judge model named in judge labels.
    """

    home: Path
    seeds_folder: Path
    host: str = "127.0.0.1"
    port: int = 8765
    context: VerifyContext = field(default_factory=VerifyContext)
    judge_model: str = ""


def state(config: ReviewConfig, reviewer: str) -> dict[str, Any]:
    """Everything the page shows, for one reviewer."""
    rewards = {x["id"]: x for x in load_labels(config.seeds_folder, "reward").get(reviewer, [])}
    judged = {x["id"]: x for x in load_labels(config.seeds_folder, "judge").get(reviewer, [])}
    _, table = reviewed_agreement(config.seeds_folder, config.context)
    pairs = [
        *pairwise_agreement(load_labels(config.seeds_folder, "reward")),
        *pairwise_agreement(load_labels(config.seeds_folder, "judge")),
        *hand_written_agreement(config.seeds_folder),
    ]
    outputs = [{**o, "label": _mine(rewards.get(o["id"]), "agree")} for o in read_outputs(config.home)]
    items = judge_items(config.home, config.seeds_folder)
    items = [{**i, "label": _mine(judged.get(i["id"]), "accept")} for i in items]
    queue = [_queue_view(item) for item in open_items(config.home, config.seeds_folder)]
    return {
        "reviewer": reviewer,
        "outputs": outputs,
        "judge_items": items,
        "queue": queue,
        "numbers": {
            "outputs": len(outputs),
            "reward_labelled": len(rewards),
            "judge_labelled": len(judged),
            "agreement": table,
            "kappa": [pair.line() for pair in pairs],
        },
    }


def _mine(label: Mapping[str, Any] | None, key: str) -> dict[str, Any] | None:
    if label is None:
        return None
    value = label["agree"] if key == "agree" else label["human"]["accept"]
    return {key: value, "reason": label["human"].get("reason", "")}


def _queue_view(item: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("failure_id", "origin", "family", "reason_code", "reason", "messages", "output", "error", "seed_stub")
    return {key: item.get(key) for key in keys} | {"user_correction": item.get("user_correction")}


def _find(rows: list[dict[str, Any]], key: str, value: Any, what: str) -> dict[str, Any]:
    for row in rows:
        if str(row[key]) == str(value):
            return row
    raise ReviewRequestError(f"no {what} {value!r}", status=HTTPStatus.NOT_FOUND, hint="reload the page")


def handle_post(config: ReviewConfig, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """Act on one POST: save a label or complete a queue item; the answer the page shows."""
    if path == "/api/queue":
        item = _find(open_items(config.home, config.seeds_folder), "failure_id", body.get("failure_id"), "queue item")
        done = complete_item(item, str(body.get("seed") or ""), config.seeds_folder, context=config.context)
        return {"ok": done.ok, "path": str(done.path) if done.path else None, "problems": done.problems}
    reviewer = check_reviewer(str(body.get("reviewer") or ""))
    if path == "/api/reward":
        output = _find(read_outputs(config.home), "id", body.get("id"), "output")
        save_reward_label(config.seeds_folder, reward_label(output, reviewer, bool(body.get("agree")), _reason(body)))
        return {"ok": True}
    if path == "/api/judge":
        item = _find(judge_items(config.home, config.seeds_folder), "id", body.get("id"), "judge item")
        label = judge_label(item, reviewer, bool(body.get("accept")), _reason(body), config.judge_model)
        save_judge_label(config.seeds_folder, label)
        return {"ok": True}
    raise ReviewRequestError(f"no endpoint {path}", status=HTTPStatus.NOT_FOUND)


def _reason(body: Mapping[str, Any]) -> str:
    return str(body.get("reason") or "")


class _Handler(QuietHandler):
    server: ConfiguredServer[ReviewConfig]

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        try:
            if url.path in ("/", "/index.html"):
                self._send(HTTPStatus.OK, files("review").joinpath("page.html").read_bytes(), "text/html")
            elif url.path == "/api/state":
                reviewer = check_reviewer(parse_qs(url.query).get("reviewer", [""])[0])
                self._json(HTTPStatus.OK, state(self.server.config, reviewer))
            elif url.path == "/health":
                self._json(HTTPStatus.OK, {"status": "ok"})
            else:
                raise ReviewRequestError(f"no page {url.path}", status=HTTPStatus.NOT_FOUND)
        except SeedwheelError as exc:
            self._json(getattr(exc, "status", HTTPStatus.BAD_REQUEST), {"error": str(exc)})

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                raise ReviewRequestError(f"a body of {length} bytes", status=HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
            body = json.loads(self.rfile.read(length).decode("utf-8") or "{}")
            if not isinstance(body, dict):
                raise ReviewRequestError("the body must be a JSON object")
            self._json(HTTPStatus.OK, handle_post(self.server.config, urlsplit(self.path).path, body))
        except (ValueError, UnicodeDecodeError) as exc:  # SeedwheelErrors here are ValueErrors too
            self._json(getattr(exc, "status", HTTPStatus.BAD_REQUEST), {"error": str(exc)})

    def _json(self, status: HTTPStatus, payload: Mapping[str, Any]) -> None:
        self._send(status, json.dumps(payload, ensure_ascii=False, default=str).encode("utf-8"), "application/json")

    def _send(self, status: HTTPStatus, data: bytes, content_type: str) -> None:
        self.send_body(status, data, f"{content_type}; charset=utf-8", {"Cache-Control": "no-store"})


def serve(config: ReviewConfig, *, on_ready: Callable[[str], None] | None = None) -> None:
    """Serve the review page until SIGTERM or SIGINT (Ctrl-C); call it from the main thread.

    Raises:
        ReviewServerError: the address cannot be bound.
    """
    ready = None if on_ready is None else lambda server: on_ready(server.url)
    loopback.serve(config, _Handler, "review page", ReviewServerError, ready)
