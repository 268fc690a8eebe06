"""Reading production failure logs (JSONL) into normalised failure records, with a reject row per bad line.

Three line shapes are accepted (the package docstring has the field table):

- **failure log** (`format: failure_log`): the native record, recognised by an `output` field;
- **chat messages** (`format: chat_messages`): `{"messages": [...]}` as chat transcripts are commonly logged; a
  trailing assistant message is what the agent produced;
- **chat completion** (`format: chat_completion`): a Chat Completions request/response pair,
  `{"request": {"model", "messages", "tools"}, "response": {"id", "created", "choices": [{"message"}]}}`.

The native optional fields (`failure_id`, `timestamp`, `source`, `family`, `error`, `user_correction`,
`expected`, `tags`, ...) are read from the top level of every shape. Other top-level fields are ignored.

Hostile input never raises: a line over `ParseLimits.max_line_bytes` is skipped without being held in memory
whole, JSON nested deeper than `max_depth` (or deep enough to exhaust the parser) is rejected, and so are
bytes that are not UTF-8, `NaN`/`Infinity` and lone surrogate escapes. The rest of the file still flows.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from core import SeedwheelError
from failures.redaction import RedactionConfig, redact_text
from validators.extract import loads_strict
from validators.pointers import json_pointer
from validators.tasks import canonical_json

FORMATS = ("failure_log", "chat_messages", "chat_completion")
RECORD_FIELDS = (
    "failure_id",
    "origin",
    "format",
    "timestamp",
    "source",
    "family",
    "messages",
    "tools",
    "output",
    "tool_results",
    "error",
    "user_correction",
    "expected",
    "tags",
    "model",
    "outcome",
)
# What came of an interaction: a verifier's verdict (`passed`, `failed`), a user's correction (`corrected`), or
# nothing known (`unknown`). A line without one is a failure: the format began as a log of failures only.
OUTCOMES = ("passed", "failed", "corrected", "unknown")
FAILED_OUTCOMES = ("failed", "corrected")
EXPECTED_FIELDS = (
    "answer",
    "tool_call",
    "output_schema",
    "output",
    "sql",
    "database",
    "ordered",
    "rows",
    "tests",
    "entry_point",
    "code",
    "episode",
)
MESSAGE_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_FAMILY = re.compile(r"^[a-z][a-z0-9_]*$")
_READ_CHUNK = 1 << 16


@dataclass(frozen=True)
class ParseLimits:
    """What one log line may hold before it is rejected.

    Args:
        max_line_bytes: longest line, in bytes of UTF-8 (without the newline).
        max_depth: deepest nesting of JSON objects and arrays.
        raw_preview_chars: how much of a rejected line its reject row keeps (after redaction).

    Raises:
        ValueError: a limit below 1; the message gives the value.

    Example:
        >>> ParseLimits(max_line_bytes=4096).max_depth
        64
    """

    max_line_bytes: int = 1 << 20
    max_depth: int = 64
    raw_preview_chars: int = 500

    def __post_init__(self) -> None:
        for name in ("max_line_bytes", "max_depth", "raw_preview_chars"):
            if getattr(self, name) < 1:
                raise ValueError(f"ParseLimits.{name} ({getattr(self, name)}) must be at least 1")


@dataclass(frozen=True)
class FailureReject:
    """A log line that could not become a failure record: where, why (a code and a sentence with the fix).

    `raw` is the start of the line after redaction and `reason` is redacted too (it quotes keys and short
    values): neither holds unredacted text.
    """

    source: str
    line: int
    reason_code: str
    reason: str
    raw: str

    @property
    def origin(self) -> str:
        """`source:line`."""
        return f"{self.source}:{self.line}"

    def __str__(self) -> str:
        return f"{self.origin}: {self.reason}"


@dataclass
class ParsedLog:
    """The outcome of `parse_failure_log`: normalised records (in line order) and reject rows."""

    records: list[dict[str, Any]] = field(default_factory=list)
    rejects: list[FailureReject] = field(default_factory=list)


class _LineError(SeedwheelError, ValueError):
    """One thing wrong with a line: a reason code, where (a JSON pointer), what, and how to fix it."""

    def __init__(self, code: str, pointer: str, message: str, fix: str):
        super().__init__(f"{message} ({pointer}) - {fix}")
        self.code = code


def parse_failure_log(
    path_or_lines: str | os.PathLike[str] | Iterable[str | bytes],
    source_name: str | None = None,
    *,
    limits: ParseLimits | None = None,
    redaction: RedactionConfig | None = None,
) -> ParsedLog:
    """Parse a JSONL failure log into normalised records; every bad line becomes a reject, none raises.

    Records are NOT redacted yet (run `redact` on each before storing them); reject rows are, since they are
    stored as they are made.

    Args:
        path_or_lines: a file path (str or PathLike), or the lines themselves (str or bytes, newlines optional).
        source_name: the name used in origins and rejects (`name:line`); the file name when None and a path
            is given, else `"<lines>"`.
        limits: line size and nesting limits; the defaults when None.
        redaction: how the raw previews in reject rows are redacted; the defaults when None.

    Returns:
        A `ParsedLog`: records with the fields `RECORD_FIELDS` (`origin` is `source:line`), and rejects.

    Raises:
        FileNotFoundError: the path does not exist (the only error: a bad line is a reject).

    Example:
        >>> log = parse_failure_log(['{"messages": [{"role": "user", "content": "2+2?"}]}', '{"messages": 5}'], "demo")
        >>> log.records[0]["format"], log.rejects[0].origin, log.rejects[0].reason_code
        ('chat_messages', 'demo:2', 'wrong_type')
    """
    limits = limits or ParseLimits()
    redaction = redaction or RedactionConfig()
    parsed = ParsedLog()
    if isinstance(path_or_lines, str | os.PathLike):
        path = Path(path_or_lines)
        source = source_name or path.name
        with path.open("rb") as handle:
            _parse_lines(_capped_lines(handle, limits.max_line_bytes), source, limits, redaction, parsed)
    else:
        source = source_name or "<lines>"
        _parse_lines(_given_lines(path_or_lines, limits.max_line_bytes), source, limits, redaction, parsed)
    return parsed


def _capped_lines(handle: IO[bytes], max_bytes: int) -> Iterator[tuple[bytes | None, int]]:
    """(line, size) per line of a binary file; line None when it is over `max_bytes` (then never held whole)."""
    while True:
        chunk = handle.readline(max_bytes + 2)  # + the newline, + 1 to see that it is too long
        if not chunk:
            return
        line = chunk.rstrip(b"\r\n")
        if len(line) <= max_bytes:
            yield line, len(line)
            continue
        size = len(line)
        while not chunk.endswith(b"\n"):
            chunk = handle.readline(_READ_CHUNK)
            if not chunk:
                break
            size += len(chunk.rstrip(b"\r\n"))
        yield None, size


def _given_lines(lines: Iterable[str | bytes], max_bytes: int) -> Iterator[tuple[bytes | str | None, int]]:
    for line in lines:
        if isinstance(line, bytes):
            line = line.rstrip(b"\r\n")
            size = len(line)
        else:
            line = line.rstrip("\r\n")
            size = len(line.encode("utf-8", "surrogatepass"))
        yield (line if size <= max_bytes else None), size


def _parse_lines(
    lines: Iterable[tuple[bytes | str | None, int]],
    source: str,
    limits: ParseLimits,
    redaction: RedactionConfig,
    parsed: ParsedLog,
) -> None:
    for number, (line, size) in enumerate(lines, start=1):
        if line is None:
            message = f"line is {size:,} bytes, over the {limits.max_line_bytes:,}-byte limit"
            reject = _LineError(
                "line_too_long", "/", message, "trim large fields (tool results, files) before logging"
            )
            parsed.rejects.append(_reject(source, number, reject, "", limits, redaction))
            continue
        text = line
        try:
            if isinstance(text, bytes):
                text = _decode(text)
            if number == 1:
                text = text.removeprefix("\ufeff")
            if not text.strip():
                continue  # blank lines are allowed between records
            parsed.records.append(_parse_line(text, f"{source}:{number}", limits))
        except _LineError as exc:
            preview = text if isinstance(text, str) else text.decode("utf-8", "replace")
            parsed.rejects.append(_reject(source, number, exc, preview, limits, redaction))


def _decode(line: bytes) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as exc:
        byte = line[exc.start : exc.start + 1].hex()
        raise _LineError(
            "not_utf8",
            "/",
            f"byte 0x{byte} at column {exc.start + 1} is not UTF-8",
            "write the log as UTF-8 (json.dumps output is ASCII-safe)",
        ) from None


def _reject(
    source: str, line: int, exc: _LineError, raw: str, limits: ParseLimits, redaction: RedactionConfig
) -> FailureReject:
    # Redact the whole line, then cut: a cut first could leave half a secret (`ann.lee@exam`) that no rule finds.
    preview = redact_text(raw, redaction)[0][: limits.raw_preview_chars]
    reason = redact_text(str(exc), redaction)[0]  # a reason quotes the line's keys and short values
    return FailureReject(source=source, line=line, reason_code=exc.code, reason=reason, raw=preview)


def _shown(text: str) -> str:
    """A value quoted in a reason, whole or not at all (a cut value could keep half a secret past redaction)."""
    return text if len(text) <= 40 else f"<{len(text):,} characters>"


def _reject_constant(name: str) -> Any:
    raise _LineError("invalid_json", "/", f"{name} is not valid JSON", "log non-finite numbers as null or a string")


def _parse_line(text: str, origin: str, limits: ParseLimits) -> dict[str, Any]:
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise _LineError(
            "invalid_json",
            "/",
            f"invalid JSON: {exc.msg.removesuffix(' at')} at column {exc.colno}",
            "write one complete JSON object per line (a record spread over several lines is not JSONL)",
        ) from None
    except RecursionError:
        raise _too_deep(limits) from None
    except ValueError as exc:  # an integer of more than sys.get_int_max_str_digits() digits
        raise _LineError("invalid_json", "/", f"invalid JSON: {exc}"[:200], "log huge numbers as strings") from None
    _check_nesting(value, limits)
    if not isinstance(value, dict):
        raise _LineError(
            "not_an_object",
            "/",
            f"a line must be a JSON object, got {_type_name(value)}",
            "write one failure record {...} per line",
        )
    return _normalise(value, origin)


def _too_deep(limits: ParseLimits) -> _LineError:
    return _LineError(
        "too_deep", "/", f"JSON nested deeper than {limits.max_depth} levels", "flatten or drop the nested payload"
    )


def _check_nesting(value: Any, limits: ParseLimits) -> None:
    """Reject nesting past `max_depth`, strings that cannot be UTF-8 (lone surrogates) and numbers that overflow
    to infinity (`1e400`), without recursion."""
    stack: list[tuple[Any, int, list[str | int]]] = [(value, 1, [])]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, str):
            _check_text(item, path)
        elif isinstance(item, float) and not math.isfinite(item):
            raise _LineError(
                "invalid_json", json_pointer(path), "a number is too large for a float", "log huge numbers as strings"
            )
        elif isinstance(item, dict | list):
            if depth > limits.max_depth:
                raise _too_deep(limits)
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in pairs:
                if isinstance(key, str):
                    _check_text(key, path)
                stack.append((child, depth + 1, [*path, key]))


def _check_text(text: str, path: list[str | int]) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _LineError(
            "invalid_text",
            json_pointer(path),
            "a string holds a lone surrogate escape (\\ud800-\\udfff) that is not text",
            "log text as UTF-8 strings; escape binary data as base64",
        ) from None


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def _expect(value: Any, kinds: type | tuple[type, ...], pointer: str, what: str, fix: str) -> Any:
    """`value` when it is of `kinds` (a boolean counts as a number only when `bool` is listed), else a wrong_type."""
    allowed = kinds if isinstance(kinds, tuple) else (kinds,)
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        raise _LineError("wrong_type", pointer, f"{what}, got {_type_name(value)}", fix)
    return value


# --- normalisation -------------------------------------------------------------------------------------------------


def _normalise(raw: dict[str, Any], origin: str) -> dict[str, Any]:
    source: dict[str, Any] = {}
    timestamp = None
    tools: list[dict[str, Any]] = []
    if "request" in raw:
        fmt = "chat_completion"
        request = _expect(
            raw["request"], dict, "/request", "request must be an object", 'log {"request": {"messages": [...]}}'
        )
        messages = _messages(request.get("messages"), "/request/messages")
        tools = _tools(request.get("tools"), "/request/tools")
        output, response_source, timestamp, response_error = _response(raw.get("response"))
        if isinstance(request.get("model"), str):
            source["model"] = request["model"]
        source.update(response_source)
    else:
        messages = _messages(raw.get("messages"), "/messages")
        tools = _tools(raw.get("tools"), "/tools")
        response_error = None
        if "output" in raw:
            fmt = "failure_log"
            output = _output(raw["output"], "/output")
        else:
            fmt = "chat_messages"
            output = None
            if messages[-1]["role"] == "assistant":
                last = messages.pop()
                output = {"text": last["content"] or None, "tool_calls": last.get("tool_calls", [])}
                if not messages:
                    raise _LineError(
                        "no_conversation",
                        "/messages",
                        "the only message is the assistant's reply, so there is no request",
                        "log the messages the agent was given, then its reply",
                    )
    source.update(_source(raw.get("source")))
    if "timestamp" in raw:
        timestamp = _timestamp(raw["timestamp"], "/timestamp")
    error = _error(raw["error"], "/error") if raw.get("error") is not None else response_error
    return {
        "failure_id": _failure_id(raw),
        "origin": origin,
        "format": fmt,
        "timestamp": timestamp,
        "source": source,
        "family": _family(raw.get("family")),
        "messages": messages,
        "tools": tools,
        "output": output,
        "tool_results": _tool_results(raw.get("tool_results")),
        "error": error,
        "user_correction": _optional_text(raw.get("user_correction"), "/user_correction"),
        "expected": _expected(raw.get("expected")),
        "tags": _tags(raw.get("tags")),
        "model": _model(raw.get("model"), source),
        "outcome": _outcome(raw.get("outcome")),
    }


def _failure_id(raw: Mapping[str, Any]) -> str:
    given = raw.get("failure_id")
    if given is None:
        # The content hash of the line as logged (before redaction): the same failure logged twice gets one id,
        # and improving a redaction rule never renames a failure.
        return hashlib.sha256(canonical_json(raw).encode("utf-8")).hexdigest()[:16]
    if isinstance(given, int) and not isinstance(given, bool):
        given = str(given)
    _expect(given, str, "/failure_id", "failure_id must be a string", "use a string id, or leave it out")
    if not 0 < len(given) <= 200 or not given.isprintable():
        raise _LineError(
            "bad_value",
            "/failure_id",
            "failure_id must be 1-200 printable characters",
            "use a short id, or leave it out (a content hash is derived)",
        )
    return given


def _messages(value: Any, pointer: str) -> list[dict[str, Any]]:
    fix = 'log the conversation as [{"role": ..., "content": ...}, ...]'
    if value is None:
        raise _LineError(
            "no_conversation",
            pointer,
            "no conversation: messages is missing",
            'add "messages": the chat messages the agent was given',
        )
    _expect(value, list, pointer, "messages must be a list of chat messages", fix)
    if not value:
        raise _LineError("no_conversation", pointer, "messages is empty", "log at least the user's request")
    return [_message(item, f"{pointer}/{i}") for i, item in enumerate(value)]


def _message(value: Any, pointer: str) -> dict[str, Any]:
    _expect(value, dict, pointer, "a message must be an object", 'write {"role": "user", "content": "..."}')
    role = value.get("role")
    if role not in MESSAGE_ROLES:
        raise _LineError(
            "bad_value",
            f"{pointer}/role",
            f"role must be one of {', '.join(MESSAGE_ROLES)}, got {_shown(json.dumps(role))}",
            "use an OpenAI chat role",
        )
    message: dict[str, Any] = {"role": role, "content": _content(value.get("content"), f"{pointer}/content")}
    if value.get("tool_calls") is not None:
        message["tool_calls"] = _tool_calls(value["tool_calls"], f"{pointer}/tool_calls")
    for key in ("tool_call_id", "name"):
        if value.get(key) is not None:
            message[key] = _expect(value[key], str, f"{pointer}/{key}", f"{key} must be a string", "log it as text")
    return message


def _content(value: Any, pointer: str) -> str:
    """Message content as text: a string, null (a tool-call turn), or OpenAI content parts joined by newlines."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    fix = 'use a string, or parts like [{"type": "text", "text": "..."}]'
    _expect(value, list, pointer, "content must be a string, null or a list of content parts", fix)
    texts = []
    for i, part in enumerate(value):
        if isinstance(part, str):
            texts.append(part)
            continue
        _expect(part, dict, f"{pointer}/{i}", "a content part must be an object or a string", fix)
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            texts.append(f"[{part.get('type', 'part')}]")  # an image or audio part: say it was there
    return "\n".join(texts)


