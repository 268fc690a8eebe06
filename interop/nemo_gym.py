"""NeMo Gym's shapes, both ways: seedwheel tasks as NeMo Gym rows, NeMo Gym rows as seeds, rollouts as completions.

A NeMo Gym row is one JSON object per line: `{"responses_create_params": {"input": [chat messages], "tools":
[...]}, ...gold fields}`; a resources server's `POST /verify` gets the row's fields back with the policy's
`response` (an OpenAI Responses API object) and answers `{"reward": float, ...}`.

**Out** (`task_rows`, `export_rows`): the task's prompt is the `input`, a `tool_call` task's tools are the
`tools` (in the Responses API's flat shape: `{"type": "function", "name", "description", "parameters"}`), and the
row carries the task's `task_id`, `family`, `verifier` spec and `reference`, so `seedwheel reward-server`
scores it with the same verifier and the row reads back as the same task. The gold fields NeMo Gym's own
servers read are added where a task's gold has their shape: `expected_answers` (xlam_fc) for a tool call,
`schema_str`/`schema_type` (structured_outputs) for a JSON schema, `expected_answer` (math_with_judge) for a
numeric or math answer.

**In** (`read_seed_records`, `row_verifier`): a row that carries a seedwheel `verifier` keeps it; otherwise its
gold fields name the verifier:

- `xlam_fc` (`expected_answers: [{name, arguments}]`) -> `tool_call` over the row's tools: one call as
  `expected`, several (or none) as `possible_answer`; the reference is the expected calls as `<tool_call>` blocks.
- `structured_outputs`, JSON answered in text (`schema_str`, `schema_type: json`) -> `json_schema` with the schema
  made strict as the server makes it (every property required, no other); the gold is a schema, not an answer, so
  the reference is the first rollout answer of the row's prompt that passes (`rollouts=`).
- `math_with_judge` and others (`expected_answer`) -> `math_answer` (or the verifier named) with its
  `answer_params`, else `{"answer": ...}`; the reference is `\\boxed{answer}`.

A row that cannot become a seed (a structured output asked for as YAML, XML, TOML, CSV or a tool call, a gold
that seedwheel's formats cannot state, a prompt with no text) is a located `SeedProblem` with its reason and fix;
the caller checks the rest as `seedwheel seeds validate` does (`validators.seeds.check_seed_records`).

**Rollouts** (`completion_from_response`): a Responses API `output` becomes chat messages, each `message`
item an assistant turn (its `output_text` parts joined), each `function_call` item an OpenAI `tool_calls` entry,
each `function_call_output` a tool turn; reasoning items are not the answer and are left out. So the verdict
reads what `seedwheel verify` reads: the text of the last assistant turn, the calls of every turn.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core import SeedwheelError
from core.tables import write_jsonl
from validators.registry import REGISTRY, Completion, UnknownVerifierError, Verifier, VerifyContext, verify
from validators.seeds import SOURCE_TAG, SeedProblem, SeedRecord
from validators.tasks import Problem
from validators.verifiers.tool_call import json_schema_of, tagged_calls

# The verifier an `expected_answer` row gets unless the caller names another (math_with_judge's rows are math).
DEFAULT_ANSWER_VERIFIER = "math_answer"
# The row keys seedwheel adds: NeMo Gym echoes a row's other fields into its verify request, so the reward server
# reads the verifier spec (or the task id) there.
SEEDWHEEL_KEYS = ("task_id", "family", "verifier", "reference")
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_LATEX_DELIMITERS = re.compile(r"^\s*(?:\\\(|\\\[|\$\$?)(.*?)(?:\\\)|\\\]|\$\$?)\s*$", re.DOTALL)


class NemoGymRowError(SeedwheelError, ValueError):
    """A NeMo Gym row that cannot become a seedwheel task; `problem` holds the reason code, where and the fix."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


def _refuse(code: str, pointer: str, message: str, fix: str) -> NemoGymRowError:
    return NemoGymRowError(Problem(code, pointer, message, fix))


# ----- out: seedwheel tasks -> NeMo Gym rows -----


