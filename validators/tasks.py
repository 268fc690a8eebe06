"""The task record: one JSON Schema, one content-addressed id, and problems that say how to fix them."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from typing import Any

import jsonschema

from core.cache_store import CacheStore, file_digest
from validators.pointers import json_pointer
from validators.records import TaskRecord
from validators.registry import REGISTRY, VerifyContext, spec_problems, verify

# The record's keys in schema order, from the one TypedDict (validators.records), which a test keeps in step with
# the JSON Schema.
TASK_FIELDS: tuple[str, ...] = tuple(TaskRecord.__annotations__)
# Bump when what `check_task` decides changes without a verifier version bump, or when `Problem` changes shape.
VERDICT_KEY_FORMAT = 1


@cache
def task_schema() -> dict[str, Any]:
    """The task record's JSON Schema (draft 2020-12), as shipped in the package."""
    text = resources.files("validators").joinpath("schemas/task.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


@cache
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(task_schema())


def canonical_json(value: Any) -> str:
    """A byte-stable JSON encoding: sorted keys, no insignificant whitespace, UTF-8 kept as is.

    Example:
        >>> canonical_json({"b": 1, "a": [1.0, "é"]})
        '{"a":[1.0,"é"],"b":1}'
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def compute_task_id(prompt: Sequence[Mapping[str, Any]], verifier: Mapping[str, Any]) -> str:
    """Content hash of a task: the prompt messages plus the verifier's name and params.

    The verifier *version* is left out on purpose: a bug fix in a verifier bumps its version, and that must
    not give every existing task a new identity (which would break dedup history and split lineage).

    Args:
        prompt: chat messages `[{role, content}]`.
        verifier: `{name, params, ...}`.

    Returns:
        16 hex characters of SHA-256; the same on any machine and in any run.

    Example:
        >>> compute_task_id([{"role": "user", "content": "2+2?"}], {"name": "numeric_answer", "params": {"answer": 4}})
        '5c4f6470173c47e1'
    """
    canonical = canonical_json(
        {
            "prompt": [{"role": m["role"], "content": m["content"]} for m in prompt],
            "verifier": {"name": verifier["name"], "params": verifier.get("params", {})},
        }
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a task record: a reason code, where (a JSON pointer), what, and how to fix it."""

    code: str
    pointer: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.message} ({self.pointer}) - {self.fix}"


def schema_problems(record: Mapping[str, Any]) -> list[Problem]:
    """Every schema violation of a task record, sorted by location (empty when the record is valid)."""
    problems = []
    for error in _validator().iter_errors(record):
        path = list(error.absolute_path)
        if error.validator == "required":  # point at the missing field itself
            path.append(_missing_field(error))
        problems.append(Problem("schema_violation", json_pointer(path), _describe(error), _fix_for(error)))
    return sorted(problems, key=lambda p: (p.pointer, p.message))


def _missing_field(error: jsonschema.ValidationError) -> str:
    return error.message.split("'")[1]


def _describe(error: jsonschema.ValidationError) -> str:
    if error.validator == "required":
        return f"missing field '{_missing_field(error)}'"
    if error.validator == "additionalProperties":
        return error.message.replace("Additional properties are not allowed", "unknown field(s)")
    if error.validator == "type":
        return (
            f"expected {error.validator_value}, got {type(error.instance).__name__} {json.dumps(error.instance)[:60]}"
        )
    return error.message if len(error.message) <= 160 else error.message[:157] + "..."


_FIXES = {
    "required": "add the field",
    "additionalProperties": "remove the field or check its spelling against the task schema",
    "type": "change the value to the expected type",
    "enum": "use one of the allowed values",
    "pattern": "use lowercase letters, digits and underscores",
    "minItems": "add at least one item",
    "minLength": "give a non-empty value",
    "minimum": "use a larger value",
    "maximum": "use a smaller value",
    "uniqueItems": "remove the repeated item",
}


def _fix_for(error: jsonschema.ValidationError) -> str:
    if error.validator == "pattern" and error.path and error.path[-1] == "task_id":
        return "remove task_id from the seed file (it is derived) or use the 16-hex-digit content hash"
    return _FIXES.get(str(error.validator), "see validators/schemas/task.schema.json")


