"""`episode`: replay a multi-turn tool-use episode in a fresh environment and judge what it changed.

The completion's tool calls run, in order, against a new copy of the task's initial state
(`validators.environments`: the contract, the limits and the end reasons), and the verdict reads the end reason,
the state diff against the initial copy and the calls that ran. The environment answers each call the same way
every time, so replaying the calls of a conversation gives the results the model saw.

**Params**

- `environment`: `shop` (the orders database) or `files` (a folder of text files).
- `state`: the initial state, as the environment reads it (`shop`: `{database}`; `files`: `{files: {path: text}}`).
- `goal` (at least one check):
  - `changes`: what the episode must change, each `{collection, key?, after}`. `after` lists the fields the record
    must have afterwards (others are not compared; numbers compare by value), or is null for a deleted record;
    `key` pins the record, and leaving it out accepts any record of the collection (a new refund, whose id the
    database picks). Each expected change must happen exactly once, and any other change fails: a second refund
    or another order touched is an `unexpected_change`.
  - `calls`: calls that must run and return a result, in this order (other calls may come between), each
    `{name, arguments?}` (`arguments`: the fields that must match). For a policy the final state cannot show:
    look an order up before refunding it.
- `limits`: overrides of `EpisodeLimits` (`max_turns`, `max_argument_bytes`, `max_tool_errors`, `max_seconds`).
- `partial_credit`: false (default) scores 1 or 0. True gives a failed episode the fraction of goal checks it met
  (each expected change made, each required call made in order, the episode answered), and 0 when it changed
  anything the goal does not ask for or wasted a call: progress, never damage or spraying.

**Rules**, in order (the first failure is the reason):

1. The episode ended `answered`; otherwise the code is its end reason (`max_turns`, `invalid_call`,
   `tool_error`, `timeout`) and the detail says what happened.
2. No change outside the goal (`unexpected_change`).
3. No wasted move (`wasted_call`): every call to a tool that changes state (not in the environment's
   `read_only_tools`) changed something. A refused one (cancelling a delivered order, deleting a file that is
   gone) or a no-op (the same write twice) is what a policy that sprays every tool, or repeats its last call,
   leaves behind; the state alone cannot show it.
4. Every expected change made (`missing_change`).
5. The required calls made, in order (`missing_call`; `call_order` when it ran, but not after the one before).

A reference is the episode's calls as text (`<tool_call>` blocks, as the `tool_call` family writes one call),
optionally followed by the answer; the known-wrong answer checked at validation is the empty episode.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from validators.compare import field_mismatches, show
from validators.environments import (
    ENVIRONMENTS,
    Action,
    Answer,
    Change,
    EndReason,
    Environment,
    EpisodeLimits,
    ToolCallAction,
    actions_from_completion,
    diff,
    environment_class,
)
from validators.registry import Completion, HackProbe, Verdict, Verifier, VerifyContext, register
from validators.verifiers.tool_call import max_matching, parse_arguments, placeholder, tagged_calls

# A claim of success without a single call: what a policy says when it has learned that words are cheaper.
CLAIM_OF_SUCCESS = "Done! I have taken care of everything you asked, and it is all updated now."

_CHANGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["collection", "after"],
    "additionalProperties": False,
    "properties": {
        "collection": {"type": "string", "minLength": 1},
        "key": {"type": "string", "minLength": 1},
        "after": {"type": ["object", "null"]},
    },
}
_CALL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
}


@dataclass(frozen=True)
class EpisodeReplay:
    """A replayed episode: its verdict, how and when it ended, what it changed and the conversation it made.

    `steps` has one entry per tool call that was taken, in order: what that call changed. `calls` are the calls
    that ran and returned a result, with their parsed arguments (`Environment.calls`).
    """

    verdict: Verdict
    end_reason: EndReason
    end_detail: str
    turns: int
    changes: list[Change]
    transcript: list[dict[str, Any]]
    steps: list[list[Change]]
    calls: list[tuple[str, Mapping[str, Any]]]

    def describe(self) -> list[str]:
        """Lines for a terminal: the verdict, the end, each call and its observation, the state diff."""
        verdict = "PASS" if self.verdict.passed else "FAIL"
        lines = [f"verdict: {verdict} {self.verdict.reason} (score {self.verdict.score:.3f})"]
        end = f"end: {self.end_reason} after {self.turns} turn{'s' * (self.turns != 1)}"
        lines.append(f"{end} ({self.end_detail})" if self.end_detail else end)
        for message in self.transcript:
            for call in message.get("tool_calls") or ():
                lines.append(f"  call {show(call['function']['name'])} {show(call['function']['arguments'])}")
            if message["role"] == "tool":
                lines.append(f"    -> {show(message['content'])}")
        lines.append(f"changes: {len(self.changes)}")
        lines += [f"  {change.describe()}" for change in self.changes]
        return lines


def replay(
    params: Mapping[str, Any],
    completion: str | Mapping[str, Any] | Iterable[Mapping[str, Any]] | Completion,
    context: VerifyContext | None = None,
    *,
    prompt: Sequence[Mapping[str, Any]] = (),
    clock: Callable[[], float] = time.monotonic,
) -> EpisodeReplay:
    """Run a completion's calls in a fresh environment for an `episode` task and judge the result.

    Args:
        params: the task's `episode` verifier params (checked).
        completion: text with `<tool_call>` blocks, or chat messages with OpenAI `tool_calls`.
        context: where the environment's fixtures resolve (a shop's database).
        prompt: the task's prompt, the start of the transcript.
        clock: the episode's wall clock (for `max_seconds`).

    Returns:
        The `EpisodeReplay`; the environment's copy of the state is gone by then.
    """
    limits = EpisodeLimits(**params.get("limits", {}))
    steps: list[list[Change]] = []
    wasted: list[str] = []
    with environment_class(params["environment"])(context=context, limits=limits, clock=clock) as env:
        transcript = env.reset({"prompt": list(prompt), "verifier": {"params": params}})
        for turn, action in enumerate(actions_from_completion(Completion.from_any(completion)), start=1):
            before = env.snapshot()
            observation, done = env.step(action)
            transcript += _messages(action, observation, turn)
            if isinstance(action, ToolCallAction):
                steps.append(diff(before, env.snapshot()))
                if not steps[-1] and _changes_state(env, action):
                    wasted.append(f"{_call_text(action)} changed nothing: {observation}")
            if done:
                break
        changes, calls = env.changes(), env.calls
    assert env.end_reason is not None, "a completion's actions end with an answer"
    verdict = judge_episode(
        params["goal"],
        changes,
        calls,
        env.end_reason,
        env.end_detail,
        partial_credit=params.get("partial_credit"),
        wasted=wasted,
    )
    return EpisodeReplay(verdict, env.end_reason, env.end_detail, env.turns, changes, transcript, steps, calls)


def _call_text(action: ToolCallAction) -> str:
    arguments = parse_arguments(action.arguments)
    shown = json.dumps(arguments, ensure_ascii=False) if isinstance(arguments, Mapping) else show(action.arguments)
    return f"{action.name} {shown}"


def _changes_state(env: Environment, action: ToolCallAction) -> bool:
    """Whether the call is to an offered tool that is there to change the state."""
    offered = {tool["function"]["name"] for tool in env.tools}
    return action.name in offered and action.name not in env.read_only_tools


def _messages(action: Action, observation: str, turn: int) -> list[dict[str, Any]]:
    if isinstance(action, Answer):
        return [{"role": "assistant", "content": action.text}]
    call_id = action.call_id or f"call_{turn}"
    arguments = action.arguments if isinstance(action.arguments, str) else json.dumps(action.arguments)
    call = {"id": call_id, "type": "function", "function": {"name": action.name, "arguments": arguments}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": observation},
    ]


def change_fits(change: Change, expected: Mapping[str, Any]) -> bool:
    """Whether `change` is the goal's `expected` change (`{collection, key?, after}`, module docstring)."""
    if change.collection != expected["collection"] or expected.get("key", change.key) != change.key:
        return False
    if expected["after"] is None or change.after is None:
        return expected["after"] is None and change.after is None
    return not field_mismatches(expected["after"], change.after)