def responses_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A `tool_call` task's tools (OpenAI tool specs or BFCL docs) in the Responses API's flat function shape.

    Example:
        >>> responses_tools([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])
        [{'type': 'function', 'name': 'f', 'parameters': {'type': 'object'}}]
    """
    flat = []
    for tool in tools:
        if "function" in tool:
            flat.append({"type": "function", **tool["function"]})
        else:  # a BFCL doc: its python-ish types as JSON Schema
            flat.append({"type": "function", **tool, "parameters": json_schema_of(tool["parameters"])})
    return flat


def _nemo_gold(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The gold fields NeMo Gym's own servers read, where the task's gold has their shape."""
    params = spec.get("params") or {}
    name = spec["name"]
    if name == "tool_call" and "expected" in params:
        return {"expected_answers": [dict(params["expected"])]}
    if name == "json_schema" and "expected" not in params:
        return {"schema_str": json.dumps(params["schema"], ensure_ascii=False), "schema_type": "json"}
    if name in ("numeric_answer", "math_answer") and "answer" in params:
        return {"expected_answer": str(params["answer"])}
    return {}


def task_row(task: Mapping[str, Any]) -> dict[str, Any]:
    """One task record as a NeMo Gym row (see the module docstring).

    Example:
        >>> task = {"task_id": "5c4f6470173c47e1", "family": "arithmetic", "reference": "#### 4",
        ...         "prompt": [{"role": "user", "content": "2+2?"}],
        ...         "verifier": {"name": "numeric_answer", "version": 1, "params": {"answer": 4}}}
        >>> row = task_row(task)
        >>> row["responses_create_params"], row["expected_answer"]
        ({'input': [{'role': 'user', 'content': '2+2?'}]}, '4')
    """
    spec = dict(task["verifier"])
    create: dict[str, Any] = {"input": [{"role": m["role"], "content": m["content"]} for m in task["prompt"]]}
    if spec["name"] == "tool_call":
        create["tools"] = responses_tools(spec["params"]["tools"])
    row: dict[str, Any] = {"responses_create_params": create}
    row.update({key: task.get(key) for key in SEEDWHEEL_KEYS if key != "verifier"})
    row["verifier"] = spec
    row.update(_nemo_gold(spec))
    return row


