"""The verifier registry: one place that judges a completion for a task.

The same `verify(task, completion)` validates task records (the reference must pass), is the GRPO reward
(see `validators.rewards`) and scores evaluation. Verifiers are registered by name and version; users add
their own through the `seedwheel.verifiers` entry-point group or a dotted path (`load_verifier("pkg.mod:Cls")`).
"""

from __future__ import annotations

import importlib
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, ClassVar

import jsonschema

from core import SeedwheelError
from validators.pointers import json_pointer

ENTRY_POINT_GROUP = "seedwheel.verifiers"
# Importing these registers the built-in verifiers. The episode verifier is a module of its own, imported after
# the package: its environments reuse the other verifiers' helpers, so the package cannot import it itself.
BUILTIN_MODULES = ("validators.verifiers", "validators.verifiers.episode")


@dataclass(frozen=True)
class Verdict:
    """How one completion fared: a score in [0, 1], pass/fail, and a machine-readable reason.

    `reason` is `ok` for a pass, else `<code>: <detail>` (e.g. `answer_mismatch: expected 18, got 16`).
    """

    score: float
    passed: bool
    reason: str

    @property
    def code(self) -> str:
        """The reason's code alone (`answer_mismatch`), for counting reasons."""
        return self.reason.split(":", 1)[0]

    @classmethod
    def ok(cls, score: float = 1.0) -> Verdict:
        return cls(score=score, passed=True, reason="ok")

    @classmethod
    def fail(cls, code: str, detail: str = "", score: float = 0.0) -> Verdict:
        return cls(score=score, passed=False, reason=f"{code}: {detail}" if detail else code)


@dataclass(frozen=True)
class Completion:
    """A model's answer, normalized: its text and any OpenAI-style tool calls."""

    text: str
    tool_calls: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def from_any(cls, completion: str | Mapping[str, Any] | Iterable[Mapping[str, Any]] | Completion) -> Completion:
        """Accept plain text, one chat message, or a conversational completion.

        A conversational completion (a list of messages, as TRL passes it; with tools, also the tool results
        between the model's turns) gives the text of its last assistant message and the tool calls of all its
        assistant messages, in order: a call followed by a final answer still made that call.

        Example:
            >>> Completion.from_any([{"role": "assistant", "content": "#### 4"}]).text
            '#### 4'
        """
        if isinstance(completion, Completion):
            return completion
        if isinstance(completion, str):
            return cls(text=completion)
        if isinstance(completion, Mapping):
            return cls(text=completion.get("content") or "", tool_calls=tuple(completion.get("tool_calls") or ()))
        messages = [m for m in completion if m.get("role", "assistant") == "assistant"]
        if not messages:
            return cls(text="")
        calls = tuple(call for message in messages for call in message.get("tool_calls") or ())
        return cls(text=messages[-1].get("content") or "", tool_calls=calls)


def _default_seeds_dir() -> Path:
    return Path(os.environ.get("SEEDWHEEL_SEEDS", "seeds")).resolve()


@dataclass(frozen=True)
class VerifyContext:
    """What a verifier may need beyond the task: where relative fixture paths (SQLite files) resolve."""

    seeds_dir: Path = field(default_factory=_default_seeds_dir)


@dataclass(frozen=True)
class HackProbe:
    """A completion that tries to be paid without solving the task; a sound verifier fails it.

    Attributes:
        name: what the attack is, stable across tasks (`hedge_two_numbers`, `always_equal`, `literal_sql`).
        completion: the text (or chat messages) sent to the verifier.
    """

    name: str
    completion: str | list[dict[str, Any]]


class Verifier(ABC):
    """A registered judge of one completion for one task.

    Subclasses set `name`, `version` (bump it when a change alters verdicts) and `params_schema` (JSON Schema
    of `task["verifier"]["params"]`, checked when a task is loaded), and implement `check`.
    """

    name: ClassVar[str]
    version: ClassVar[int] = 1
    params_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    @abstractmethod
    def check(self, params: Mapping[str, Any], completion: Completion, context: VerifyContext) -> Verdict:
        """Judge one completion. Bad model output is a failed verdict, never an exception."""

    def params_problems(self, params: Mapping[str, Any], context: VerifyContext) -> list[str]:
        """Problems with a task's params, as `<message> (<JSON pointer>)`; override to add semantic checks."""
        validator = jsonschema.Draft202012Validator(self.params_schema)
        errors = sorted(validator.iter_errors(dict(params)), key=lambda e: [str(p) for p in e.absolute_path])
        return [f"{e.message} ({json_pointer(e.absolute_path, prefix='/verifier/params')})" for e in errors]

    def wrong_answer(self, params: Mapping[str, Any]) -> str | None:
        """A completion known to be wrong for these params (validation checks it fails), or None."""
        return None

    def versions(self, params: Mapping[str, Any]) -> list[tuple[str, int]]:
        """The registered `(name, version)` of every verifier that judges with these params: this one, and any it
        delegates to. Caches of verdicts key on them, so a version bump re-validates exactly its tasks."""
        return [(self.name, self.version)]

    def fixtures(self, params: Mapping[str, Any], context: VerifyContext) -> list[Path]:
        """Files a verdict reads besides the completion and the params (a SQL task's database), resolved in
        `context`. Caches of verdicts key on their content, so a changed fixture re-validates its tasks."""
        return []

    def hack_probes(self, params: Mapping[str, Any], reference: str | None, context: VerifyContext) -> list[HackProbe]:
        """Completions built from this task's own gold that try to be paid without solving the task.

        Every one must fail: the reward audit runs them on the training tasks and any probe that passes fails
        `reward_sound`, naming the probe and the task. Override to add the known attacks on a verifier (hedged
        answers, always-equal objects, literal SQL, every tool called, ...).

        Args:
            params: the task's verifier params (its gold).
            reference: the task's known-good completion, or None.
            context: where the task's fixtures resolve, as in `check` (a SQL task's database).

        Returns:
            The probes, each with a stable name (e.g. `hedge_two_numbers`) and a completion.
        """
        return []

    def answer_params(self, answer: Any) -> dict[str, Any] | None:
        """The params of a task whose gold answer is `answer`, one cell of a dataset's answer column (`seedwheel
        seeds import --answer`); None when this verifier takes no single answer (its params come by name instead).

        Raises:
            ValueError: `answer` is not an answer this verifier can check; the message says why.
        """
        return None