# Verdict codes of a verifier run stopped by a limit the machine decides as much as the task does (wall or CPU time
# under load; memory or processes, which without root count the caller's own): a rerun may decide otherwise.
# Not covered: a SQL gold query timing out while the params are checked comes back as `bad_params` text.
ENVIRONMENTAL_CODES = frozenset({"timeout", "sandbox_violation"})


@dataclass(frozen=True)
class TaskCheck:
    """What checking one task record found (`check_task`).

    Attributes:
        problems: everything wrong with the record, empty when it is valid.
        environmental: a verifier run (the reference's, or the wrong answer's) ended with one of
            `ENVIRONMENTAL_CODES`, so the outcome may differ on a rerun: a cache must not keep it.
    """

    problems: list[Problem]
    environmental: bool = False


def task_problems(
    record: Mapping[str, Any], context: VerifyContext | None = None, *, check_wrong_answer: bool = False
) -> list[Problem]:
    """Everything wrong with a task record, cheapest check first; later checks run only when earlier pass.

    1. the JSON Schema; 2. `task_id` equals the content hash; 3. the verifier is registered and its params
    validate; 4. the `reference` passes its own verifier; 5. optionally, the verifier's known-wrong answer fails.

    Args:
        record: a task record (extra label columns are ignored).
        context: where verifier fixture paths resolve.
        check_wrong_answer: also require the verifier's `wrong_answer(params)` to fail (catches vacuous verifiers).

    Returns:
        The problems, empty when the task is valid.
    """
    return check_task(record, context, check_wrong_answer=check_wrong_answer).problems


def check_task(
    record: Mapping[str, Any], context: VerifyContext | None = None, *, check_wrong_answer: bool = False
) -> TaskCheck:
    """`task_problems`, and whether a verifier run ended for an environmental reason (see `TaskCheck`)."""
    record = {k: record[k] for k in TASK_FIELDS if k in record}
    problems = schema_problems(record)
    if problems:
        return TaskCheck(problems)
    expected_id = compute_task_id(record["prompt"], record["verifier"])
    if record["task_id"] != expected_id:
        return TaskCheck(
            [
                Problem(
                    "task_id_mismatch",
                    "/task_id",
                    f"task_id {record['task_id']} is not the content hash of prompt + verifier ({expected_id})",
                    "remove task_id (it is derived) or set it to the content hash",
                )
            ]
        )
    context = context or VerifyContext()
    spec_issues = [_split_problem(issue) for issue in spec_problems(record["verifier"], context)]
    if spec_issues:
        return TaskCheck(spec_issues)
    environmental = False
    if record["reference"] is not None:
        verdict = verify(record, record["reference"], context=context)
        environmental = verdict.code in ENVIRONMENTAL_CODES
        if not verdict.passed:
            problem = Problem(
                "reference_failed",
                "/reference",
                f"reference fails its own verifier ({verdict.reason})",
                "correct the reference or the verifier params",
            )
            return TaskCheck([problem], environmental)
    if check_wrong_answer:
        wrong = REGISTRY.get(record["verifier"]["name"], record["verifier"]["version"]).wrong_answer(
            record["verifier"]["params"]
        )
        if wrong is not None:
            verdict = verify(record, wrong, context=context)
            environmental = environmental or verdict.code in ENVIRONMENTAL_CODES
            if verdict.passed:
                problem = Problem(
                    "wrong_answer_passed",
                    "/verifier/params",
                    f"a known-wrong answer passes the verifier: {wrong[:80]!r}",
                    "make the verifier params specific enough to reject wrong answers",
                )
                return TaskCheck([problem], environmental)
    return TaskCheck([], environmental)


def _split_problem(issue: str) -> Problem:
    """A registry spec problem, `message (/pointer)`, as a Problem with a reason code."""
    message, _, pointer = issue.rpartition(" (")
    pointer = pointer[:-1] if message and pointer.endswith(")") else "/verifier"
    if pointer == "/verifier/name":
        return Problem("unknown_verifier", pointer, message, "use a registered verifier or register yours")
    return Problem("bad_params", pointer, message or issue, "fix the verifier params as the message says")