def task_rows(tasks: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Task records (as `core.tables` reads them) as NeMo Gym rows, in order.

    Args:
        tasks: task records: `task_id`, `family`, `prompt`, `verifier`, `reference`.

    Returns:
        One row per task: `responses_create_params`, the seedwheel keys, and NeMo Gym's gold fields where they fit.
    """
    return [task_row(task) for task in tasks]


def export_rows(tasks: Iterable[Mapping[str, Any]], output: Path) -> int:
    """Write task records as a NeMo Gym JSONL file, atomically (`core.tables.write_jsonl`).

    Args:
        tasks: task records, e.g. `records_from_frame(read_table(".seedwheel/train_tasks.parquet"))`.
        output: the `.jsonl` file to write (its folder is made).

    Returns:
        The number of rows written.

    Example:
        >>> export_rows(tasks, Path("train.nemo_gym.jsonl"))  # doctest: +SKIP
        412
    """
    rows = task_rows(tasks)
    write_jsonl(rows, Path(output))
    return len(rows)


# ----- in: NeMo Gym rows -> seed records -----


def _text(content: Any) -> str:
    """A message's content as text: a string, or the text of its input/output text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping) and "text" in part)
    return ""


def row_prompt(row: Mapping[str, Any]) -> list[dict[str, str]]:
    """The row's `responses_create_params.input` as seedwheel chat messages (`developer` is a system message).

    Raises:
        NemoGymRowError: no input, a role seedwheel's prompts do not take, or a message without text.
    """
    create = row.get("responses_create_params")
    messages = create.get("input") if isinstance(create, Mapping) else None
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if not isinstance(messages, list) or not messages:
        raise _refuse(
            "no_input",
            "/responses_create_params/input",
            "the row has no responses_create_params.input messages",
            "give each row its chat messages under responses_create_params.input",
        )
    prompt = []
    for i, message in enumerate(messages):
        where = f"/responses_create_params/input/{i}"
        role = message.get("role") if isinstance(message, Mapping) else None
        if role not in _ROLES:
            raise _refuse(
                "unsupported_message",
                where,
                f"a {role or type(message).__name__} item; a seed's prompt holds system, user and assistant messages",
                "keep the prompt's messages only (no tool calls or their outputs), or delete the row",
            )
        text = _text(message.get("content"))
        if not text.strip():
            raise _refuse("empty_message", f"{where}/content", "a message without text", "fill it in, or delete it")
        prompt.append({"role": _ROLES[role], "content": text})
    return prompt


def _openai_tools(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    create = row.get("responses_create_params") or {}
    tools = create.get("tools") if isinstance(create, Mapping) else None
    if not isinstance(tools, list) or not tools:
        raise _refuse(
            "no_tools",
            "/responses_create_params/tools",
            "a tool-calling row offers no tools",
            "give the tools under responses_create_params.tools",
        )
    converted = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping) or tool.get("type") != "function" or not isinstance(tool.get("name"), str):
            raise _refuse(
                "unsupported_tool",
                f"/responses_create_params/tools/{i}",
                f"not a function tool: {json.dumps(tool)[:80]}",
                "offer function tools ({type: function, name, parameters}) only",
            )
        keys = ("name", "description", "parameters", "strict")
        converted.append({"type": "function", "function": {k: tool[k] for k in keys if tool.get(k) is not None}})
    return converted


def _bfcl_values(value: Any, where: str) -> Any:
    """An exact value in BFCL's `possible_answer` notation: an object lists acceptable values per key."""
    if isinstance(value, str) and not value:
        raise _refuse(
            "gold_not_expressible",
            where,
            "an empty string in a call of several: seedwheel's possible_answer reads '' as 'may be left out'",
            "give that argument a value, or split the row into single calls",
        )
    if isinstance(value, Mapping):
        return {key: [_bfcl_values(v, f"{where}/{key}")] for key, v in value.items()}
    if isinstance(value, list):
        return [_bfcl_values(v, f"{where}/{i}") for i, v in enumerate(value)]
    return value


def _call_arguments(call: Any, where: str) -> tuple[str, dict[str, Any]]:
    arguments = call.get("arguments", {}) if isinstance(call, Mapping) else None
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            arguments = None
    if not isinstance(call, Mapping) or not isinstance(call.get("name"), str) or not isinstance(arguments, dict):
        raise _refuse(
            "bad_gold", where, "an expected call is not {name, arguments: {...}}", "correct it, or delete the row"
        )
    return call["name"], arguments


def _tool_call_spec(row: Mapping[str, Any]) -> dict[str, Any]:
    answers = row["expected_answers"]
    if not isinstance(answers, list):
        raise _refuse("bad_gold", "/expected_answers", "expected_answers is not a list", "give a list of calls")
    calls = [_call_arguments(call, f"/expected_answers/{i}") for i, call in enumerate(answers)]
    params: dict[str, Any] = {"tools": _openai_tools(row)}
    if len(calls) == 1:
        params["expected"] = {"name": calls[0][0], "arguments": calls[0][1]}
    else:  # several calls in any order, or none: BFCL's notation, each value the one acceptable
        params["possible_answer"] = [
            {name: {k: [_bfcl_values(v, f"/expected_answers/{i}/arguments/{k}")] for k, v in arguments.items()}}
            for i, (name, arguments) in enumerate(calls)
        ]
    return {"name": "tool_call", "params": params}


def strict_schema(schema: Any) -> Any:
    """A copy of the schema made strict as NeMo Gym's structured_outputs server makes it before validating: every
    object that lists `properties` requires them all and takes no other.

    Example:
        >>> strict_schema({"type": "object", "properties": {"a": {"type": "string"}}})
        {'type': 'object', 'properties': {'a': {'type': 'string'}}, 'required': ['a'], 'additionalProperties': False}
    """
    schema = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("properties"), dict):
                node["required"] = list(node["properties"])
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(schema)
    return schema


