"""A redacted failure record -> a candidate task, or a review-queue item with a seed stub a person completes.

**The task.** Its prompt is the conversation the agent was given (the record's `messages`; `developer` turns
become `system`, `function` turns `tool`, assistant tool calls are written out as JSON, empty turns dropped).
Its verifier comes from `expected`, the first of these that is present:

| expected | verifier | params | reference |
| --- | --- | --- | --- |
| `tool_call` `{name, arguments}` | `tool_call` | the logged `tools` (*), `expected`: the call | the call as JSON |
| `sql` + `database` (`ordered`) | `sql_result` | `gold_query`, `database` (inside seeds/), `ordered` | the query |
| `tests` + `entry_point` (`code`) | `python_tests` | `tests`, `entry_point` | `code`, else none |
| `output_schema` (`output`) | `json_schema` | `schema`; an object `output` as `expected` | `output`, else none |
| `output` (an object) | `json_schema` | `{"type": "object"}`, `output` as `expected` | `output` as JSON |
| `answer` (a number) | `numeric_answer` | `answer` | `#### <answer>` |
| `answer` (a text of at most 12 words) | `text_answer` | `answers: [answer]` | `Answer: <answer>` |
| `episode` (`environment`, `state`, `goal`) | `episode` | the same three | `tool_calls` as `<tool_call>` blocks |

(*) a bare tool of the expected name when no tools were logged. References are fenced (```sql, ```python,
```json) like the seeds'.

For a `tool_call` task whose prompt does not name every tool (they were passed through the API's `tools`
parameter), the tool list and the reply format (one JSON call) are added to the system message, as in the
tool_call seeds: a training prompt carries no API tools. The task must pass `validators.tasks.task_problems`
(schema, id, params, reference, and a known-wrong answer failing); otherwise it goes to review with the
problems as the reason.

An `episode` failure is a tool loop whose expected outcome is a state: the task replays a completion's calls in
a fresh copy of `state` and checks `goal` (`validators.verifiers.episode`). Its prompt is the conversation up to
the agent's first tool call or tool result (the fresh state is the one the conversation started from, so the
logged calls and results would contradict it), with the environment's tools and the reply format added to the
system message unless every tool is named there already. A `shop` database, like `sql`'s, must be a path
inside seeds/. The corrected `tool_calls`, when given, become the reference, which must reach the goal.

**Lineage.** `source: production_failure`, `failure_id` set, `seed_id` and `parent_id` null, no generator.
`curation.splits` roots a task without a `seed_id` at its `failure_id`, and variants made with
`generators.base.derive_task` inherit both ids, so a failure and all its variants land on one side of a split.

**Family.** The record's `family` hint, else inferred: from `expected` (`episode` -> episode, `tool_call` ->
tool_call, `sql` / `database` / `rows` -> sql, `tests` -> python_function, `output_schema` / object `output` ->
json_extraction, a numeric `answer` -> arithmetic), else `tool_call` when tools were offered or called, else `unknown`.

**Review.** No `expected` (or nothing in it a registered verifier can judge: prose, rows without a query)
sends the record to review: its redacted conversation, output, error and correction, and a YAML seed stub (the
seeds/ record format) with TODOs where the gold data goes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import yaml

from core import SeedwheelError
from validators.environments import ENVIRONMENTS, environment_class
from validators.registry import REGISTRY, VerifyContext
from validators.tasks import compute_task_id, task_problems
from validators.verifiers.numeric import NumberFormatError, parse_number
from validators.verifiers.tool_call import tagged_calls

UNKNOWN_FAMILY = "unknown"
# A text answer this short is a label or a phrase (`text_answer` compares it exactly); a longer one is prose.
MAX_TEXT_ANSWER_WORDS = 12
# The shipped family for each verifier a failure can be turned into (seeds/README.md).
FAMILY_VERIFIERS = {
    "arithmetic": "numeric_answer",
    "json_extraction": "json_schema",
    "sql": "sql_result",
    "python_function": "python_tests",
    "tool_call": "tool_call",
    "episode": "episode",
}
TOOL_INSTRUCTIONS = (
    "The tools you can call are listed below as JSON schemas. Reply with exactly one tool call, written as a "
    'JSON object {"name": <tool name>, "arguments": {...}}, and nothing else.'
)
EPISODE_INSTRUCTIONS = (
    "The tools you can call are listed below as JSON schemas. Call one tool per turn by writing "
    '<tool_call>{"name": <tool name>, "arguments": {...}}</tool_call>, and read its result before the next call. '
    "When the request is handled, reply in one short message."
)
_TOOL_FUNCTION_KEYS = ("name", "description", "parameters", "strict")
_ROLES = {"developer": "system", "function": "tool"}
_COMMENT_CHARS = 240


class UnredactedRecordError(SeedwheelError, ValueError):
    """A failure record that has not been through `redact`: nothing derived from it may be stored."""


@dataclass(frozen=True)
class Derived:
    """What one failure became: a candidate `task` record, or a `review` item (exactly one is set)."""

    task: dict[str, Any] | None = None
    review: dict[str, Any] | None = None

    @property
    def is_task(self) -> bool:
        """Whether a task was derived."""
        return self.task is not None


class _NoVerifier(SeedwheelError, ValueError):
    """No verifier can be derived; `code` names why (the message says it in full)."""

    def __init__(self, code: str, reason: str):
        super().__init__(reason)
        self.code = code


@dataclass(frozen=True)
class _Spec:
    """A derived verifier: its name and params, and the reference completion (None when none is known)."""

    name: str
    params: dict[str, Any]
    reference: str | None


def infer_family(record: Mapping[str, Any]) -> str:
    """The record's family hint, else the family its expected outcome or tools imply, else `unknown`.

    Args:
        record: a failure record.

    Returns:
        A family name.

    Example:
        >>> infer_family({"family": None, "expected": {"answer": 42}, "tools": [], "output": None})
        'arithmetic'
    """
    if record.get("family"):
        return record["family"]
    expected = record.get("expected") or {}
    if "episode" in expected:
        return "episode"
    if "tool_call" in expected:
        return "tool_call"
    if {"sql", "database", "rows"} & expected.keys():
        return "sql"
    if {"tests", "entry_point"} & expected.keys():
        return "python_function"
    if "output_schema" in expected or isinstance(expected.get("output"), dict):
        return "json_extraction"
    if "answer" in expected and _is_number(expected["answer"]):
        return "arithmetic"
    if record.get("tools") or (record.get("output") or {}).get("tool_calls"):
        return "tool_call"
    return UNKNOWN_FAMILY


def _is_number(value: Any) -> bool:
    try:
        parse_number(value)
    except (NumberFormatError, TypeError):
        return False
    return True


def failure_task(record: Mapping[str, Any], *, context: VerifyContext | None = None) -> Derived:
    """Turn one redacted failure record into a candidate task, or a review item when no verifier can be derived.

    Args:
        record: a failure record from `parse_failure_log`, after `redact`.
        context: where SQLite fixtures resolve (`expected.database` is relative to the seeds folder).

    Returns:
        `Derived(task=...)` with a valid task record (it passes `task_problems`, known-wrong answer included),
        or `Derived(review=...)`: `failure_id`, `origin`, `family`, `reason_code`, `reason`, the redacted
        `messages`, `tools`, `output`, `error`, `user_correction`, `expected`, and `seed_stub` (YAML text).

    Raises:
        UnredactedRecordError: the record has no `redaction` field (it was not passed through `redact`).

    Example:
        >>> from failures import parse_failure_log, redact
        >>> line = '{"messages": [{"role": "user", "content": "7*6?"}], "output": "41", "expected": {"answer": 42}}'
        >>> record, _ = redact(parse_failure_log([line]).records[0])
        >>> derived = failure_task(record)
        >>> derived.task["verifier"]["params"], derived.task["lineage"]["source"]
        ({'answer': 42}, 'production_failure')
    """
    if not isinstance(record.get("redaction"), Mapping):
        raise UnredactedRecordError(
            f"failure {record.get('failure_id', '?')} ({record.get('origin', '?')}) has not been redacted; "
            "pass it through failures.redact first (or use process_failure_log)"
        )
    family = infer_family(record)
    prompt = _task_prompt(record)
    try:
        if not record.get("expected"):
            raise _NoVerifier("no_expected", "no expected outcome to derive a verifier from")
        spec = _spec(record)
        if spec.name == "tool_call":
            prompt = _with_tool_list(prompt, spec.params["tools"], TOOL_INSTRUCTIONS)
        if spec.name == "episode":
            prompt = _episode_prompt(record, environment_class(spec.params["environment"]).tools)
        if not any(message["role"] == "user" for message in prompt):
            raise _NoVerifier("no_user_message", "the conversation has no user message with text to use as a prompt")
    except _NoVerifier as exc:
        return Derived(review=_review(record, family, prompt, exc.code, str(exc)))
    verifier = {"name": spec.name, "version": REGISTRY.get(spec.name).version, "params": spec.params}
    task = {
        "task_id": compute_task_id(prompt, verifier),
        "family": family,
        "prompt": prompt,
        "verifier": verifier,
        "reference": spec.reference,
        "lineage": {
            "seed_id": None,
            "parent_id": None,
            "generator": None,
            "source": "production_failure",
            "failure_id": record["failure_id"],
        },
        "difficulty": None,
        "tags": list(dict.fromkeys(record.get("tags") or [])),  # redaction can make two tags one placeholder
    }
    problems = task_problems(task, context, check_wrong_answer=True)
    if problems:
        reason = "the derived task is invalid: " + "; ".join(map(str, problems))
        return Derived(review=_review(record, family, prompt, "invalid_task", reason))
    return Derived(task=task)


def failure_fields(task: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a log line needs beside its conversation for `failure_task` to derive `task`'s verifier again: the
    `expected` outcome and, for a tool call, the `tools` offered; None when the verifier cannot be logged so.

    The inverse of the table above, checked by deriving the verifier back: a task whose params the derivation
    would not reproduce exactly (an extra param, several text answers, an episode) gives None. A stand-in app
    logs its traffic with these fields, as a team's app would log the gold data it knows.

    Example:
        >>> failure_fields({"verifier": {"name": "numeric_answer", "params": {"answer": 42}}})
        {'expected': {'answer': 42}, 'tools': []}
    """
    name, params = task["verifier"]["name"], task["verifier"]["params"]
    tools: list[dict[str, Any]] = []
    expected: dict[str, Any]
    if name == "numeric_answer":
        expected = {"answer": params.get("answer")}
    elif name == "text_answer" and len(params.get("answers") or ()) == 1:
        expected = {"answer": params["answers"][0]}
    elif name == "tool_call":
        expected, tools = {"tool_call": params.get("expected")}, list(params.get("tools") or ())
    elif name == "sql_result":
        expected = {
            "sql": params.get("gold_query"),
            "database": params.get("database"),
            "ordered": params.get("ordered"),
        }
    elif name == "python_tests":
        expected = {"tests": params.get("tests"), "entry_point": params.get("entry_point")}
    elif name == "json_schema":
        expected = {"output_schema": params.get("schema"), "output": params.get("expected")}
    else:
        return None
    expected = {key: value for key, value in expected.items() if value is not None}
    try:
        spec = _spec({"expected": expected, "tools": tools})
    except _NoVerifier:
        return None
    return {"expected": expected, "tools": tools} if (spec.name, spec.params) == (name, dict(params)) else None


