"""A person's labels on real outputs and on the judge, as version-controlled files beside the seeds.

**Where.** Under the seeds folder, one JSON Lines file per reviewer and kind:
`seeds/audit/review/reward/<reviewer>.jsonl` (outputs of the policy: does the verifier's verdict hold?) and
`seeds/audit/review/judge/<reviewer>.jsonl` (tasks the judge labelled: is the task fit for training?). One label
per line, sorted by id, keys in a fixed order, written atomically: a review round is a diff a team reads in a pull
request. The audit folder is not a seed folder (`validators.seeds.NON_SEED_DIRS`), and the judge's loader reads only
`judge*.jsonl` files at the audit folder's top, so these files are read only through this module.

**A reward label** records what the person saw and said: the output's `id`, `reviewer`, `labelled_at` (UTC,
ISO 8601), the `model` that wrote it, the task (`task_id`, `family`, `prompt`, `verifier` with its version), the
`completion`, the verifier's `verdict` (`score`, `passed`, `reason`) and the judge's verdict on the task where
one exists, then `agree` (the person agrees with the verifier's verdict) and `human` (`accept`: would the person
pay this output; `reason`). `human.accept` is what the audit compares with: it stays true when the verifier is
fixed later, where `agree` was about the verdict of the version the person saw.

**Agreement between reviewers.** Two reviewers' labels on the same ids give Cohen's kappa
(`judge.calibration.cohen_kappa`) over their accept/reject verdicts (`reviewer_agreement`).

**PII.** What a reviewer sees was redacted before it was stored (failure text) or is the model's own output on
training tasks; what a reviewer writes (reasons) passes `failures.redaction.redact_text` before it is stored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from core import SeedwheelError
from core.tables import atomic_write
from failures.redaction import redact_text
from judge.calibration import cohen_kappa
from validators.seeds import AUDIT_DIR

REVIEW_DIR = "review"  # under the audit folder
Kind = Literal["reward", "judge"]
KINDS: tuple[Kind, ...] = ("reward", "judge")
_REVIEWER = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
REWARD_KEYS = (
    "id", "reviewer", "labelled_at", "model", "task_id", "family", "prompt", "verifier", "completion", "verdict",
    "judge", "agree", "human",
)  # fmt: skip
JUDGE_KEYS = ("id", "reviewer", "labelled_at", "source", "model", "task", "judge", "human")


class ReviewLabelError(SeedwheelError, ValueError):
    """A label or label file that cannot be used; the message names the file, the line or the field, and the fix."""


def check_reviewer(name: str) -> str:
    """The reviewer's name as it names their label file: lower-case letters, digits, `.`, `_`, `-`.

    Example:
        >>> check_reviewer("ana.r")
        'ana.r'
    """
    if not isinstance(name, str) or not _REVIEWER.match(name):
        raise ReviewLabelError(
            f"reviewer name {name!r} cannot name a label file",
            hint="use 1-64 lower-case letters, digits, '.', '_' or '-', e.g. 'ana' or 'j.smith'",
        )
    return name


def label_dir(seeds_folder: Path, kind: Kind) -> Path:
    """`<seeds>/audit/review/<kind>`: where the labels of one kind live."""
    if kind not in KINDS:
        raise ReviewLabelError(f"unknown label kind {kind!r}", hint=f"use one of {', '.join(KINDS)}")
    return Path(seeds_folder) / AUDIT_DIR / REVIEW_DIR / kind


def label_file(seeds_folder: Path, kind: Kind, reviewer: str) -> Path:
    """The label file of one reviewer: `<seeds>/audit/review/<kind>/<reviewer>.jsonl`."""
    return label_dir(seeds_folder, kind) / f"{check_reviewer(reviewer)}.jsonl"


def now() -> str:
    """The current time, UTC, ISO 8601 to the second (a label's `labelled_at`)."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def clean_reason(text: str) -> str:
    """A reviewer's reason, one line, with anything that looks like PII or a secret replaced by a placeholder.

    Example:
        >>> clean_reason("wrong total;  mail ann@example.com")
        'wrong total; mail [EMAIL]'
    """
    return redact_text(" ".join(str(text or "").split()))[0]


def read_labels(path: Path, keys: Sequence[str]) -> list[dict[str, Any]]:
    """Every label of one file, in file order; each must be an object with `keys` and a unique `id`.

    Raises:
        ReviewLabelError: unreadable file, bad JSON, a missing field or a repeated id (`path:line`).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReviewLabelError(f"{path}: cannot read the label file ({exc})", hint="check the path") from exc
    labels: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            label = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ReviewLabelError(f"{path}:{number}: not valid JSON ({exc.msg})", hint="one label per line") from None
        missing = [key for key in keys if key not in label] if isinstance(label, dict) else list(keys)
        if missing:
            raise ReviewLabelError(
                f"{path}:{number}: missing {', '.join(missing)}", hint="label it again on the review page"
            )
        if not isinstance(label["human"], dict) or not isinstance(label["human"].get("accept"), bool):
            raise ReviewLabelError(f"{path}:{number}: human.accept must be true or false", hint="label it again")
        if label["id"] in seen:
            raise ReviewLabelError(
                f"{path}:{number}: id {label['id']!r} repeats line {seen[label['id']]}", hint="keep one of the two"
            )
        seen[label["id"]] = number
        labels.append(label)
    return labels


def save_label(path: Path, label: Mapping[str, Any], keys: Sequence[str]) -> list[dict[str, Any]]:
    """Add `label` to the file (replacing the label with the same id), sorted by id, atomically; the labels now."""
    labels = {existing["id"]: existing for existing in (read_labels(path, keys) if path.exists() else [])}
    labels[str(label["id"])] = {key: label[key] for key in keys}
    ordered = [labels[key] for key in sorted(labels)]
    with atomic_write(path, "w") as handle:
        for item in ordered:
            handle.write(json.dumps(item, ensure_ascii=False, sort_keys=False) + "\n")
    return ordered


def label_files(seeds_folder: Path, kind: Kind) -> list[Path]:
    """Every reviewer's label file of one kind, sorted by name (none yet: empty)."""
    folder = label_dir(seeds_folder, kind)
    return sorted(folder.glob("*.jsonl")) if folder.is_dir() else []


def load_labels(seeds_folder: Path, kind: Kind) -> dict[str, list[dict[str, Any]]]:
    """`{reviewer: labels}` of one kind, from every file under `<seeds>/audit/review/<kind>/`."""
    keys = REWARD_KEYS if kind == "reward" else JUDGE_KEYS
    return {path.stem: read_labels(path, keys) for path in label_files(seeds_folder, kind)}


@dataclass(frozen=True)
class ReviewerAgreement:
    """How far two reviewers agree on the ids both labelled: raw agreement and Cohen's kappa (None: undefined)."""

    reviewers: tuple[str, str]
    shared: int
    agreements: int
    kappa: float | None

    def line(self) -> str:
        """One line for a page or metadata."""
        kappa = "undefined" if self.kappa is None else f"{self.kappa:.2f}"
        return (
            f"{self.reviewers[0]} vs {self.reviewers[1]}: {self.agreements}/{self.shared} labels agree, "
            f"Cohen's kappa {kappa}"
        )


def reviewer_agreement(a: Mapping[str, bool], b: Mapping[str, bool], names: tuple[str, str]) -> ReviewerAgreement:
    """Cohen's kappa between two reviewers' accept/reject verdicts on the ids both gave one.

    Args:
        a, b: `{id: accept}` of each reviewer.
        names: the two reviewers' names, for the report.

    Example:
        >>> a = {"1": True, "2": True, "3": False, "4": False}
        >>> b = {"1": True, "2": False, "3": False, "4": False}
        >>> reviewer_agreement(a, b, ("ana", "bo")).kappa
        0.5
    """
    shared = sorted(set(a) & set(b))
    confusion: dict[str, dict[str, int]] = {"accept": {"accept": 0, "reject": 0}, "reject": {"accept": 0, "reject": 0}}
    for key in shared:
        confusion["accept" if a[key] else "reject"]["accept" if b[key] else "reject"] += 1
    agreements = confusion["accept"]["accept"] + confusion["reject"]["reject"]
    return ReviewerAgreement(names, len(shared), agreements, cohen_kappa(confusion) if shared else None)


def pairwise_agreement(labels: Mapping[str, Iterable[Mapping[str, Any]]]) -> list[ReviewerAgreement]:
    """`reviewer_agreement` for every pair of reviewers who labelled at least one id in common."""
    verdicts = {name: {str(x["id"]): bool(x["human"]["accept"]) for x in rows} for name, rows in labels.items()}
    names = sorted(verdicts)
    found = []
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            pair = reviewer_agreement(verdicts[first], verdicts[second], (first, second))
            if pair.shared:
                found.append(pair)
    return found
