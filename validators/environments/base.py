"""The environment contract: `reset(task)`, then `step(action)` until done, over a private copy of a world.

An environment offers fixed tools (OpenAI function-tool schemas, `Environment.tools`) over a state of its own:
every `reset` builds a fresh copy of the task's initial state in a new temporary folder (a copy of a SQLite file,
a folder of files), so two episodes never see each other's writes and the seed fixtures are only ever read.
`close()` (or leaving a `with` block) removes the copy.

**Actions** are what a model does in one turn: a `ToolCallAction` (a tool's name and its raw arguments, a JSON
string or an object) or an `Answer` (text, which ends the episode). `actions_from_completion` turns a completion
into actions: its OpenAI `tool_calls` (of every assistant message, in order), else the calls written in its text
(`<tool_call>` blocks or JSON, as the `tool_call` verifier reads them), then the final answer.

**Limits** (`EpisodeLimits`) end an episode, and `end_reason` records why:

- `answered`: the model answered (a turn without a tool call);
- `max_turns`: `max_turns` turns went by without an answer (the last call still ran);
- `invalid_call`: a call the contract refuses, which ends the episode at once without running: no tool name, a
  tool that is not offered, arguments over `max_argument_bytes` (measured before parsing), arguments that are not
  a JSON object or break the tool's schema (types, required, enums, bounds, no undeclared argument);
- `tool_error`: `max_tool_errors` calls were refused by their tool (an unknown order, a file that does not
  exist); before that, each refusal comes back as an `{"error": ...}` observation the model can recover from;
- `timeout`: a turn started after `max_seconds` of wall-clock time; it does not run.

**Safety.** The tools are fixed code; nothing a model writes is executed. Values a model writes reach SQLite only as
bound parameters, never as SQL text, and reach the file system only as paths checked to stay inside the episode's
folder. An environment whose tools ran model-written code would run it in `sandbox.process`.

**State diff.** `snapshot()` reads the state as collections of records by key (`{table: {primary key: row}}`,
`{"files": {path: {"content": text}}}`), and `changes()` compares it with the snapshot taken at `reset`.
"""

from __future__ import annotations

import json
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from core import SeedwheelError
from validators.compare import show
from validators.registry import Completion, Verdict, VerifyContext
from validators.verifiers.tool_call import check_call, name_and_arguments, parse_arguments, text_calls

EndReason = Literal["answered", "max_turns", "invalid_call", "tool_error", "timeout"]
END_REASONS: tuple[EndReason, ...] = ("answered", "max_turns", "invalid_call", "tool_error", "timeout")
# A snapshot of an environment's state: collection (a table, "files") -> record key -> record.
Snapshot = dict[str, dict[str, dict[str, Any]]]


class EpisodeNotRunningError(SeedwheelError, RuntimeError):
    """An environment used against its contract: a step before `reset` or after the episode ended."""


class ToolError(SeedwheelError, ValueError):
    """A tool refused a well-formed call (an unknown order, a missing file); the message goes back to the model."""


@dataclass(frozen=True)
class EpisodeLimits:
    """What ends an episode besides an answer (see the module docstring); a task's `limits` param overrides them.

    Attributes:
        max_turns: turns (tool calls and the answer) an episode may take.
        max_argument_bytes: UTF-8 bytes of one call's tool name plus raw arguments.
        max_tool_errors: tool refusals that end the episode (`tool_error`).
        max_seconds: wall-clock seconds after which no further turn runs (`timeout`).
    """

    max_turns: int = 30
    max_argument_bytes: int = 16_384
    max_tool_errors: int = 3
    max_seconds: float = 20.0

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_argument_bytes", "max_tool_errors"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}; e.g. {name}=1")
        seconds = self.max_seconds
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
            raise ValueError(f"max_seconds must be a positive number, got {seconds!r}; e.g. max_seconds=5")


@dataclass(frozen=True)
class ToolCallAction:
    """One tool call as the model wrote it: the tool's name (None when it gave none) and raw arguments."""

    name: str | None
    arguments: Any
    call_id: str | None = None


@dataclass(frozen=True)
class Answer:
    """The model's final answer: a turn without a tool call, which ends the episode."""

    text: str


Action = ToolCallAction | Answer


def actions_from_completion(completion: Completion) -> list[Action]:
    """The turns of a completion: each tool call in order, then the answer (the last assistant text).

    Args:
        completion: a completion with OpenAI `tool_calls`, or text with calls in it (`<tool_call>` blocks, JSON).

    Returns:
        `ToolCallAction`s, then one `Answer`.

    Example:
        >>> actions_from_completion(Completion('<tool_call>{"name": "f", "arguments": {}}</tool_call>'))[0]
        ToolCallAction(name='f', arguments={}, call_id=None)
    """
    actions: list[Action] = []
    for call in list(completion.tool_calls) or text_calls(completion.text):
        name, arguments = name_and_arguments(call)
        call_id = call.get("id") if isinstance(call, Mapping) else None
        actions.append(ToolCallAction(name, arguments, call_id if isinstance(call_id, str) else None))
    return [*actions, Answer(completion.text)]