def _tool_calls(value: Any, pointer: str) -> list[dict[str, Any]]:
    fix = 'log calls as [{"type": "function", "function": {"name": ..., "arguments": "..."}}]'
    _expect(value, list, pointer, "tool_calls must be a list", fix)
    return [_tool_call(call, f"{pointer}/{i}", fix) for i, call in enumerate(value)]


def _tool_call(value: Any, pointer: str, fix: str) -> dict[str, Any]:
    """One call as `{name, arguments}` (+ `id`); JSON-string arguments are parsed, invalid JSON is kept as text."""
    _expect(value, dict, pointer, "a tool call must be an object", fix)
    function = value.get("function") if isinstance(value.get("function"), dict) else value
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise _LineError("wrong_type", f"{pointer}/name", "a tool call needs a string name", fix)
    arguments = function.get("arguments", function.get("parameters", {}))
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):  # the agent's broken JSON is part of the failure: keep it as text
            arguments = loads_strict(arguments) if arguments.strip() else {}
    call = {"name": name, "arguments": arguments}
    if isinstance(value.get("id"), str):
        call["id"] = value["id"]
    return call


def _tools(value: Any, pointer: str) -> list[dict[str, Any]]:
    """OpenAI tool schemas; a bare `{name, description, parameters}` is wrapped as a function tool."""
    if value is None:
        return []
    fix = 'log tools as [{"type": "function", "function": {"name": ..., "parameters": {...}}}]'
    _expect(value, list, pointer, "tools must be a list of tool schemas", fix)
    tools = []
    for i, tool in enumerate(value):
        _expect(tool, dict, f"{pointer}/{i}", "a tool must be an object", fix)
        function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise _LineError("wrong_type", f"{pointer}/{i}/function/name", "a tool needs a string name", fix)
        tools.append({"type": "function", "function": dict(function)})
    return tools


