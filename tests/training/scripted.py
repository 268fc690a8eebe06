"""Scripted policies for the episode tests: a task's reference as turns, and a policy that plays fixed turns."""

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from validators.verifiers.episode import episode_answer, episode_calls


def tool_call(name: str, arguments: Any) -> str:
    """One call as a policy writes it: a `<tool_call>` block."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def reference_script(task: Mapping[str, Any]) -> list[str]:
    """The task's reference as a policy's turns: one call per turn, then its answer."""
    calls = [tool_call(c["name"], c["arguments"]) for c in episode_calls(task["reference"])]
    return [*calls, episode_answer(task["reference"])]


def request(conversation: Sequence[Mapping[str, Any]]) -> str:
    """The user's request: which task a conversation plays."""
    return next(m["content"] for m in conversation if m["role"] == "user")


class Scripted:
    """A policy that plays a fixed list of turns per task (the last one again once the list runs out). It records
    how many conversations each call got (`batches`) and the request of every conversation it got (`seen`)."""

    def __init__(self, plays: Mapping[str, Sequence[str]], delay: float = 0.0) -> None:
        self.plays = plays
        self.delay = delay
        self.batches: list[int] = []
        self.seen: list[str] = []

    def __call__(self, conversations: Sequence[Sequence[Mapping[str, Any]]], seeds: Sequence[int]) -> list[str]:
        self.batches.append(len(conversations))
        time.sleep(self.delay)
        texts = []
        for conversation in conversations:
            self.seen.append(request(conversation))
            turn = sum(m["role"] == "assistant" for m in conversation)
            play = self.plays[request(conversation)]
            texts.append(play[min(turn, len(play) - 1)])
        return texts