@dataclass(frozen=True)
class Change:
    """One record an episode inserted, changed or deleted (`before`/`after` None for an insert/a delete)."""

    collection: str
    key: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    def describe(self) -> str:
        """`orders/1027: status 'pending' -> 'cancelled'`, `refunds/1: inserted {...}`, `files/a.txt: deleted`."""
        where = f"{self.collection}/{self.key}"
        if self.before is None:
            return f"{where}: inserted {show(self.after)}"
        if self.after is None:
            return f"{where}: deleted"
        before, after = self.before, self.after
        fields = [k for k in {**before, **after} if before.get(k) != after.get(k)]
        return f"{where}: " + ", ".join(f"{k} {show(before.get(k))} -> {show(after.get(k))}" for k in fields)


def diff(before: Snapshot, after: Snapshot) -> list[Change]:
    """Every record that differs between two snapshots, sorted by collection and key.

    Example:
        >>> [c.describe() for c in diff({"t": {"1": {"v": 1}}}, {"t": {"1": {"v": 2}, "2": {"v": 0}}})]
        ['t/1: v 1 -> 2', 't/2: inserted {"v": 0}']
    """
    changes = []
    for collection in sorted({*before, *after}):
        old, new = before.get(collection, {}), after.get(collection, {})
        for key in sorted({*old, *new}):
            if old.get(key) != new.get(key):
                changes.append(Change(collection, key, old.get(key), new.get(key)))
    return changes


def _argument_bytes(name: str, arguments: Any) -> int | None:
    """The size of a call as written (None when its arguments cannot be written as JSON at all)."""
    try:
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return None
    return len(name.encode("utf-8", "replace")) + len(raw.encode("utf-8", "replace"))