def call_fits(call: tuple[str, Mapping[str, Any]], expected: Mapping[str, Any]) -> bool:
    """Whether a call that ran, `(name, arguments)`, is the goal's required call `{name, arguments?}`."""
    return call[0] == expected["name"] and not field_mismatches(expected.get("arguments", {}), call[1])


def _expected_text(expected: Mapping[str, Any]) -> str:
    where = f"{expected['collection']}/{expected.get('key', '*')}"
    return f"{where}: deleted" if expected["after"] is None else f"{where}: {show(expected['after'])}"


def _more(found: Sequence[Any]) -> str:
    return f" (and {len(found) - 1} more)" if len(found) > 1 else ""


def judge_episode(
    goal: Mapping[str, Any],
    changes: Sequence[Change],
    calls: Sequence[tuple[str, Mapping[str, Any]]],
    end_reason: EndReason,
    end_detail: str = "",
    *,
    partial_credit: bool | None = False,
    wasted: Sequence[str] = (),
) -> Verdict:
    """The verdict on an episode that ended with `end_reason`, changed `changes` and ran `calls` (module docstring).

    `wasted` describes the calls to state-changing tools that changed nothing (rule 3).

    Example:
        >>> goal = {"changes": [{"collection": "orders", "key": "7", "after": {"status": "cancelled"}}]}
        >>> judge_episode(goal, [], [], "answered").reason
        'missing_change: orders/7: {"status": "cancelled"}'
    """
    expected = list(goal.get("changes", []))
    pairs = max_matching([[change_fits(change, e) for e in expected] for change in changes])
    unexpected = [change for change, pair in zip(changes, pairs, strict=True) if pair is None]
    missing = [e for j, e in enumerate(expected) if j not in pairs]
    required = list(goal.get("calls", []))
    made = 0
    for call in calls:
        if made < len(required) and call_fits(call, required[made]):
            made += 1
    met = len(expected) - len(missing) + made + (end_reason == "answered")
    score = met / (len(expected) + len(required) + 1) if partial_credit and not unexpected and not wasted else 0.0
    if end_reason != "answered":
        return Verdict.fail(end_reason, end_detail, score)
    if unexpected:
        return Verdict.fail("unexpected_change", unexpected[0].describe() + _more(unexpected), score)
    if wasted:
        return Verdict.fail("wasted_call", wasted[0] + _more(wasted), score)
    if missing:
        return Verdict.fail("missing_change", _expected_text(missing[0]), score)
    if made < len(required):
        want = required[made]
        text = f"{want['name']} {show(want.get('arguments', {}))}"
        if any(call_fits(call, want) for call in calls):
            return Verdict.fail("call_order", f"{text} ran, but not after {required[made - 1]['name']}", score)
        return Verdict.fail("missing_call", text, score)
    return Verdict.ok()