def verdict_key(record: Mapping[str, Any], context: VerifyContext | None = None) -> str | None:
    """The validation cache's key of a record: a hash of everything `check_task` decides from, or None.

    SHA-256 (hex) of the canonical JSON of

        {"format": VERDICT_KEY_FORMAT, "schema": <SHA-256 of the task schema>,
         "record": <the record's TASK_FIELDS, all of them>,
         "verifiers": <registered [name, version] of each verifier that judges it (`Verifier.versions`)>,
         "fixtures": <SHA-256 of each file the verifier reads (`Verifier.fixtures`), in order>}

    - The whole record, not only `task_id`: the id hashes the prompt and the verifier's name and params, but not
      the reference (which must pass), the verifier version, lineage, difficulty or tags (the schema checks them).
    - The versions are the *registered* ones (the code's), not the record's `verifier.version` (in the record
      anyway): an old version number resolves to the latest code, and bumping a verifier's version re-validates
      exactly the tasks that it judges (`weighted` lists its components too).
    - Fixtures by content, so a changed SQLite file re-validates its tasks, while the same file in another seeds
      folder (a fresh clone, another machine) still hits.
    - Not in the key, so a change in them needs a version bump (the registry's rule) or a new cache folder:
      verifier code behind an unchanged version, the sandbox's limits, the Python version running the sandbox.

    Returns:
        64 hex characters, or None when the record cannot be keyed (no registered verifier, params it cannot read,
        a missing fixture, values JSON cannot hold): such a record is checked every time, which is cheap.

    Example:
        >>> task = {"verifier": {"name": "numeric_answer", "params": {"answer": 4}}, "reference": "#### 4"}
        >>> len(verdict_key(task)), verdict_key({**task, "reference": "#### 5"}) != verdict_key(task)
        (64, True)
    """
    context = context or VerifyContext()
    record = {k: record[k] for k in TASK_FIELDS if k in record}
    spec = record.get("verifier")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("params", {}), Mapping):
        return None
    try:
        verifier = REGISTRY.get(spec["name"], spec.get("version"))
        params = spec.get("params", {})
        fixtures = [file_digest(path) for path in verifier.fixtures(params, context)]
        if None in fixtures:
            return None
        payload = {
            "format": VERDICT_KEY_FORMAT,
            "schema": _schema_digest(),
            "record": record,
            "verifiers": verifier.versions(params),
            "fixtures": fixtures,
        }
        return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()
    except (KeyError, TypeError, ValueError):  # an unknown verifier, params it cannot read, NaN or non-JSON values
        return None


@cache
def _schema_digest() -> str:
    return hashlib.sha256(canonical_json(task_schema()).encode("utf-8")).hexdigest()


def check_tasks(
    records: list[Mapping[str, Any]],
    context: VerifyContext | None = None,
    *,
    workers: int | None = None,
    cache: CacheStore | None = None,
) -> list[list[Problem]]:
    """`task_problems(record, context, check_wrong_answer=True)` for many records, in parallel threads.

    Threads suit the work: sandboxed verifiers wait on a child process, the rest take microseconds.

    Args:
        records: task records.
        context: where verifier fixtures resolve.
        workers: threads (default: one per CPU).
        cache: verdicts of earlier runs by `verdict_key`: a record whose key is stored is not checked again (the
            stored problems are returned), and the new outcomes are stored and committed, except environmental
            ones (`TaskCheck.environmental`). `cache.hits` counts the records served from it.

    Returns:
        One list of problems per record, in input order (empty for a valid task).
    """
    context = context or VerifyContext()
    keys = [verdict_key(r, context) if cache is not None else None for r in records]
    found: dict[int, list[Problem]] = {}
    for i, key in enumerate(keys):
        stored = cache.get(key) if cache is not None and key is not None else None
        if stored is not None:
            found[i] = [Problem(**problem) for problem in stored]
    todo = [i for i in range(len(records)) if i not in found]
    try:
        with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1, thread_name_prefix="check") as pool:
            checks = pool.map(lambda i: check_task(records[i], context, check_wrong_answer=True), todo)
            for i, check in zip(todo, checks, strict=True):  # in order as they finish: the cache commits as it fills
                found[i] = check.problems
                key = keys[i]
                if cache is not None and key is not None and not check.environmental:
                    cache.put(key, [asdict(problem) for problem in check.problems])
    finally:  # a check that raised (a broken fixture) keeps the verdicts found before it
        if cache is not None:
            cache.commit()
    return [found[i] for i in range(len(records))]