class Environment(ABC):
    """A world a model acts in through fixed tools, one private copy per episode (see the module docstring).

    Subclasses set `name`, `tools` (OpenAI function tools, each handled by a method `tool_<name>` that takes the
    validated arguments as keywords, returns JSON-ready data and raises `ToolError` to refuse), `read_only_tools`
    and `state_schema` (JSON Schema of a task's `state` param), and implement `_open`, `_close` and `snapshot`.

    Example:
        >>> from validators.environments import environment_class
        >>> task = {"prompt": [{"role": "user", "content": "Delete a.txt"}],
        ...         "verifier": {"params": {"state": {"files": {"a.txt": "hi"}}}}}
        >>> with environment_class("files")() as env:
        ...     _ = env.reset(task)
        ...     env.step(ToolCallAction("delete_file", {"path": "a.txt"})), env.step(Answer("Done."))
        ...     [c.describe() for c in env.changes()], env.end_reason
        (('{"deleted": "a.txt"}', False), ('{"episode_end": "answered"}', True))
        (['files/a.txt: deleted'], 'answered')
    """

    name: ClassVar[str]
    tools: ClassVar[list[dict[str, Any]]]
    state_schema: ClassVar[dict[str, Any]]
    # Tools that only read: a call to any other tool is there to change the state, and one that changes nothing
    # (refused, or a no-op) is a wasted move the episode verifier does not pay.
    read_only_tools: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        *,
        context: VerifyContext | None = None,
        limits: EpisodeLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.context = context or VerifyContext()
        self.limits = limits or EpisodeLimits()
        self._clock = clock
        self._parameters = {tool["function"]["name"]: tool["function"]["parameters"] for tool in self.tools}
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._initial: Snapshot = {}
        self._started = 0.0
        self.turns = 0
        self.tool_errors = 0
        self.end_reason: EndReason | None = None
        self.end_detail = ""
        # The calls that ran and returned a result, with their parsed arguments (a refused call is not here).
        self.calls: list[tuple[str, Mapping[str, Any]]] = []

    # -- what each environment implements -------------------------------------------------------------------------

    @abstractmethod
    def _open(self, state: Mapping[str, Any], folder: Path) -> None:
        """Build this episode's own copy of the initial `state` (a task's `state` param) inside `folder`."""

    @abstractmethod
    def _close(self) -> None:
        """Release what `_open` holds (connections); the folder itself is removed by `close`."""

    @abstractmethod
    def snapshot(self) -> Snapshot:
        """The episode's current state as collections of records by key."""

    @classmethod
    def state_problems(cls, state: Mapping[str, Any], context: VerifyContext) -> list[str]:
        """Problems with a task's `state` beyond `state_schema` (a fixture that does not exist), as messages."""
        return []

    @classmethod
    def fixtures(cls, state: Mapping[str, Any], context: VerifyContext) -> list[Path]:
        """Files the initial state is copied from (verdict caches key on their content)."""
        return []

    # -- the contract ---------------------------------------------------------------------------------------------

    def reset(self, task: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Start an episode on a fresh copy of the task's initial state.

        Args:
            task: a task record (or `{"prompt", "verifier": {"params": {"state": ...}}}`).

        Returns:
            The first observation: the task's prompt messages.
        """
        self.close()
        self._folder = tempfile.TemporaryDirectory(prefix=f"seedwheel-{self.name}-")
        self._open(task["verifier"]["params"]["state"], Path(self._folder.name))
        self._initial = self.snapshot()
        self._started = self._clock()
        self.turns = self.tool_errors = 0
        self.end_reason, self.end_detail = None, ""
        self.calls = []
        return [dict(message) for message in task.get("prompt", [])]

    def step(self, action: Action) -> tuple[str, bool]:
        """Take one turn.

        Returns:
            `(observation, done)`: the tool's result as JSON text (`{"error": ...}` when it refused), or, once the
            episode ends, `{"episode_end": <reason>[, "detail": ...]}`.

        Raises:
            EpisodeNotRunningError: the episode was not started or has ended.
        """
        if self._folder is None or self.end_reason is not None:
            raise EpisodeNotRunningError(f"{self.name}: step() needs a running episode; call reset(task) first")
        if self._clock() - self._started > self.limits.max_seconds:
            return self._end("timeout", f"the episode ran past {self.limits.max_seconds} s")
        self.turns += 1
        if isinstance(action, Answer):
            return self._end("answered")
        arguments = self._checked(action)
        if isinstance(arguments, str):
            return self._end("invalid_call", arguments)
        assert action.name is not None  # `_checked` refuses a call without a name
        try:
            result = getattr(self, f"tool_{action.name}")(**arguments)
        except ToolError as exc:
            self.tool_errors += 1
            if self.tool_errors >= self.limits.max_tool_errors:
                return self._end("tool_error", f"{action.name}: {exc}")
            observation = json.dumps({"error": str(exc)}, ensure_ascii=False)
        else:
            self.calls.append((action.name, arguments))
            observation = json.dumps(result, ensure_ascii=False)
        if self.turns >= self.limits.max_turns:
            return self._end("max_turns", f"{self.turns} turns without an answer")
        return observation, False

    def changes(self) -> list[Change]:
        """What the episode changed so far: the current state against the one `reset` built."""
        return diff(self._initial, self.snapshot())

    def close(self) -> None:
        """End the episode's hold on its state and remove its folder (safe to call twice)."""
        if self._folder is not None:
            self._close()
            self._folder.cleanup()
            self._folder = None

    def __enter__(self) -> Environment:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- helpers --------------------------------------------------------------------------------------------------

    @property
    def folder(self) -> Path | None:
        """The running episode's private folder (None between episodes)."""
        return None if self._folder is None else Path(self._folder.name)

    def _end(self, reason: EndReason, detail: str = "") -> tuple[str, bool]:
        self.end_reason, self.end_detail = reason, detail
        return json.dumps({"episode_end": reason, **({"detail": detail} if detail else {})}, ensure_ascii=False), True

    def _checked(self, action: ToolCallAction) -> Mapping[str, Any] | str:
        """The call's arguments when the contract accepts the call, else why not (the call is not run)."""
        if action.name is None:
            return "a call without a tool name"
        size = _argument_bytes(action.name, action.arguments)
        if size is None or size > self.limits.max_argument_bytes:
            written = "arguments that are not JSON" if size is None else f"{size} bytes"
            return f"{show(action.name)}: {written}, over the limit of {self.limits.max_argument_bytes} bytes"
        schema = self._parameters.get(action.name)
        if schema is None:
            return f"unknown tool {show(action.name)}; the tools are {', '.join(self._parameters)}"
        arguments = parse_arguments(action.arguments)
        if isinstance(arguments, Verdict):
            return f"{action.name}: {arguments.reason}"
        checked = check_call(action.name, arguments, schema)
        problem = checked.missing or checked.invalid
        return f"{action.name}: {problem.reason}" if problem is not None else arguments


def tool(name: str, description: str, properties: Mapping[str, Any], required: Sequence[str]) -> dict[str, Any]:
    """An OpenAI function tool whose arguments are exactly `properties` (none undeclared).

    Example:
        >>> tool("ping", "Check the line.", {}, [])["function"]["parameters"]["additionalProperties"]
        False
    """
    parameters = {"type": "object", "properties": dict(properties), "required": list(required)}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {**parameters, "additionalProperties": False},
        },
    }