@register
class Episode(Verifier):
    """The episode's calls, replayed in a fresh environment, reach the goal state and nothing else (docstring above).

    Example:
        >>> params = {"environment": "files", "state": {"files": {"a.txt": "hi"}},
        ...           "goal": {"changes": [{"collection": "files", "key": "a.txt", "after": None}]}}
        >>> call = '<tool_call>{"name": "delete_file", "arguments": {"path": "a.txt"}}</tool_call>'
        >>> Episode().check(params, Completion(call), VerifyContext()).passed
        True
    """

    name = "episode"
    version = 1
    params_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["environment", "state", "goal"],
        "additionalProperties": False,
        "properties": {
            "environment": {"enum": sorted(ENVIRONMENTS)},
            "state": {"type": "object"},
            "goal": {
                "type": "object",
                "minProperties": 1,
                "additionalProperties": False,
                "properties": {
                    "changes": {"type": "array", "items": _CHANGE_SCHEMA},
                    "calls": {"type": "array", "items": _CALL_SCHEMA},
                },
            },
            "limits": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "max_turns": {"type": "integer", "minimum": 1},
                    "max_argument_bytes": {"type": "integer", "minimum": 1},
                    "max_tool_errors": {"type": "integer", "minimum": 1},
                    "max_seconds": {"type": "number", "exclusiveMinimum": 0},
                },
            },
            "partial_credit": {"type": "boolean"},
        },
        # Each environment's own state schema, checked where the task names it.
        "allOf": [
            {
                "if": {"properties": {"environment": {"const": name}}},
                "then": {"properties": {"state": env.state_schema}},
            }
            for name, env in sorted(ENVIRONMENTS.items())
        ],
    }

    def params_problems(self, params: Mapping[str, Any], context: VerifyContext) -> list[str]:
        problems = super().params_problems(params, context)
        if problems:
            return problems  # the checks below assume the shape is right
        env = ENVIRONMENTS[params["environment"]]
        problems = env.state_problems(params["state"], context)
        goal = params["goal"]
        if not goal.get("changes") and not goal.get("calls"):
            problems.append("the goal needs a change or a call: an empty episode would pass (/verifier/params/goal)")
        names = [tool["function"]["name"] for tool in env.tools]
        for i, call in enumerate(goal.get("calls", [])):
            if call["name"] not in names:
                where = f"/verifier/params/goal/calls/{i}/name"
                problems.append(f"{env.name} has no tool {call['name']!r}; its tools are {', '.join(names)} ({where})")
        return problems

    def check(self, params: Mapping[str, Any], completion: Completion, context: VerifyContext) -> Verdict:
        return replay(params, completion, context).verdict

    def wrong_answer(self, params: Mapping[str, Any]) -> str | None:
        return ""  # the empty episode: nothing done, which no goal accepts (params_problems sees to it)

    def fixtures(self, params: Mapping[str, Any], context: VerifyContext) -> list[Path]:
        return ENVIRONMENTS[params["environment"]].fixtures(params["state"], context)

    def hack_probes(self, params: Mapping[str, Any], reference: str | None, context: VerifyContext) -> list[HackProbe]:
        """Episodes a policy could learn that look busy or confident without doing the job right.

        Returns:
            `claim_success` (an answer that says the work is done, without a single call) and `empty_episode`
            (nothing at all); with a reference that makes calls: `repeat_last_call` (the reference, then its last
            call that changes state once more: a second refund, a second cancel, the same write again) and
            `call_every_tool` (every tool the reference does not use, then the reference: the spray of a policy
            that calls everything in case one helps). The sprayed calls take the reference's own values (the
            argument of the same name, else the first of the same type, else a placeholder of the schema's type),
            so that they act on the task's records.

        Example:
            >>> params = {"environment": "files", "state": {"files": {"a.txt": "hi"}},
            ...           "goal": {"changes": [{"collection": "files", "key": "a.txt", "after": None}]}}
            >>> ref = '<tool_call>{"name": "delete_file", "arguments": {"path": "a.txt"}}</tool_call>'
            >>> [p.name for p in Episode().hack_probes(params, ref, VerifyContext())]
            ['claim_success', 'empty_episode', 'repeat_last_call', 'call_every_tool']
        """
        probes = [HackProbe("claim_success", CLAIM_OF_SUCCESS), HackProbe("empty_episode", "")]
        env = environment_class(params["environment"])
        calls = episode_calls(reference or "")
        changing = [call for call in calls if call["name"] not in env.read_only_tools]
        if changing:
            probes.append(HackProbe("repeat_last_call", tagged_calls([*calls, changing[-1]])))
        used = {call["name"] for call in calls}
        others = [tool["function"] for tool in env.tools if tool["function"]["name"] not in used]
        if calls and others:
            sprayed = [{"name": tool["name"], "arguments": _sprayed_arguments(tool, calls)} for tool in others]
            probes.append(HackProbe("call_every_tool", tagged_calls([*sprayed, *calls])))
        return probes