def _output(value: Any, pointer: str) -> dict[str, Any] | None:
    """What the agent produced, as `{text, tool_calls}`: from a string, `{text|content, tool_calls}` or null."""
    if value is None:
        return None
    if isinstance(value, str):
        return {"text": value, "tool_calls": []}
    fix = 'log the output as a string or {"text": ..., "tool_calls": [...]}'
    _expect(value, dict, pointer, "output must be a string, an object or null", fix)
    text = value.get("text", value.get("content"))
    key = "text" if "text" in value else "content"
    text = _content(text, f"{pointer}/{key}") if text is not None else None
    calls = _tool_calls(value["tool_calls"], f"{pointer}/tool_calls") if value.get("tool_calls") else []
    return {"text": text, "tool_calls": calls}


def _response(value: Any) -> tuple[dict[str, Any] | None, dict[str, Any], str | None, str | None]:
    """(output, source ids, timestamp, error) of a Chat Completions response (all empty when it is missing)."""
    if value is None:
        return None, {}, None, None
    fix = 'log the API response object: {"id": ..., "choices": [{"message": {...}}]}'
    _expect(value, dict, "/response", "response must be an object", fix)
    source = {key: value[key] for key in ("id", "model") if isinstance(value.get(key), str)}
    if "id" in source:
        source["request_id"] = source.pop("id")
    timestamp = _timestamp(value["created"], "/response/created") if value.get("created") is not None else None
    error = _error(value["error"], "/response/error") if value.get("error") is not None else None
    choices = value.get("choices") or []
    _expect(choices, list, "/response/choices", "choices must be a list", fix)
    if not choices:
        return None, source, timestamp, error
    choice = _expect(choices[0], dict, "/response/choices/0", "a choice must be an object", fix)
    message = _expect(choice.get("message"), dict, "/response/choices/0/message", "message must be an object", fix)
    return _output(message, "/response/choices/0/message"), source, timestamp, error


