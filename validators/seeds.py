"""Curated seed sets: files under `seeds/<family>/` (JSONL, or YAML for hand-written sets) -> task records.

A seed file may omit what can be derived: `task_id` (the content hash), `lineage` (a seed is its own root; a seed
completed from a production failure names it, `lineage: {failure_id: ...}`),
`family` (the folder name), `verifier.version` (the latest registered), `verifier.params` (`{}`), `difficulty`
and `tags`. A `prompt`
given as a string is one user message. Every problem is reported as `path:line: what (pointer) - fix`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from core.cache_store import CacheStore
from validators.pointers import json_pointer
from validators.registry import REGISTRY, UnknownVerifierError, VerifyContext
from validators.tasks import Problem, check_tasks, compute_task_id, schema_problems

SEED_SUFFIXES = (".jsonl", ".yaml", ".yml")
# Data files `seedwheel seeds import` converts into seed files; one of them among the seeds is reported, not skipped.
DATA_SUFFIXES = (".csv", ".tsv", ".parquet", ".json")
# The seeds folder's audit sets: the judge's labelled tasks and the reward's labelled completions, not seeds.
AUDIT_DIR = "audit"
# Folders under seeds/ that hold other curated data, not seed tasks.
NON_SEED_DIRS = frozenset({AUDIT_DIR})
# The tag an imported seed carries to name its source file and row: `source:<name>:<row>`.
SOURCE_TAG = "source"


@dataclass(frozen=True)
class SeedProblem:
    """A problem in a seed file, located to its line."""

    path: str
    line: int
    problem: Problem

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.problem}"


@dataclass(frozen=True)
class SeedRecord:
    """One record as read from a seed file, before checks; `lines` maps JSON pointers to line numbers."""

    path: str
    line: int
    family: str
    raw: Any
    lines: Mapping[str, int] = field(default_factory=dict)

    @property
    def origin(self) -> str:
        return f"{self.path}:{self.line}"

    def line_of(self, pointer: str) -> int:
        """The line of the deepest known location on `pointer`'s path (the record's first line at worst)."""
        while pointer and pointer not in self.lines:
            pointer = pointer.rpartition("/")[0]
        return self.lines.get(pointer, self.line)


@dataclass
class SeedSet:
    """The outcome of loading seed files: valid task records (each with its `origin`) and located problems."""

    tasks: list[dict[str, Any]] = field(default_factory=list)
    problems: list[SeedProblem] = field(default_factory=list)
    rejects: list[dict[str, Any]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def discover_seed_files(paths: Iterable[Path]) -> list[Path]:
    """Seed files under the given files or folders, sorted (folders are searched recursively).

    Raises:
        FileNotFoundError: when a given path does not exist.
    """
    found: set[Path] = set()
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such seed file or folder")
        if path.is_file():
            found.add(path)
            continue
        for candidate in path.rglob("*"):
            relative_dirs = candidate.relative_to(path).parts[:-1]
            wanted = (*SEED_SUFFIXES, *DATA_SUFFIXES)
            if candidate.suffix in wanted and not NON_SEED_DIRS.intersection(relative_dirs):
                found.add(candidate)
    return sorted(found)


def read_seed_file(path: Path, display: str | None = None) -> tuple[list[SeedRecord], list[SeedProblem]]:
    """Parse one seed file into located raw records; syntax problems come back located, not raised."""
    display = display or str(path)
    family = path.parent.name
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        message = f"not UTF-8 text ({exc.reason})"
        return [], [_problem(display, line, "not_utf8", "/", message, "save the file as UTF-8")]
    if path.suffix == ".jsonl":
        return _read_jsonl(text, display, family)
    if path.suffix in (".yaml", ".yml"):
        return _read_yaml(text, display, family)
    if path.suffix in DATA_SUFFIXES:
        message = "a data file, not a seed file"
        return [], [_problem(display, 1, "data_file", "/", message, import_hint(display, family))]
    return [], [_problem(display, 1, "unknown_format", "/", "not a seed file", "use .jsonl, .yaml or .yml")]


def import_hint(path: str, family: str) -> str:
    """How to turn a data file into a seed file, in one line."""
    name = Path(path).name
    return (
        f"move it out of the seeds folder and convert it: seedwheel seeds import {name} --family {family} "
        f"--prompt '{{question}}' --answer COLUMN --verifier NAME (docs/seeds.md#importing-your-data)"
    )


def _problem(path: str, line: int, code: str, pointer: str, message: str, fix: str) -> SeedProblem:
    return SeedProblem(path, line, Problem(code, pointer, message, fix))


def _read_jsonl(text: str, display: str, family: str) -> tuple[list[SeedRecord], list[SeedProblem]]:
    records, problems = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(
                _problem(
                    display,
                    number,
                    "invalid_json",
                    "/",
                    f"invalid JSON: {exc.msg} at column {exc.colno}",
                    "fix the JSON syntax; a .jsonl file holds one complete JSON object per line",
                )
            )
            continue
        records.append(SeedRecord(display, number, family, raw))
    return records, problems


def _read_yaml(text: str, display: str, family: str) -> tuple[list[SeedRecord], list[SeedProblem]]:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        message = f"invalid YAML: {exc.problem}"
        return [], [_problem(display, line, "invalid_yaml", "/", message, "fix the YAML syntax")]
    if data is None:
        return [], []
    if not isinstance(data, list) or not isinstance(root, yaml.SequenceNode):
        message = "a YAML seed file must be a list of records"
        return [], [_problem(display, 1, "not_a_list", "/", message, "start each record with '- '")]
    records = [
        SeedRecord(display, node.start_mark.line + 1, family, raw, dict(_node_lines(node, "")))
        for node, raw in zip(root.value, data, strict=True)
    ]
    return records, []


def _node_lines(node: yaml.Node, pointer: str) -> Iterator[tuple[str, int]]:
    """Every JSON pointer inside a composed YAML node, with its 1-based line."""
    yield pointer or "/", node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = json_pointer([key.value], prefix=pointer)
            yield child, key.start_mark.line + 1
            yield from ((p, n) for p, n in _node_lines(value, child) if p != child)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield from _node_lines(item, json_pointer([index], prefix=pointer))


def to_task_record(record: SeedRecord) -> tuple[dict[str, Any] | None, list[Problem]]:
    """Fill a seed's derivable fields. Returns the task record (None when it cannot be built) and problems."""
    raw = record.raw
    if not isinstance(raw, Mapping):
        return None, [Problem("not_an_object", "/", "a seed record must be an object", "write it as a mapping")]
    if "prompt" not in raw and "verifier" not in raw:
        fields = ", ".join(map(str, list(raw)[:5])) or "none"
        message = f"a record with neither prompt nor verifier (its fields: {fields}): data, not a seed"
        return None, [Problem("not_a_seed", "/", message, import_hint(record.path, record.family))]
    task = dict(raw)
    problems = []
    task.setdefault("family", record.family)
    if task["family"] != record.family:
        problems.append(
            Problem(
                "family_mismatch",
                "/family",
                f"family '{task['family']}' does not match its folder '{record.family}'",
                f"move the file to seeds/{task['family']}/ or drop the family field",
            )
        )
    if isinstance(task.get("prompt"), str):
        task["prompt"] = [{"role": "user", "content": task["prompt"]}]
    # Reported after the record's other problems: the fields it cannot be built without come first.
    unreferenced = (
        [
            Problem(
                "missing_reference",
                "/reference",
                "no reference: without a known-good completion, nothing shows that the verifier can be passed",
                "add `reference`: an answer that passes this seed's verifier, as the model should write it",
            )
        ]
        if task.get("reference") is None
        else []
    )
    task.setdefault("reference", None)
    task.setdefault("difficulty", None)
    task.setdefault("tags", [])
    verifier = task.get("verifier")
    if isinstance(verifier, Mapping) and "params" not in verifier:
        task["verifier"] = verifier = {**verifier, "params": {}}
    if isinstance(verifier, Mapping) and "version" not in verifier and isinstance(verifier.get("name"), str):
        try:
            task["verifier"] = {**verifier, "version": REGISTRY.get(verifier["name"]).version}
        except UnknownVerifierError as exc:
            fix = "use a registered verifier, or register yours (entry point 'seedwheel.verifiers')"
            return task, [*problems, Problem("unknown_verifier", "/verifier/name", str(exc), fix), *unreferenced]
    try:
        task_id = compute_task_id(task["prompt"], task["verifier"])
    except (KeyError, TypeError, ValueError):
        # The prompt or verifier is missing or malformed: report the seed's own fields, not the derived ones.
        schema = [p for p in schema_problems(task) if p.pointer not in ("/task_id", "/lineage")]
        return None, [*problems, *schema, *unreferenced]
    if "task_id" in raw and raw["task_id"] != task_id:
        problems.append(
            Problem(
                "task_id_mismatch",
                "/task_id",
                f"task_id {raw['task_id']} is not the content hash of prompt + verifier ({task_id})",
                "remove task_id from the seed file (it is derived)",
            )
        )
    task["task_id"] = task_id
    # A seed completed from a production failure (`review.queue`) names it: `lineage: {failure_id: ...}`.
    given = raw.get("lineage")
    failure_id = given.get("failure_id") if isinstance(given, Mapping) else None
    failure_id = failure_id if isinstance(failure_id, str) and failure_id else None
    lineage = {"seed_id": task_id, "parent_id": None, "generator": None, "source": "seed", "failure_id": failure_id}
    if "lineage" in raw and given not in (lineage, {"failure_id": failure_id}):
        problems.append(
            Problem(
                "lineage_mismatch",
                "/lineage",
                "a seed's lineage must be its own root",
                "remove lineage from the seed, or keep only the production failure it came from: {failure_id: ...}",
            )
        )
    task["lineage"] = lineage
    return task, [*problems, *unreferenced]


