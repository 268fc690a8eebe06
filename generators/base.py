"""What every generator shares: the interface, how a variant's record and lineage are derived, and rejects.

A generator turns one parent task (a seed, or later a production failure) into variants. It is deterministic
for a given parent and `random_seed`, and every variant records where it came from:
`lineage = {seed_id: <root seed>, parent_id: <parent task_id>, generator: {name, version, params},
source: "generated", failure_id: <inherited>}`.
"""

from __future__ import annotations

import hashlib
import random
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from validators.records import ChatMessage, GeneratorSpec, TaskRecord, VerifierSpec
from validators.tasks import canonical_json, compute_task_id


@dataclass
class GenerationResult:
    """Variants made from one or more parents, and the attempts that were rejected (with a reason code)."""

    tasks: list[TaskRecord] = field(default_factory=list)
    rejects: list[dict[str, Any]] = field(default_factory=list)

    def extend(self, other: GenerationResult) -> None:
        self.tasks.extend(other.tasks)
        self.rejects.extend(other.rejects)

    def accept_rate(self) -> float:
        """Variants over attempts (variants and rejects); 1.0 when nothing was attempted (nothing failed).

        Example:
            >>> GenerationResult(rejects=[{"reason_code": "no_generator"}]).accept_rate()
            0.0
            >>> GenerationResult().accept_rate()
            1.0
        """
        attempts = len(self.tasks) + len(self.rejects)
        return len(self.tasks) / attempts if attempts else 1.0


class Generator(ABC):
    """Makes variants of a parent task.

    Subclasses set `name`, `version` (bump it when a change alters its output), `families` (the task
    families it is made for) and, when it varies any task its verifier checks whatever the family, `verifiers`
    (a family without a generator of its own gets it), and implement `generate`.
    """

    name: ClassVar[str]
    version: ClassVar[int] = 1
    families: ClassVar[frozenset[str]]
    verifiers: ClassVar[frozenset[str]] = frozenset()
    # Reject codes that can come from the machine rather than the parent (a sandbox run or a query cut short by its
    # time limit): an output with one is not reused by a cache, so the next run tries that parent again.
    transient_reject_codes: ClassVar[frozenset[str]] = frozenset()

    def fixtures(self, parent: Mapping[str, Any]) -> list[Path]:
        """Files the output depends on besides the parent record (a SQL seed's database); caches key on them."""
        return []

    @abstractmethod
    def generate(self, parent: Mapping[str, Any], *, n: int, random_seed: int) -> GenerationResult:
        """Up to `n` variants of `parent`; attempts that fail a sanity check go to `rejects`, never raise."""

    def rng(self, parent: Mapping[str, Any], random_seed: int) -> random.Random:
        """A random stream private to (generator, parent, random_seed): adding a seed never shifts another's."""
        material = f"{self.name}:{self.version}:{parent['task_id']}:{random_seed}".encode()
        return random.Random(int.from_bytes(hashlib.sha256(material).digest()[:8], "big"))

    def spec(self, params: Mapping[str, Any]) -> GeneratorSpec:
        """The `lineage.generator` entry for a variant made with `params`."""
        return {"name": self.name, "version": self.version, "params": dict(params)}

    def reject(self, parent: Mapping[str, Any], code: str, detail: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """A reject row: which parent, which generator and params, and why (`code: detail`)."""
        return reject_row(parent, self.name, code, detail, params)


def reject_row(
    parent: Mapping[str, Any], generator: str | None, code: str, detail: str, params: Mapping[str, Any]
) -> dict[str, Any]:
    """A generation reject: which parent, which generator (None: none applied) and params, and why."""
    return {
        "parent_id": parent["task_id"],
        "seed_id": parent["lineage"]["seed_id"],
        "family": parent["family"],
        "generator": generator,
        "reason_code": code,
        "reason": f"{code}: {detail}" if detail else code,
        "params": canonical_json(dict(params)),
    }


def last_user_index(prompt: Sequence[Mapping[str, Any]]) -> int | None:
    """Index of the last user message with non-empty text (the part of a task a generator rewrites), or None.

    Example:
        >>> last_user_index([{"role": "system", "content": "s"}, {"role": "user", "content": "q"}])
        1
    """
    for i in range(len(prompt) - 1, -1, -1):
        message = prompt[i]
        if message.get("role") == "user" and isinstance(message.get("content"), str) and message["content"].strip():
            return i
    return None


def derive_task(
    parent: Mapping[str, Any],
    *,
    prompt: Sequence[Mapping[str, Any]],
    verifier_params: Mapping[str, Any],
    reference: str | None,
    generator: GeneratorSpec,
    difficulty: int | None = None,
    tags: list[str] | None = None,
) -> TaskRecord:
    """A variant's task record: the parent's family and verifier with new prompt, params and reference.

    Args:
        parent: the task the variant is made from.
        prompt: the variant's chat messages.
        verifier_params: the variant's gold data for the parent's verifier.
        reference: the variant's known-good completion (recomputed, not guessed), or None.
        generator: `{name, version, params}` of the generator that made it.
        difficulty: defaults to the parent's.
        tags: defaults to the parent's.

    Returns:
        A task record with a fresh content-hash `task_id` and lineage pointing at the parent and its root seed.

    Example:
        >>> seed = {"task_id": "a" * 16, "family": "arithmetic", "difficulty": 1, "tags": [],
        ...         "verifier": {"name": "numeric_answer", "version": 1, "params": {"answer": 4}},
        ...         "lineage": {"seed_id": "a" * 16, "failure_id": None}}
        >>> variant = derive_task(seed, prompt=[{"role": "user", "content": "3+3?"}], verifier_params={"answer": 6},
        ...                       reference="#### 6", generator={"name": "g", "version": 1, "params": {}})
        >>> variant["lineage"]["parent_id"] == seed["task_id"], variant["lineage"]["source"]
        (True, 'generated')
    """
    messages: list[ChatMessage] = [{"role": m["role"], "content": m["content"]} for m in prompt]
    verifier: VerifierSpec = {
        "name": parent["verifier"]["name"],
        "version": parent["verifier"]["version"],
        "params": dict(verifier_params),
    }
    task_id = compute_task_id(messages, verifier)
    return {
        "task_id": task_id,
        "family": parent["family"],
        "prompt": messages,
        "verifier": verifier,
        "reference": reference,
        "lineage": {
            "seed_id": parent["lineage"]["seed_id"],
            "parent_id": parent["task_id"],
            "generator": generator.copy(),
            "source": "generated",
            "failure_id": parent["lineage"].get("failure_id"),
        },
        "difficulty": parent.get("difficulty") if difficulty is None else difficulty,
        "tags": list(parent.get("tags") or []) if tags is None else tags,
    }
