"""The failures review queue, completed by a person: a failure's expected outcome becomes a seed file.

A review item (`failures.derive`) carries a YAML seed stub with TODOs where the gold data goes. On the review page
a person fills them (an answer, a tool call, a schema...) and saves. `complete_item` then:

1. names what is still missing (every `TODO` left, a family to choose) and writes nothing;
2. refuses text that looks like PII or a secret (`failures.redaction.redact_text` would change it): failure text
   was redacted before it was stored, and what a person adds must keep it so;
3. writes `seeds/<family>/failure-<failure id>.jsonl` through `curation.seed_import.write_seeds`, so the seed passes
   what `seedwheel seeds validate` checks (schema, params, the reference passing its own verifier, no duplicate),
   or the problems come back, each with its fix, and nothing is written.

The seed keeps the failure's id in its lineage (`lineage: {failure_id: ...}`; a seed is still its own root), so the
split keeps it with its failure and `seedwheel lineage` finds it. An item whose failure id a seed file names has
left the queue (`completed_failures`, `open_items`; `failure_tasks` drops it from `review_queue` too).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from core.tables import read_table
from curation.seed_import import write_seeds
from failures.redaction import redact_text
from validators.registry import VerifyContext
from validators.seeds import SeedRecord, discover_seed_files, read_seed_file

QUEUE_TABLE = "review_queue.parquet"
TODO = "TODO"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class Completion:
    """What saving a completed item did: the seed file written, or what is missing (nothing written then)."""

    path: Path | None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether the seed was written."""
        return self.path is not None


def completed_failures(seeds_folder: Path) -> dict[str, str]:
    """`{failure_id: path:line}` of every seed record whose lineage names a production failure."""
    found: dict[str, str] = {}
    for path in discover_seed_files([Path(seeds_folder)]):
        records, _ = read_seed_file(path)
        for record in records:
            lineage = record.raw.get("lineage") if isinstance(record.raw, Mapping) else None
            failure_id = lineage.get("failure_id") if isinstance(lineage, Mapping) else None
            if isinstance(failure_id, str):
                found.setdefault(failure_id, record.origin)
    return found


def drop_completed(queue: pd.DataFrame, completed: Mapping[str, str]) -> pd.DataFrame:
    """The queue without the items a seed completed (by failure id)."""
    if not len(queue):
        return queue
    return queue[~queue["failure_id"].isin(set(completed))].reset_index(drop=True)


def open_items(home: Path, seeds_folder: Path) -> list[dict[str, Any]]:
    """The stored `review_queue` of a storage root, less the items completed since (none stored: empty)."""
    path = Path(home) / QUEUE_TABLE
    if not path.exists():
        return []
    return drop_completed(read_table(path), completed_failures(seeds_folder)).to_dict(orient="records")


def missing_fields(value: Any, pointer: str = "") -> list[str]:
    """Every place a `TODO` is left, as `pointer: the TODO text`.

    Example:
        >>> missing_fields({"verifier": {"params": {"answer": "TODO: the expected number"}}})
        ['/verifier/params/answer: TODO: the expected number']
    """
    if isinstance(value, str):
        return [f"{pointer or '/'}: {value.strip()}"] if TODO in value else []
    if isinstance(value, Mapping):
        return [m for key, item in value.items() for m in missing_fields(item, f"{pointer}/{key}")]
    if isinstance(value, list):
        return [m for i, item in enumerate(value) for m in missing_fields(item, f"{pointer}/{i}")]
    return []


def _parse(text: str) -> tuple[dict[str, Any] | None, str]:
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return None, f"the seed is not valid YAML ({exc}): fix the indentation or quoting"
    if isinstance(loaded, list) and len(loaded) == 1:
        loaded = loaded[0]
    if not isinstance(loaded, dict):
        return None, "the seed must be one record (a mapping with prompt, verifier, reference)"
    return loaded, ""


def complete_item(
    item: Mapping[str, Any], seed_text: str, seeds_folder: Path, *, context: VerifyContext | None = None
) -> Completion:
    """Turn a completed seed stub into `seeds/<family>/failure-<id>.jsonl`, or say what is missing.

    Args:
        item: the review item (`failure_id`, `family`).
        seed_text: the completed stub (YAML: one record, or a one-record list); a `family` field chooses the family
            where the item's is `unknown`.
        seeds_folder: the seeds folder.
        context: where verifier fixtures resolve.

    Returns:
        `Completion(path)` once written, else `Completion(None, problems)`.
    """
    seed, problem = _parse(seed_text)
    if seed is None:
        return Completion(None, [problem])
    family = str(seed.pop("family", None) or item.get("family") or "unknown")
    problems = missing_fields(seed)
    if family == "unknown":
        problems.append("/family: choose the task family (add `family: <name>`, e.g. tool_call)")
    _, found = redact_text(yaml.safe_dump(seed, allow_unicode=True))
    if found.total:
        problems.append(f"the seed holds what looks like PII or a secret ({found}): write a placeholder instead")
    if problems:
        return Completion(None, problems)
    seed["lineage"] = {"failure_id": str(item["failure_id"])}
    output = Path(seeds_folder) / family / f"failure-{_UNSAFE.sub('_', str(item['failure_id']))}.jsonl"
    report = write_seeds([SeedRecord(str(output), 1, family, seed)], [], output, context=context)
    if report.written:
        return Completion(output)
    return Completion(None, [f"{p.problem}" for p in report.problems] or ["the seed was not written"])
