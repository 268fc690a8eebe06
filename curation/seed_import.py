"""A team's own question/answer data -> a seed file (`seedwheel seeds import`).

A source is a CSV or TSV file, JSON Lines (`.jsonl`, or `.json` as `datasets` exports it; a `.json` array works
too), Parquet, or a folder written by Hugging Face `datasets` (`Dataset.save_to_disk`; a `DatasetDict` folder
takes `split`). Each row becomes one seed through an `ImportSpec`:

- the prompt is `prompt` (a template over the row's columns: `'{question}'`) as the user message, after an
  optional system message;
- the verifier's params come from the answer column through the verifier's own `answer_params` (a
  `numeric_answer` reads GSM8K's `... #### 72` as 72), from other columns by name (`param_columns`), and from
  constants (`params`);
- the reference is the reference column (the answer column when not given): the seed file's known-good answer;
- the tags are the spec's, plus `source:<name>:<row>`, so each seed keeps the file and row it came from.

Rows are numbered as a person finds them: the line of a CSV or JSON Lines file (a CSV header is line 1), the
1-based row of a Parquet file or a dataset. Every seed is then checked as `seeds validate` checks it
(`validators.seeds.check_seed_records`: its reference must pass its own verifier, no two seeds alike, also
against the other seed files in the output's folder). A row that cannot become a valid seed is a located
`SeedProblem` with its reason and fix; the rows that can are written, in source order, atomically.
"""

from __future__ import annotations

import csv
import json
import string
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core import SeedwheelError
from core.tables import write_jsonl
from validators.registry import REGISTRY, UnknownVerifierError, Verifier, VerifyContext
from validators.seeds import (
    DATA_SUFFIXES,
    SEED_SUFFIXES,
    SOURCE_TAG,
    SeedProblem,
    SeedRecord,
    SeedSet,
    check_seed_records,
    load_seeds,
)
from validators.tasks import Problem


class SeedImportError(SeedwheelError, ValueError):
    """An import that cannot start (an unreadable source, an unknown column or verifier); the message says the fix."""


@dataclass(frozen=True)
class ImportSpec:
    """How a source's rows become seeds; see the module docstring."""

    family: str
    prompt: str
    verifier: str
    answer: str | None = None
    reference: str | None = None
    system: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    param_columns: Mapping[str, str] = field(default_factory=dict)
    tags: Sequence[str] = ()
    source: str | None = None

    def columns(self) -> list[str]:
        """Every column the spec reads, in the order a person wrote them."""
        named = [self.answer, self.reference, *self.param_columns.values()]
        return [*template_fields(self.prompt), *(column for column in named if column)]


@dataclass
class ImportReport:
    """What an import did: the seeds it wrote, and one located problem per row it could not convert."""

    output: Path
    rows: int
    written: int
    problems: list[SeedProblem]
    rejected_rows: int


def template_fields(template: str) -> list[str]:
    """The column names a prompt template reads (`'{question}'` -> `['question']`).

    Raises:
        SeedImportError: a field with an attribute, index or conversion (`{row.x}`, `{a[0]}`), or bad braces.

    Example:
        >>> template_fields("Q: {question} ({unit})")
        ['question', 'unit']
    """
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise SeedImportError(f"--prompt {template!r}: {exc}; write a literal brace as {{{{ or }}}}") from None
    names = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name or "." in name or "[" in name or conversion or spec:
            raise SeedImportError(
                f"--prompt {template!r}: the field {{{name}{'!' + conversion if conversion else ''}"
                f"{':' + spec if spec else ''}}} is not a plain column name; write {{column}}"
            )
        names.append(name)
    return list(dict.fromkeys(names))


def read_rows(path: Path, split: str | None = None) -> tuple[list[str], Iterator[tuple[int, Any]]]:
    """The columns of a source and its rows as `(number, row)`; a row is a mapping, or a problem's message.

    Raises:
        SeedImportError: the source is missing, of an unknown kind, not UTF-8, or a dataset folder that needs a split.
    """
    if not path.exists():
        raise SeedImportError(f"{path}: no such file or folder")
    if path.is_dir():
        return _dataset_rows(path, split)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        return list(table.column_names), enumerate(table.to_pylist(), start=1)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise SeedImportError(f"{path}:{line}: not UTF-8 text ({exc.reason}); save the file as UTF-8") from None
    if path.suffix in (".csv", ".tsv"):
        return _csv_rows(text, "\t" if path.suffix == ".tsv" else ",")
    if path.suffix in (".jsonl", ".json"):
        return _json_rows(text)
    kinds = ", ".join([*DATA_SUFFIXES, ".jsonl", "a saved datasets folder"])
    raise SeedImportError(f"{path}: not a source seeds import reads; give one of {kinds}")