# --- the verifier ------------------------------------------------------------------------------------------------


def _spec(record: Mapping[str, Any]) -> _Spec:
    expected = record["expected"]
    if "episode" in expected:
        return _episode_spec(expected["episode"])
    if "tool_call" in expected:
        return _tool_call_spec(record, expected["tool_call"])
    if {"sql", "database", "rows"} & expected.keys():
        return _sql_spec(expected)
    if {"tests", "entry_point"} & expected.keys():
        return _python_spec(expected)
    if "output_schema" in expected or "output" in expected:
        return _json_spec(expected)
    if "answer" in expected:
        answer = expected["answer"]
        if _is_number(answer):
            return _Spec("numeric_answer", {"answer": answer}, f"#### {answer}")
        if isinstance(answer, str) and 0 < len(answer.split()) <= MAX_TEXT_ANSWER_WORDS:
            return _Spec("text_answer", {"answers": [answer]}, f"Answer: {answer}")
        raise _NoVerifier(
            "unsupported_expected",
            f"expected.answer {str(answer)[:60]!r} is neither a number nor a short text (at most "
            f"{MAX_TEXT_ANSWER_WORDS} words), and free prose needs a judge, not a verifier; give the answer as a "
            "number, a short label or phrase, or the output as a JSON object (expected.output_schema)",
        )
    raise _NoVerifier("no_expected", "no expected outcome to derive a verifier from")