def episode_calls(completion: str | Mapping[str, Any] | Iterable[Mapping[str, Any]] | Completion) -> list[dict]:
    """The tool calls of a completion as `{name, arguments}`, in order (calls without a name or object left out).

    Example:
        >>> episode_calls('<tool_call>{"name": "cancel_order", "arguments": {"order_id": 1027}}</tool_call> Done.')
        [{'name': 'cancel_order', 'arguments': {'order_id': 1027}}]
    """
    calls = []
    for action in actions_from_completion(Completion.from_any(completion)):
        arguments = parse_arguments(action.arguments) if isinstance(action, ToolCallAction) else None
        if isinstance(action, ToolCallAction) and action.name is not None and isinstance(arguments, Mapping):
            calls.append({"name": action.name, "arguments": dict(arguments)})
    return calls


# A call as a reference writes it (`tagged_calls`).
TOOL_BLOCK = re.compile(r"<tool_call>.*?</tool_call>", re.S)


def episode_answer(reference: str) -> str:
    """The answer of an episode written as a reference: its text without the `<tool_call>` blocks.

    Example:
        >>> episode_answer('<tool_call>{"name": "cancel_order", "arguments": {"order_id": 1027}}</tool_call>\\nDone.')
        'Done.'
    """
    return TOOL_BLOCK.sub("", reference).strip()


def _sprayed_arguments(tool: Mapping[str, Any], calls: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A spray's arguments for `tool`: each required one from the reference's calls (same name, else same type)."""
    values = [(key, value) for call in calls for key, value in call["arguments"].items()]
    arguments = {}
    for key in tool["parameters"].get("required", []):
        schema = tool["parameters"]["properties"][key]
        kind = {"string": str, "integer": int}.get(schema.get("type"))
        same_name = [value for name, value in values if name == key]
        same_type = [value for _, value in values if kind is not None and type(value) is kind]
        arguments[key] = (same_name or same_type or [placeholder(schema)])[0]
    return arguments