def load_seeds(
    paths: Iterable[Path],
    *,
    root: Path | None = None,
    context: VerifyContext | None = None,
    cache: CacheStore | None = None,
) -> SeedSet:
    """Load and check seed files: schema, verifier params, the reference against its own verifier, unique ids.

    Args:
        paths: seed files or folders (searched recursively).
        root: paths are shown relative to this folder when under it (e.g. the repository root).
        context: where verifier fixture paths (SQLite files) resolve; defaults to the seeds folder.
        cache: earlier verdicts (`validators.tasks.check_tasks`): an unchanged seed is not checked again.

    Returns:
        A `SeedSet`: valid tasks (with an `origin` column, `path:line`), located problems, and one reject row
        per invalid record (`origin`, `task_id`, `reason_code`, `reason`, `record`).

    Example:
        >>> import tempfile
        >>> tmp = tempfile.TemporaryDirectory()
        >>> folder = Path(tmp.name) / "arithmetic"  # the folder names the family
        >>> folder.mkdir()
        >>> seed = {"prompt": "What is 2 + 3?", "verifier": {"name": "numeric_answer", "params": {"answer": 5}},
        ...         "reference": "2 + 3 = 5\\n#### 5"}
        >>> _ = (folder / "sums.jsonl").write_text(json.dumps(seed) + "\\n")
        >>> seeds = load_seeds([folder])
        >>> [str(p) for p in seeds.problems], seeds.tasks[0]["family"], seeds.tasks[0]["origin"]
        ([], 'arithmetic', '.../arithmetic/sums.jsonl:1')
        >>> tmp.cleanup()
    """
    seed_set = SeedSet()
    records: list[SeedRecord] = []
    for path in discover_seed_files(paths):
        display = _display(path, root)
        seed_set.files.append(display)
        file_records, file_problems = read_seed_file(path, display)
        records.extend(file_records)
        seed_set.problems.extend(file_problems)
        seed_set.rejects.extend(_reject_row(p.path, p.line, None, [p.problem], None) for p in file_problems)
    checked = check_seed_records(records, context=context, cache=cache)
    seed_set.tasks, seed_set.problems, seed_set.rejects = (
        checked.tasks,
        [*seed_set.problems, *checked.problems],
        [*seed_set.rejects, *checked.rejects],
    )
    return seed_set