def _source(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    fix = 'log ids as {"app": ..., "session_id": ..., "request_id": ...}'
    _expect(value, dict, "/source", "source must be an object of ids", fix)
    for key, item in value.items():
        if not isinstance(item, str | int | float | bool) and item is not None:
            raise _LineError(
                "wrong_type", f"/source/{key}", f"source ids must be scalars, got {_type_name(item)}", fix
            )
    return dict(value)


def _timestamp(value: Any, pointer: str) -> str:
    """ISO 8601 text as given (checked), or a Unix time in seconds as ISO 8601 UTC."""
    fix = "use ISO 8601, e.g. 2025-03-14T09:26:53Z, or Unix seconds"
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, tz=UTC).isoformat().replace("+00:00", "Z")
        except (OverflowError, OSError, ValueError):
            raise _LineError("bad_value", pointer, f"timestamp {value} is out of range", fix) from None
    _expect(value, str, pointer, "timestamp must be an ISO 8601 string or a number", fix)
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise _LineError("bad_value", pointer, f"timestamp {_shown(repr(value))} is not ISO 8601", fix) from None
    return value


def _family(value: Any) -> str | None:
    if value is None:
        return None
    fix = "use lowercase letters, digits and underscores, e.g. tool_call"
    _expect(value, str, "/family", "family must be a string", fix)
    family = re.sub(r"[\s-]+", "_", value.strip().lower())
    if not _FAMILY.match(family):
        raise _LineError("bad_value", "/family", f"family {_shown(repr(value))} is not a family name", fix)
    return family


