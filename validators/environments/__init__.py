"""Environments for multi-turn tool-use episodes, replayed by the `episode` verifier (`validators.verifiers.episode`).

They live inside `validators` because the episode verifier is part of the one verifier registry, and they reuse
what the other verifiers already own: the `tool_call` verifier's call parsing and argument checks, `sql_result`'s
fixture paths. The contract is in `validators.environments.base`; the built-ins are `shop` and `files`.
"""

from core import SeedwheelError
from validators.environments.base import (
    END_REASONS,
    Action,
    Answer,
    Change,
    EndReason,
    Environment,
    EpisodeLimits,
    EpisodeNotRunningError,
    Snapshot,
    ToolCallAction,
    ToolError,
    actions_from_completion,
    diff,
)
from validators.environments.files import FilesEnvironment
from validators.environments.shop import ShopEnvironment


class UnknownEnvironmentError(SeedwheelError, KeyError):
    """A name that is not a built-in environment."""

    def __str__(self) -> str:
        return str(self.args[0])


ENVIRONMENTS: dict[str, type[Environment]] = {env.name: env for env in (ShopEnvironment, FilesEnvironment)}


def environment_class(name: str) -> type[Environment]:
    """The built-in environment called `name` (`shop`, `files`).

    Raises:
        UnknownEnvironmentError: no environment has that name (the message lists them).
    """
    if name not in ENVIRONMENTS:
        raise UnknownEnvironmentError(f"unknown environment {name!r}; the environments are {', '.join(ENVIRONMENTS)}")
    return ENVIRONMENTS[name]


__all__ = [
    "END_REASONS",
    "ENVIRONMENTS",
    "Action",
    "Answer",
    "Change",
    "EndReason",
    "Environment",
    "EpisodeLimits",
    "EpisodeNotRunningError",
    "FilesEnvironment",
    "ShopEnvironment",
    "Snapshot",
    "ToolCallAction",
    "ToolError",
    "UnknownEnvironmentError",
    "actions_from_completion",
    "diff",
    "environment_class",
]