def check_seed_records(
    records: Iterable[SeedRecord],
    *,
    context: VerifyContext | None = None,
    cache: CacheStore | None = None,
    known: Mapping[str, str] | None = None,
) -> SeedSet:
    """Check read seed records as `load_seeds` does: derived fields, schema, the reference against its verifier,
    unique ids.

    Args:
        records: the records, in order (a later duplicate is the one refused).
        context: where verifier fixture paths resolve.
        cache: earlier verdicts (`validators.tasks.check_tasks`).
        known: task ids already taken, by the `path:line` that holds them (seeds in other files).

    Returns:
        A `SeedSet` of the valid tasks, the located problems and one reject row per invalid record.
    """
    seed_set = SeedSet()
    parsed = [(record, *to_task_record(record)) for record in records]
    # The verifier checks run together (threads; the sandbox does the waiting), through the cache when given.
    checkable = [(i, task) for i, (_, task, problems) in enumerate(parsed) if task is not None and not problems]
    verdicts = check_tasks([task for _, task in checkable], context, cache=cache)
    for (i, checked), problems in zip(checkable, verdicts, strict=True):
        parsed[i] = (parsed[i][0], checked, problems)
    first_seen: dict[str, str] = dict(known or {})
    for record, task, problems in parsed:
        previous = first_seen.get(task["task_id"]) if task is not None and not problems else None
        if task is not None and previous is not None:
            message = f"duplicate task_id {task['task_id']}: same prompt and verifier as {previous}"
            problems = [Problem("duplicate_task_id", "/", message, "remove one of the two records")]
        if problems:
            for problem in problems:
                line = record.line_of(problem.pointer)
                seed_set.problems.append(SeedProblem(record.path, line, problem))
            task_id = task.get("task_id") if task else None
            seed_set.rejects.append(_reject_row(record.path, record.line, task_id, problems, record.raw))
            continue
        assert task is not None  # to_task_record gives a task or its problems
        first_seen[task["task_id"]] = record.origin
        seed_set.tasks.append({**task, "origin": record.origin})
    return seed_set


def _display(path: Path, root: Path | None) -> str:
    if root is not None and path.resolve().is_relative_to(root.resolve()):
        return str(path.resolve().relative_to(root.resolve()))
    return str(path)


def _reject_row(path: str, line: int, task_id: str | None, problems: list[Problem], raw: Any) -> dict[str, Any]:
    return {
        "origin": f"{path}:{line}",
        "task_id": task_id,
        "reason_code": problems[0].code,
        "reason": "; ".join(map(str, problems)),
        "record": None if raw is None else json.dumps(raw, ensure_ascii=False, default=str),
    }