def _model(value: Any, source: Mapping[str, Any]) -> str | None:
    """The model or version that served the interaction: `model`, else the Chat Completions request's model."""
    if value is None:
        return source.get("model") if isinstance(source.get("model"), str) else None
    fix = 'log the serving model or version as text, e.g. "support-agent@2026-12-01"'
    _expect(value, str, "/model", "model must be a string", fix)
    if not 0 < len(value) <= 200 or not value.isprintable():
        raise _LineError("bad_value", "/model", "model must be 1-200 printable characters", fix)
    return value


def _outcome(value: Any) -> str:
    """One of `OUTCOMES`; `failed` when absent (a failure log's lines are failures)."""
    if value is None:
        return "failed"
    fix = f"use one of {', '.join(OUTCOMES)} (unknown when nothing checked the answer)"
    _expect(value, str, "/outcome", "outcome must be a string", fix)
    if value not in OUTCOMES:
        raise _LineError("bad_value", "/outcome", f"outcome {_shown(repr(value))} is not an outcome", fix)
    return value


def _error(value: Any, pointer: str) -> str:
    """An error as text: a string, or an error object's `message` (else its JSON)."""
    if isinstance(value, str):
        return value
    _expect(value, dict, pointer, "error must be a string or an object", 'log {"message": "..."} or a string')
    message = value.get("message")
    return message if isinstance(message, str) else canonical_json(value)


