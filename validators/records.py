"""The task record and its parts as `TypedDict`s: what `schemas/task.schema.json` says, for the type checker.

The JSON Schema is what records are validated against at run time (`validators.tasks.check_task`); these types
say the same for code that builds and reads records, so a typo in a key or a wrong lineage `source` is caught by
mypy, not by a run. `tests/validators/test_records.py` keeps the two in step (keys, required keys, enums).

A record read from a file is a `Mapping[str, Any]` until it has been checked: functions that validate take that;
functions that build records return a `TaskRecord`.
"""

# No `from __future__ import annotations`: TypedDict reads NotRequired[...] from evaluated annotations only.
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict

Role = Literal["system", "user", "assistant", "tool"]
# Where a task came from: a curated seed, a generator's variant, or a production failure no seed explains.
Source = Literal["seed", "generated", "production_failure"]


class ChatMessage(TypedDict):
    """One prompt message in TRL's conversational format."""

    role: Role
    content: str


class VerifierSpec(TypedDict):
    """Which registered verifier judges a completion (`name`, `version`) and its gold data (`params`)."""

    name: str
    version: int
    params: dict[str, Any]


class GeneratorSpec(TypedDict):
    """The generator that made a variant, at which version, with which parameters."""

    name: str
    version: int
    params: dict[str, Any]


class Lineage(TypedDict):
    """Where a task came from: its root seed or failure, its parent and the generator between them."""

    seed_id: str | None
    parent_id: str | None
    generator: GeneratorSpec | None
    source: Source
    failure_id: str | None


class TaskRecord(TypedDict):
    """One task that flows from seeds to training (`validators/schemas/task.schema.json`).

    Example:
        >>> record: TaskRecord = {
        ...     "task_id": "0123456789abcdef", "family": "arithmetic",
        ...     "prompt": [{"role": "user", "content": "What is 2 + 2?"}],
        ...     "verifier": {"name": "numeric_answer", "version": 1, "params": {"answer": 4}},
        ...     "reference": "#### 4",
        ...     "lineage": {"seed_id": "0123456789abcdef", "parent_id": None, "generator": None, "source": "seed",
        ...                 "failure_id": None},
        ... }
        >>> sorted(TaskRecord.__optional_keys__)
        ['difficulty', 'tags']
    """

    task_id: str
    family: str
    prompt: list[ChatMessage]
    verifier: VerifierSpec
    reference: str | None
    lineage: Lineage
    difficulty: NotRequired[int | None]
    tags: NotRequired[list[str]]


class TaskReject(TypedDict):
    """A task that failed its checks (the `task_rejects` table): ids, the first problem's code, every problem's
    text, and the whole record as it was (rejects are kept, with their reason)."""

    task_id: str | None
    family: str | None
    generator: str
    seed_id: str | None
    reason_code: str
    reason: str
    record: Mapping[str, Any]  # as it was checked: a rejected record need not be a valid TaskRecord