def _csv_rows(text: str, delimiter: str) -> tuple[list[str], Iterator[tuple[int, Any]]]:
    reader = csv.reader(text.splitlines(keepends=True), delimiter=delimiter)
    header = next(reader, [])

    def rows() -> Iterator[tuple[int, Any]]:
        start = reader.line_num + 1
        for values in reader:
            if any(value.strip() for value in values):
                if len(values) != len(header):
                    yield start, f"{len(values)} values for the header's {len(header)} columns"
                else:
                    yield start, dict(zip(header, values, strict=True))
            start = reader.line_num + 1

    return header, rows()


def _json_rows(text: str) -> tuple[list[str], Iterator[tuple[int, Any]]]:
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            return [], iter([(exc.lineno, f"invalid JSON: {exc.msg} at column {exc.colno}")])
        numbered = list(enumerate(items, start=1))
    else:
        numbered = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                numbered.append((number, json.loads(line)))
            except json.JSONDecodeError as exc:
                numbered.append((number, f"invalid JSON: {exc.msg} at column {exc.colno}"))
    columns = dict.fromkeys(key for _, row in numbered if isinstance(row, dict) for key in row)
    rows = ((n, row if isinstance(row, dict | str) else "not a JSON object") for n, row in numbered)
    return list(columns), rows


def _dataset_rows(path: Path, split: str | None) -> tuple[list[str], Iterator[tuple[int, Any]]]:
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except FileNotFoundError:
        raise SeedImportError(
            f"{path}: a folder, but not one `datasets` saved (Dataset.save_to_disk); give a file, or that folder"
        ) from None
    if isinstance(loaded, datasets.DatasetDict):
        splits = sorted(loaded)
        if split is None and len(splits) == 1:
            split = splits[0]
        if split not in loaded:
            raise SeedImportError(f"{path}: a dataset of splits {', '.join(splits)}; pick one with --split")
        loaded = loaded[split]
    elif split is not None:
        raise SeedImportError(f"{path}: a single dataset with no splits; leave out --split {split}")
    return list(loaded.column_names), enumerate(iter(loaded), start=1)


def import_seeds(
    source: Path,
    spec: ImportSpec,
    output: Path,
    *,
    split: str | None = None,
    limit: int | None = None,
    context: VerifyContext | None = None,
) -> ImportReport:
    """Convert `source`'s rows into the seed file `output` (see the module docstring).

    Args:
        source: the data file or saved dataset folder.
        spec: how a row becomes a seed.
        output: the seed file to write (`seeds/<family>/<name>.jsonl`; the folder names the family).
        split: a `DatasetDict` folder's split.
        limit: convert the first this many rows only.
        context: where verifier fixtures resolve.

    Returns:
        The report: rows read, seeds written, and a problem per row not converted (none is dropped silently).

    Raises:
        SeedImportError: the import cannot start; nothing is written.

    Example:
        >>> spec = ImportSpec(family="arithmetic", prompt="{question}", answer="answer", verifier="numeric_answer")
        >>> import_seeds(Path("qa.csv"), spec, Path("seeds/arithmetic/qa.jsonl")).written  # doctest: +SKIP
        98
    """
    verifier = _check_spec(spec, output)
    if output.resolve() == source.resolve():
        raise SeedImportError(f"-o {output} is the source itself; write the seeds to another file")
    columns, rows = read_rows(source, split)
    missing = [column for column in spec.columns() if column not in columns]
    if missing:
        raise SeedImportError(
            f"{source}: no column {', '.join(map(repr, missing))}; its columns are {', '.join(columns) or 'none'}"
        )
    name = spec.source or source.name
    records: list[SeedRecord] = []
    problems: list[SeedProblem] = []
    for number, row in rows:
        if limit is not None and len(records) + len(problems) >= limit:
            break
        try:
            raw = _seed(row, spec, verifier, f"{name}:{number}")
        except _RowProblem as exc:
            problems.append(SeedProblem(str(source), number, exc.problem))
            continue
        records.append(SeedRecord(str(source), number, spec.family, raw))
    return write_seeds(records, problems, output, context=context)