class UnknownVerifierError(SeedwheelError, KeyError):
    """A task names a verifier (or version) that is not registered."""

    def __str__(self) -> str:
        return str(self.args[0])


class Registry:
    """Verifiers by name and version. Built-ins and entry points load on first use."""

    def __init__(self) -> None:
        self._verifiers: dict[tuple[str, int], Verifier] = {}
        self._loaded = False
        # Verifiers are first used from worker threads (`verify_many`): one thread loads, the others wait for it.
        self._load_lock = threading.RLock()

    def register(self, verifier_cls: type[Verifier]) -> type[Verifier]:
        """Register a verifier class (usable as a decorator). Re-registering the same name+version replaces it."""
        self._verifiers[(verifier_cls.name, verifier_cls.version)] = verifier_cls()
        return verifier_cls

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        with self._load_lock:
            if self._loaded:
                return
            for module in BUILTIN_MODULES:
                importlib.import_module(module)
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                self.register(ep.load())
            self._loaded = True

    def names(self) -> list[str]:
        self._ensure_loaded()
        return sorted({name for name, _ in self._verifiers})

    def get(self, name: str, version: int | None = None) -> Verifier:
        """The verifier `name` at `version` (the latest when None).

        An older version that is no longer registered resolves to the latest: a version bump fixes its
        predecessor (a closed reward hack, say), and tasks recorded under the old number are judged by the fix
        rather than refused. A version newer than any registered one is an error.
        """
        self._ensure_loaded()
        versions = sorted(v for n, v in self._verifiers if n == name)
        if not versions:
            raise UnknownVerifierError(f"unknown verifier '{name}'; registered: {', '.join(self.names())}")
        if version is None or (
            isinstance(version, int) and version < versions[-1] and (name, version) not in self._verifiers
        ):
            version = versions[-1]
        if (name, version) not in self._verifiers:
            raise UnknownVerifierError(
                f"verifier '{name}' has no version {version}; registered versions: {', '.join(map(str, versions))}"
            )
        return self._verifiers[(name, version)]


REGISTRY = Registry()


def register(verifier_cls: type[Verifier]) -> type[Verifier]:
    """Class decorator: add a verifier to the default registry."""
    return REGISTRY.register(verifier_cls)


def load_verifier(dotted_path: str) -> type[Verifier]:
    """Import and register a user verifier given as `package.module:ClassName` (e.g. from config)."""
    module_name, _, attr = dotted_path.partition(":")
    if not attr:
        raise ValueError(f"verifier path '{dotted_path}' must look like 'package.module:ClassName'")
    verifier_cls = getattr(importlib.import_module(module_name), attr)
    if not (isinstance(verifier_cls, type) and issubclass(verifier_cls, Verifier)):
        raise TypeError(f"'{dotted_path}' is not a subclass of validators.registry.Verifier")
    return REGISTRY.register(verifier_cls)


def spec_problems(spec: Mapping[str, Any], context: VerifyContext | None = None) -> list[str]:
    """Problems with a task's `verifier` spec: unknown name/version, or params that break its schema."""
    try:
        verifier = REGISTRY.get(spec["name"], spec.get("version"))
    except UnknownVerifierError as exc:
        return [f"{exc} (/verifier/name)"]
    return verifier.params_problems(spec.get("params", {}), context or VerifyContext())


def verify(
    task: Mapping[str, Any],
    completion: str | Mapping[str, Any] | Iterable[Mapping[str, Any]] | Completion,
    *,
    context: VerifyContext | None = None,
) -> Verdict:
    """Judge one completion for one task with the task's own verifier.

    Args:
        task: a mapping with at least `verifier: {name, params[, version]}`.
        completion: the model's text, one chat message, or a list of messages.
        context: where fixture paths resolve; defaults to `$SEEDWHEEL_SEEDS` or `./seeds`.

    Returns:
        A `Verdict(score, passed, reason)`.

    Example:
        >>> verify({"verifier": {"name": "numeric_answer", "params": {"answer": 4}}}, "2+2 = 4. #### 4").passed
        True
    """
    spec = task["verifier"]
    verifier = REGISTRY.get(spec["name"], spec.get("version"))
    return verifier.check(spec.get("params", {}), Completion.from_any(completion), context or VerifyContext())