def _json_schema_spec(row: Mapping[str, Any]) -> dict[str, Any]:
    kind = str(row.get("schema_type") or "json").lower()
    if kind != "json":
        raise _refuse(
            "unsupported_format",
            "/schema_type",
            f"a {kind.upper()} answer; seedwheel's json_schema verifier reads JSON",
            "import the JSON rows (schema_type json), or write a verifier for this format",
        )
    if (row.get("response_mode") or "text") != "text":
        raise _refuse(
            "unsupported_format",
            "/response_mode",
            f"the answer comes as a {row['response_mode']} (a tool call's arguments); json_schema reads the text",
            "import the rows that answer in text (response_mode text or none)",
        )
    try:
        schema = json.loads(row["schema_str"])
    except (TypeError, json.JSONDecodeError) as exc:
        raise _refuse("bad_gold", "/schema_str", f"schema_str is not JSON ({exc})", "correct it") from None
    if not isinstance(schema, dict):
        raise _refuse("bad_gold", "/schema_str", "schema_str is not a JSON object", "give a JSON Schema object")
    return {"name": "json_schema", "params": {"schema": strict_schema(schema)}}


def plain_answer(answer: Any) -> str:
    r"""A gold answer without the LaTeX math delimiters around it (`\(\frac{1}{2}\)` -> `\frac{1}{2}`).

    Example:
        >>> plain_answer("\\(\\sqrt{2}\\)")
        '\\sqrt{2}'
    """
    text = str(answer).strip()
    found = _LATEX_DELIMITERS.match(text)
    return found.group(1).strip() if found else text


def _answer_spec(row: Mapping[str, Any], verifier_name: str) -> dict[str, Any]:
    answer = row["expected_answer"]
    if answer is None or not str(answer).strip():
        raise _refuse("bad_gold", "/expected_answer", "expected_answer is empty", "fill it in, or delete the row")
    try:
        verifier: Verifier | None = REGISTRY.get(verifier_name)
    except UnknownVerifierError:
        verifier = None  # reported by the seed checks as unknown_verifier, with the registered names
    params = None
    if verifier is not None:
        try:
            params = verifier.answer_params(plain_answer(answer))
        except ValueError as exc:
            fix = "correct the answer, or delete the row"
            raise _refuse("bad_answer", "/expected_answer", str(exc), fix) from None
    return {"name": verifier_name, "params": params if params is not None else {"answer": plain_answer(answer)}}


def row_verifier(row: Mapping[str, Any], answer_verifier: str = DEFAULT_ANSWER_VERIFIER) -> dict[str, Any]:
    """The seedwheel verifier spec `{name, params}` that judges a NeMo Gym row (the module docstring's table).

    Args:
        row: a NeMo Gym row, or the body of a verify request (the row's fields and the response).
        answer_verifier: the verifier of `expected_answer` rows.

    Raises:
        NemoGymRowError: the row has no gold seedwheel can read, or one it cannot state.

    Example:
        >>> row_verifier({"expected_answer": "\\\\(\\\\sqrt{2}\\\\)"}, "text_answer")
        {'name': 'text_answer', 'params': {'answers': ['\\\\sqrt{2}']}}
    """
    if isinstance(row.get("verifier"), Mapping):
        return dict(row["verifier"])
    if "expected_answers" in row:
        return _tool_call_spec(row)
    if "schema_str" in row:
        return _json_schema_spec(row)
    if "expected_answer" in row:
        return _answer_spec(row, answer_verifier)
    fields = ", ".join(sorted(k for k in row if k not in ("responses_create_params", "response"))) or "none"
    raise _refuse(
        "unknown_gold",
        "/",
        f"no gold seedwheel reads (its fields: {fields})",
        "import rows of xlam_fc (expected_answers), structured_outputs (schema_str) or math (expected_answer), "
        "or add a seedwheel verifier {name, params} to each row",
    )