def _tool_schemas(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The record's tools in the shape the tool_call verifier accepts (unknown function fields dropped)."""
    return [
        {
            "type": "function",
            "function": {k: tool["function"][k] for k in _TOOL_FUNCTION_KEYS if tool["function"].get(k) is not None},
        }
        for tool in record.get("tools") or []
    ]


def _tool_call_spec(record: Mapping[str, Any], call: Mapping[str, Any]) -> _Spec:
    tools = _tool_schemas(record)
    names = [tool["function"]["name"] for tool in tools]
    if not tools:
        # No tool list was logged: a bare tool of the expected name still checks the call and its arguments.
        tools = [{"type": "function", "function": {"name": call["name"], "parameters": {"type": "object"}}}]
    elif call["name"] not in names:
        raise _NoVerifier(
            "expected_tool_unknown",
            f"expected tool {call['name']!r} is not among the tools offered ({', '.join(names)})",
        )
    reference = json.dumps({"name": call["name"], "arguments": call["arguments"]}, ensure_ascii=False)
    return _Spec("tool_call", {"tools": tools, "expected": dict(call)}, reference)


def _sql_spec(expected: Mapping[str, Any]) -> _Spec:
    if "sql" not in expected or "database" not in expected:
        missing = " and ".join(f"expected.{key}" for key in ("sql", "database") if key not in expected)
        raise _NoVerifier(
            "unsupported_expected",
            f"sql_result needs the gold query (expected.sql) and the SQLite file it runs on (expected.database, "
            f"relative to seeds/); {missing} is missing",
        )
    _check_seeds_path(expected["database"], "expected.database")
    params = {"database": expected["database"], "gold_query": expected["sql"]}
    if "ordered" in expected:
        params["ordered"] = expected["ordered"]
    return _Spec("sql_result", params, f"```sql\n{expected['sql'].strip()}\n```")


def _check_seeds_path(path: str, where: str) -> None:
    """Refuse a fixture path that is not inside seeds/: a log must not point a verifier at other files."""
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts:
        raise _NoVerifier(
            "unsupported_expected",
            f"{where} {path!r} must be a path relative to seeds/ without '..' "
            "(a log must not point the verifier at other files); copy the SQLite file under seeds/",
        )


def _episode_spec(episode: Mapping[str, Any]) -> _Spec:
    missing = [key for key in ("environment", "state", "goal") if not episode.get(key)]
    if missing or episode["environment"] not in ENVIRONMENTS:
        raise _NoVerifier(
            "unsupported_expected",
            f"an episode needs expected.episode.environment (one of {', '.join(ENVIRONMENTS)}), .state (its initial "
            'state, e.g. {"database": "sql/shop.sqlite"}) and .goal (the expected final state as changes, and '
            f"calls); {', '.join(missing) or 'environment'} is missing or unknown",
        )
    state = episode["state"]
    if isinstance(state, Mapping) and isinstance(state.get("database"), str):
        _check_seeds_path(state["database"], "expected.episode.state.database")
    params = {key: episode[key] for key in ("environment", "state", "goal")}
    calls = episode.get("tool_calls")
    return _Spec("episode", params, tagged_calls(calls) if calls else None)


def _python_spec(expected: Mapping[str, Any]) -> _Spec:
    if "tests" not in expected or "entry_point" not in expected:
        raise _NoVerifier(
            "unsupported_expected",
            "python_tests needs expected.tests (assert statements) and expected.entry_point (the function name)",
        )
    code = expected.get("code")
    reference = f"```python\n{code.strip()}\n```" if code else None
    return _Spec("python_tests", {"tests": expected["tests"], "entry_point": expected["entry_point"]}, reference)


def _json_spec(expected: Mapping[str, Any]) -> _Spec:
    output = expected.get("output")
    if "output_schema" not in expected and not isinstance(output, dict):
        raise _NoVerifier(
            "unsupported_expected",
            "expected.output is not a JSON object and no output_schema is given, and no registered verifier "
            "compares free text; give the expected output as an object or add expected.output_schema",
        )
    params: dict[str, Any] = {"schema": expected.get("output_schema", {"type": "object"})}
    if isinstance(output, dict) and output:
        params["expected"] = output
    reference = None if output is None else "```json\n" + json.dumps(output, ensure_ascii=False, indent=2) + "\n```"
    return _Spec("json_schema", params, reference)


# --- the prompt --------------------------------------------------------------------------------------------------


def _task_prompt(record: Mapping[str, Any]) -> list[dict[str, str]]:
    return _prompt(record["messages"])


def _episode_prompt(record: Mapping[str, Any], tools: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The conversation before the agent's first tool call or result, with the environment's tools."""
    messages = record["messages"]
    acted = (i for i, m in enumerate(messages) if m.get("tool_calls") or m["role"] in ("tool", "function"))
    return _with_tool_list(_prompt(messages[: next(acted, len(messages))]), tools, EPISODE_INSTRUCTIONS)


def _prompt(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    prompt = []
    for message in messages:
        content = message.get("content") or ""
        calls = message.get("tool_calls") or []
        if calls:
            shown = [{"name": call["name"], "arguments": call["arguments"]} for call in calls]
            rendered = json.dumps(shown[0] if len(shown) == 1 else shown, ensure_ascii=False)
            content = f"{content}\n{rendered}" if content.strip() else rendered
        if content.strip():
            prompt.append({"role": _ROLES.get(message["role"], message["role"]), "content": content})
    return prompt


def _with_tool_list(
    prompt: list[dict[str, str]], tools: list[dict[str, Any]], instructions: str
) -> list[dict[str, str]]:
    """The prompt with the tool list and how to call them in its system message, unless every tool is named in it."""
    text = "\n".join(message["content"] for message in prompt)
    if all(tool["function"]["name"] in text for tool in tools):
        return prompt
    block = f"{instructions}\n\nTools:\n```json\n{json.dumps(tools, ensure_ascii=False, indent=2)}\n```"
    if prompt and prompt[0]["role"] == "system":
        return [{"role": "system", "content": f"{prompt[0]['content']}\n\n{block}"}, *prompt[1:]]
    return [{"role": "system", "content": block}, *prompt]


# --- review ------------------------------------------------------------------------------------------------------


def _review(record: Mapping[str, Any], family: str, prompt: list[dict[str, str]], code: str, reason: str) -> dict:
    return {
        "failure_id": record["failure_id"],
        "origin": record.get("origin"),
        "family": family,
        "reason_code": code,
        "reason": reason,
        "messages": record["messages"],
        "tools": record.get("tools") or [],
        "output": record.get("output"),
        "error": record.get("error"),
        "user_correction": record.get("user_correction"),
        "expected": record.get("expected"),
        "seed_stub": seed_stub(record, family, prompt, reason),
    }


def _one_line(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= _COMMENT_CHARS else text[: _COMMENT_CHARS - 3] + "..."


def seed_stub(record: Mapping[str, Any], family: str, prompt: list[dict[str, str]], reason: str) -> str:
    """A seeds/ YAML file holding one record built from a failure, with TODOs where the gold data goes.

    Args:
        record: the redacted failure record.
        family: its family (`unknown` leaves the verifier name as a TODO).
        prompt: the task prompt built from its conversation.
        reason: why it needs a person, for the header comment.

    Returns:
        YAML text: header comments (origin, reason, error, correction, what the agent did, how to finish) and
        a one-record list in the seed format (`prompt`, `verifier`, `reference`, `tags`).

    Example:
        >>> record = {"failure_id": "f1", "origin": "log:3", "tools": [], "expected": None, "output": None,
        ...           "error": None, "user_correction": "It is 12.", "tags": []}
        >>> print(seed_stub(record, "arithmetic", [{"role": "user", "content": "5+7?"}], "no expected outcome"))
        ... # doctest: +ELLIPSIS
        # Seed stub from production failure f1 (log:3): no expected outcome.
        # User correction: It is 12.
        ...
    """
    expected = record.get("expected") or {}
    name = FAMILY_VERIFIERS.get(family)
    tools = _tool_schemas(record)
    if name == "tool_call" and tools:
        prompt = _with_tool_list(prompt, tools, TOOL_INSTRUCTIONS)
    seed: dict[str, Any] = {
        "prompt": prompt or [{"role": "user", "content": "TODO: the request"}],
        "verifier": {
            "name": name or f"TODO: one of {', '.join(REGISTRY.names())}",
            "params": _stub_params(name, record, expected),
        },
        "reference": "TODO: a known-good completion that passes the verifier",
    }
    if record.get("tags"):
        seed["tags"] = list(record["tags"])
    header = [f"Seed stub from production failure {record['failure_id']} ({record.get('origin')}): {reason}."]
    if record.get("error"):
        header.append(f"Error: {_one_line(record['error'])}")
    if record.get("user_correction"):
        header.append(f"User correction: {_one_line(record['user_correction'])}")
    output = record.get("output") or {}
    if output.get("text"):
        header.append(f"The agent answered: {_one_line(output['text'])}")
    for call in output.get("tool_calls") or []:
        header.append(f"The agent called: {_one_line({'name': call['name'], 'arguments': call['arguments']})}")
    if "rows" in expected:
        header.append(f"Expected rows: {_one_line(expected['rows'])}")
    folder = family if family != UNKNOWN_FAMILY else "<family>"
    header.append(
        f"Fill in every TODO, save this under seeds/{folder}/, then run: seedwheel seeds validate seeds/{folder}"
    )
    comments = "".join(f"# {line}\n" for line in header)
    return comments + yaml.dump([seed], Dumper=_SeedDumper, sort_keys=False, allow_unicode=True, width=119)


class _SeedDumper(yaml.SafeDumper):
    """Writes multi-line strings as `|` blocks, the way the hand-written seed files do."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_SeedDumper.add_representer(str, _represent_str)


def _stub_params(name: str | None, record: Mapping[str, Any], expected: Mapping[str, Any]) -> dict[str, Any]:
    if name == "numeric_answer":
        answer = expected.get("answer")
        return {"answer": answer if answer is not None and _is_number(answer) else "TODO: the expected number"}
    if name == "tool_call":
        call = expected.get("tool_call") or {"name": "TODO: the tool that should be called", "arguments": {}}
        return {"tools": _tool_schemas(record) or "TODO: the tool schemas offered", "expected": call}
    if name == "json_schema":
        output = expected.get("output")
        return {
            "schema": expected.get("output_schema", "TODO: the JSON Schema the output must satisfy"),
            "expected": output if isinstance(output, dict) else "TODO: the expected field values",
        }
    if name == "sql_result":
        return {
            "database": expected.get("database", "TODO: a SQLite file under seeds/, e.g. sql/shop.sqlite"),
            "gold_query": expected.get("sql", "TODO: the query whose result is the right answer"),
        }
    if name == "episode":
        episode = expected.get("episode") or {}
        return {
            "environment": episode.get("environment", f"TODO: one of {', '.join(ENVIRONMENTS)}"),
            "state": episode.get("state", "TODO: the initial state, e.g. {database: sql/shop.sqlite}"),
            "goal": episode.get("goal", "TODO: the expected final state: {changes: [{collection, key, after}]}"),
        }
    if name == "python_tests":
        return {
            "tests": expected.get("tests", "TODO: assert statements calling the function"),
            "entry_point": expected.get("entry_point", "TODO: the function name"),
        }
    return {}