def _optional_text(value: Any, pointer: str) -> str | None:
    if value is None:
        return None
    return _expect(value, str, pointer, f"{pointer[1:]} must be a string", "log it as text")


def _tool_results(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(_expect(value, list, "/tool_results", "tool_results must be a list", "log one entry per tool result"))


def _tags(value: Any) -> list[str]:
    if value is None:
        return []
    fix = 'use a list of strings, e.g. ["checkout", "p1"]'
    _expect(value, list, "/tags", "tags must be a list", fix)
    for i, tag in enumerate(value):
        if not isinstance(tag, str) or not tag:
            raise _LineError("wrong_type", f"/tags/{i}", "a tag must be a non-empty string", fix)
    return list(dict.fromkeys(value))


def _expected(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    fix = f"use the fields {', '.join(EXPECTED_FIELDS)}"
    _expect(value, dict, "/expected", "expected must be an object", fix)
    unknown = sorted(set(value) - set(EXPECTED_FIELDS))
    if unknown:
        raise _LineError("unknown_field", f"/expected/{unknown[0]}", f"unknown expected field(s) {unknown}", fix)
    checks: dict[str, tuple[type | tuple[type, ...], str]] = {
        "answer": ((int, float, str), "a number or a string"),
        "tool_call": (dict, 'an object {"name": ..., "arguments": {...}}'),
        "output_schema": (dict, "a JSON Schema object"),
        "sql": (str, "a SQL query"),
        "database": (str, "a SQLite path under seeds/"),
        "ordered": (bool, "true or false"),
        "rows": (list, "a list of rows"),
        "tests": (str, "Python test source"),
        "entry_point": (str, "a function name"),
        "code": (str, "Python source"),
        "episode": (dict, 'an object {"environment": ..., "state": {...}, "goal": {...}, "tool_calls": [...]}'),
    }
    for key, (kinds, what) in checks.items():
        if value.get(key) is not None:
            _expect(value[key], kinds, f"/expected/{key}", f"expected.{key} must be {what}", fix)
    if isinstance(value.get("answer"), bool):
        raise _LineError("wrong_type", "/expected/answer", "expected.answer must be a number or a string", fix)
    call = value.get("tool_call")
    if call is not None:
        call = _tool_call(call, "/expected/tool_call", 'write {"name": ..., "arguments": {...}}')
        if not isinstance(call["arguments"], dict):
            raise _LineError(
                "wrong_type",
                "/expected/tool_call/arguments",
                "expected tool-call arguments must be a JSON object",
                'write {"name": ..., "arguments": {...}}',
            )
        value = {**value, "tool_call": {"name": call["name"], "arguments": call["arguments"]}}
    episode = value.get("episode")
    if episode is not None and episode.get("tool_calls") is not None:
        # The corrected episode's calls, in any logged call shape, as `{name, arguments}` like the agent's own.
        calls = _tool_calls(episode["tool_calls"], "/expected/episode/tool_calls")
        value = {
            **value,
            "episode": {**episode, "tool_calls": [{k: c[k] for k in ("name", "arguments")} for c in calls]},
        }
    return {key: value[key] for key in EXPECTED_FIELDS if value.get(key) is not None}