def _reference(spec: Mapping[str, Any], row: Mapping[str, Any]) -> str | None:
    """The known-good answer the gold itself gives, or None (a schema alone gives none)."""
    if isinstance(row.get("reference"), str) and row["reference"].strip():
        return str(row["reference"])
    if spec["name"] == "tool_call" and "expected_answers" in row:
        calls = [_call_arguments(call, f"/expected_answers/{i}") for i, call in enumerate(row["expected_answers"])]
        return tagged_calls([{"name": name, "arguments": arguments} for name, arguments in calls])
    if "expected_answer" in row:
        return f"\\boxed{{{plain_answer(row['expected_answer'])}}}"
    return None


def input_key(create: Any) -> str:
    """A canonical key of a row's prompt: its messages' roles and text, whatever else the input items carry."""
    messages = create.get("input") if isinstance(create, Mapping) else None
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    items = [[m.get("role"), _text(m.get("content"))] if isinstance(m, Mapping) else m for m in (messages or [])]
    return json.dumps(items, ensure_ascii=False, sort_keys=True)


# ----- rollouts: a Responses API response -> a seedwheel completion -----


def response_messages(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A Responses API response's `output` as OpenAI chat messages (see the module docstring).

    Raises:
        NemoGymRowError: the response has no `output` list.

    Example:
        >>> output = [{"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c1"},
        ...           {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}]
        >>> [m["role"] for m in response_messages({"output": output})]
        ['assistant', 'assistant']
    """
    output = response.get("output") if isinstance(response, Mapping) else None
    if not isinstance(output, list):
        raise _refuse(
            "no_output", "/response/output", "the response has no output list", "send the Responses API response"
        )
    messages: list[dict[str, Any]] = []
    for item in output:
        kind = item.get("type") if isinstance(item, Mapping) else None
        if kind == "message" and item.get("role", "assistant") == "assistant":
            messages.append({"role": "assistant", "content": _text(item.get("content"))})
        elif kind == "function_call":
            call = {
                "id": item.get("call_id") or item.get("id") or "",
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments", "")},
            }
            if messages and messages[-1]["role"] == "assistant" and not messages[-1]["content"].strip():
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output_text = item.get("output")
            content = output_text if isinstance(output_text, str) else json.dumps(output_text)
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": content})
    return messages


def completion_from_response(response: Mapping[str, Any]) -> Completion:
    """A Responses API response as seedwheel's `Completion`: the text of its last assistant message, the calls of
    all its `function_call` items.

    Example:
        >>> output = [{"type": "function_call", "name": "f", "arguments": '{"x": 1}', "call_id": "c1"}]
        >>> completion_from_response({"output": output}).tool_calls[0]["function"]["name"]
        'f'
    """
    return Completion.from_any(response_messages(response))


# ----- reading a NeMo Gym file into seed records -----


@dataclass
class NemoGymImport:
    """Rows read from a NeMo Gym file: the seed records to check, and the rows that could not become one."""

    records: list[SeedRecord] = field(default_factory=list)
    problems: list[SeedProblem] = field(default_factory=list)


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """`(line, row)` for each non-blank line of a JSONL file; a row that is not a JSON object is its problem's text.

    Raises:
        NemoGymFileError: the file cannot be read as UTF-8 text.
    """
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise NemoGymFileError(f"{path}: no such file", hint="check the path") from None
    except UnicodeDecodeError as exc:
        raise NemoGymFileError(f"{path}: not UTF-8 text ({exc.reason})", hint="save the file as UTF-8") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            yield number, f"invalid JSON: {exc.msg} at column {exc.colno}"
            continue
        yield number, row if isinstance(row, dict) else "not a JSON object"


class NemoGymFileError(SeedwheelError, ValueError):
    """A NeMo Gym file that cannot be read at all (missing, not UTF-8); the message names it and the fix."""


def _rollout_answers(path: Path | None) -> dict[str, list[Completion]]:
    """The completions of a rollouts file by the canonical key of their prompt, in file order."""
    answers: dict[str, list[Completion]] = {}
    if path is None:
        return answers
    for number, rollout in read_jsonl(path):
        if isinstance(rollout, str) or not isinstance(rollout.get("response"), Mapping):
            raise NemoGymFileError(
                f"{path}:{number}: not a rollout (a row with its response)", hint="give NeMo Gym's rollouts file"
            )
        key = input_key(rollout.get("responses_create_params"))
        answers.setdefault(key, []).append(completion_from_response(rollout["response"]))
    return answers


def _passing(spec: Mapping[str, Any], candidates: list[Completion], context: VerifyContext | None) -> str | None:
    """The first rollout answer that passes the row's verifier, as a seed's reference text."""
    for completion in candidates:
        try:
            passed = verify({"verifier": spec}, completion, context=context).passed
        except (UnknownVerifierError, ValueError, KeyError, TypeError):
            return None  # a bad spec: the seed checks report it
        if passed:
            if completion.tool_calls:
                calls = [_call_arguments(call["function"], "/response") for call in completion.tool_calls]
                return tagged_calls([{"name": name, "arguments": arguments} for name, arguments in calls])
            return completion.text
    return None


def read_seed_records(
    source: Path,
    *,
    family: str,
    answer_verifier: str = DEFAULT_ANSWER_VERIFIER,
    rollouts: Path | None = None,
    tags: Sequence[str] = (),
    source_name: str | None = None,
    limit: int | None = None,
    context: VerifyContext | None = None,
) -> NemoGymImport:
    """A NeMo Gym JSONL file's rows as seed records, and a located problem per row that cannot become one.

    Args:
        source: the rows (`example.jsonl`, a train or validation file).
        family: the family the seeds join (the folder of the seed file they are written to).
        answer_verifier: the verifier of `expected_answer` rows (`math_answer`; `text_answer` for exact text).
        rollouts: NeMo Gym rollouts of these rows: a row whose gold gives no reference (a schema alone) takes the
            first rollout answer of its prompt that passes its verifier.
        tags: tags on every seed; each also gets `source:<name>:<line>`.
        source_name: the name in that tag (default: the file's name).
        limit: read the first this many rows only.
        context: where verifier fixtures resolve.

    Returns:
        The records (checked later with `validators.seeds.check_seed_records`) and the rows' problems.

    Raises:
        NemoGymFileError: the source or rollouts file cannot be read.

    Example:
        >>> found = read_seed_records(Path("example.jsonl"), family="tool_call")  # doctest: +SKIP
        >>> len(found.records), [str(p) for p in found.problems]  # doctest: +SKIP
        (5, [])
    """
    answers = _rollout_answers(rollouts)
    name = source_name or Path(source).name
    found = NemoGymImport()
    for number, row in read_jsonl(source):
        if limit is not None and len(found.records) + len(found.problems) >= limit:
            break
        try:
            raw = _seed(row, answer_verifier, answers, rollouts, context)
        except NemoGymRowError as exc:
            found.problems.append(SeedProblem(str(source), number, exc.problem))
            continue
        raw["tags"] = [*tags, *raw.get("tags", []), f"{SOURCE_TAG}:{name}:{number}"]
        found.records.append(SeedRecord(str(source), number, family, raw))
    return found


def _seed(
    row: dict[str, Any] | str,
    answer_verifier: str,
    answers: Mapping[str, list[Completion]],
    rollouts: Path | None,
    context: VerifyContext | None,
) -> dict[str, Any]:
    if isinstance(row, str):
        raise _refuse("unreadable_row", "/", row, "fix the row, or delete it")
    prompt = row_prompt(row)
    spec = row_verifier(row, answer_verifier)
    reference = _reference(spec, row)
    if reference is None:
        reference = _passing(spec, answers.get(input_key(row.get("responses_create_params")), []), context)
    if reference is None:
        where = f"none of the rollouts in {rollouts} of this prompt passes" if rollouts else "no rollouts were given"
        raise _refuse(
            "missing_reference",
            "/reference",
            f"the row's gold is a schema, not an answer, and {where}",
            "pass --rollouts with NeMo Gym's rollouts of these rows, or add a `reference` answer to the row",
        )
    raw: dict[str, Any] = {"prompt": prompt, "verifier": spec, "reference": reference}
    if isinstance(row.get("task_id"), str) and isinstance(row.get("verifier"), Mapping):
        raw["task_id"] = row["task_id"]  # a seedwheel row: the seed checks confirm it is the content hash
    return raw