def write_seeds(
    records: Sequence[SeedRecord],
    problems: Sequence[SeedProblem],
    output: Path,
    *,
    context: VerifyContext | None = None,
) -> ImportReport:
    """Check converted rows as `seeds validate` does and write the valid ones, in source order, atomically.

    The second half of every import (`import_seeds`, and other formats' readers such as NeMo Gym rows'): each seed
    is checked against the others and the other seed files in the output's folder.

    Args:
        records: the rows that became seed records.
        problems: the rows that did not, each located with its reason and fix.
        output: the seed file to write (`seeds/<family>/<name>.jsonl`).
        context: where verifier fixtures resolve.

    Returns:
        The report: rows, seeds written, and every problem in line order.

    Raises:
        SeedImportError: the output is not a `.jsonl` file in the folder of the records' family.
    """
    for family in sorted({record.family for record in records}):
        check_output(output, family)
    checked = check_seed_records(records, context=context, known=_taken(output, context))
    kept = {task["origin"] for task in checked.tasks}
    if kept:
        write_jsonl([record.raw for record in records if record.origin in kept], output)
    located = sorted([*problems, *checked.problems], key=lambda p: p.line)
    return ImportReport(output, len(records) + len(problems), len(kept), located, len(problems) + len(checked.rejects))


def check_output(output: Path, family: str) -> None:
    """Refuse a seed file path that does not end in `.jsonl` or whose folder is not the family's.

    Raises:
        SeedImportError: with the path to use instead.
    """
    if output.suffix != ".jsonl":
        raise SeedImportError(f"-o {output}: a seed file to write ends in .jsonl")
    if output.parent.name != family:
        raise SeedImportError(
            f"-o {output}: its folder names the family, so family {family!r} goes in "
            f"{output.parent.parent / family / output.name}"
        )


def _check_spec(spec: ImportSpec, output: Path) -> Verifier:
    check_output(output, spec.family)
    try:
        verifier = REGISTRY.get(spec.verifier)
    except UnknownVerifierError as exc:
        raise SeedImportError(f"--verifier: {exc}; registered: {', '.join(REGISTRY.names())}") from None
    if spec.answer and type(verifier).answer_params is Verifier.answer_params:
        raise SeedImportError(
            f"--answer: {spec.verifier} takes no single answer; give its params with --param-from NAME=COLUMN"
        )
    if not (spec.reference or spec.answer):
        raise SeedImportError("a seed needs a reference: give --reference COLUMN (or --answer COLUMN, used for both)")
    return verifier


class _RowProblem(SeedwheelError):
    """A row that cannot become a seed; caught per row and listed with its reason and fix, never raised past import."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


def _seed(row: Any, spec: ImportSpec, verifier: Verifier, origin: str) -> dict[str, Any]:
    """One row as a seed file's record; raises `_RowProblem` with the reason and fix."""
    if isinstance(row, str):
        raise _RowProblem(Problem("unreadable_row", "/", row, "fix the row, or delete it"))
    values = {column: _text(row, column) for column in template_fields(spec.prompt)}
    prompt = [{"role": "user", "content": spec.prompt.format_map(values)}]
    if spec.system:
        prompt.insert(0, {"role": "system", "content": spec.system})
    params = dict(spec.params)
    if spec.answer:
        try:
            params.update(verifier.answer_params(row.get(spec.answer)) or {})
        except ValueError as exc:
            fix = f"correct the {spec.answer!r} cell, or delete the row"
            raise _RowProblem(Problem("bad_answer", "/verifier/params", str(exc), fix)) from None
    params.update({name: row.get(column) for name, column in spec.param_columns.items()})
    reference = _text(row, spec.reference or str(spec.answer))
    tags = [*spec.tags, f"{SOURCE_TAG}:{origin}"]
    return {
        "prompt": prompt,
        "verifier": {"name": spec.verifier, "params": params},
        "reference": reference,
        "tags": tags,
    }


def _text(row: Mapping[str, Any], column: str) -> str:
    value = row.get(column)
    if value is None or (isinstance(value, float) and value != value) or not str(value).strip():
        raise _RowProblem(Problem("empty_cell", "/", f"the {column!r} cell is empty", "fill it in, or delete the row"))
    return str(value)


def _taken(output: Path, context: VerifyContext | None) -> dict[str, str]:
    """The task ids of the other seed files in the output's folder, by the `path:line` that holds them."""
    if not output.parent.is_dir():
        return {}
    others = [path for path in sorted(output.parent.iterdir()) if path != output and path.suffix in SEED_SUFFIXES]
    found = load_seeds(others, context=context) if others else SeedSet()
    return {task["task_id"]: task["origin"] for task in found.tasks}
