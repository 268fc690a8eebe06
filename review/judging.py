"""Judge labels: a person labels the judge's calibration items and a sample of its real verdicts, and
`judge_calibration` uses the new labels.

An item is a task as the judge saw it, with the judge's verdict where one is stored (`judge_calibration` for the
calibration items, `judged_tasks` for the real verdicts). The person says whether the task is fit for training
(`human.accept`, as in `seeds/audit/judge_audit.jsonl`), with a reason; labels go to
`seeds/audit/review/judge/<reviewer>.jsonl`.

`calibration_items` is what `judge_calibration` judges: the sample of the hand-written set, then every task a
reviewer labelled from the real verdicts (the first reviewer by name where two labelled one), as `AuditItem`s whose
`origin` is the label's `file:line`. A reviewer's label on a hand-written item does not replace its label: it is
compared with it (`hand_written_agreement`, Cohen's kappa), which says how far the set itself can be trusted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.tables import read_table
from judge.calibration import AuditItem, calibration_sample, load_audit_set
from review.labels import (
    JUDGE_KEYS,
    ReviewerAgreement,
    clean_reason,
    label_file,
    load_labels,
    now,
    reviewer_agreement,
    save_label,
)
from validators.seeds import AUDIT_DIR

CALIBRATION = "calibration"
VERDICT = "verdict"
DEFAULT_VERDICTS = 20
REVIEWED_TAG = "reviewed"


def _judgments(path: Path, verdict_column: str, rationale_column: str) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    found: dict[str, dict[str, Any]] = {}
    for row in read_table(path).to_dict(orient="records"):
        if row.get(verdict_column) in ("accept", "reject", "judge_error"):
            judgment = {"verdict": row[verdict_column], "rationale": row.get(rationale_column)}
            found.setdefault(str(row["task_id"]), judgment)
    return found


def judge_items(home: Path, seeds_folder: Path, verdicts: int = DEFAULT_VERDICTS) -> list[dict[str, Any]]:
    """The items to label: every hand-written calibration item, then up to `verdicts` real verdicts of the judge
    (accepts and rejects in a stable hashed order), each with the judge's verdict where one is stored."""
    calibrated = _judgments(Path(home) / "judge_calibration.parquet", "verdict", "rationale")
    items = [
        {
            "id": item.id,
            "source": CALIBRATION,
            "task": {"family": item.family, "prompt": list(item.prompt), "reference": item.reference},
            "judge": calibrated.get(item.id),
        }
        for item in load_audit_set(Path(seeds_folder) / AUDIT_DIR)
    ]
    judged_path = Path(home) / "judged_tasks.parquet"
    if judged_path.exists():
        rows = [
            r
            for r in read_table(judged_path).to_dict(orient="records")
            if r.get("judge_verdict") in ("accept", "reject")
        ]
        rows.sort(key=lambda r: hashlib.sha256(str(r["task_id"]).encode()).hexdigest())
        items += [
            {
                "id": str(r["task_id"]),
                "source": VERDICT,
                "task": {"family": r["family"], "prompt": list(r["prompt"]), "reference": r.get("reference")},
                "judge": {"verdict": r["judge_verdict"], "rationale": r.get("judge_rationale")},
            }
            for r in rows[:verdicts]
        ]
    return items


def judge_label(item: Mapping[str, Any], reviewer: str, accept: bool, reason: str, model: str = "") -> dict:
    """The label of one judge item by one reviewer: is the task fit for training?"""
    return {
        "id": item["id"],
        "reviewer": reviewer,
        "labelled_at": now(),
        "source": item["source"],
        "model": model,
        "task": item["task"],
        "judge": item.get("judge"),
        "human": {"accept": bool(accept), "reason": clean_reason(reason)},
    }


def save_judge_label(seeds_folder: Path, label: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Write one judge label into its reviewer's file (`<seeds>/audit/review/judge/<reviewer>.jsonl`)."""
    return save_label(label_file(seeds_folder, "judge", label["reviewer"]), label, JUDGE_KEYS)


def reviewed_items(seeds_folder: Path) -> list[AuditItem]:
    """The real verdicts reviewers labelled, as audit items (one per task: the first reviewer by name)."""
    items: dict[str, AuditItem] = {}
    for reviewer, labels in sorted(load_labels(seeds_folder, "judge").items()):
        path = label_file(seeds_folder, "judge", reviewer)
        for line, label in enumerate(labels, start=1):
            if label["source"] != VERDICT or label["id"] in items:
                continue
            task = label["task"]
            items[label["id"]] = AuditItem(
                id=str(label["id"]),
                family=str(task["family"]),
                prompt=tuple({"role": m["role"], "content": m["content"]} for m in task["prompt"]),
                reference=task.get("reference"),
                accept=bool(label["human"]["accept"]),
                reason=str(label["human"].get("reason") or "reviewed"),
                tags=(REVIEWED_TAG, f"reviewer:{reviewer}"),
                origin=f"{path}:{line}",
            )
    return [items[key] for key in sorted(items)]


def calibration_items(seeds_folder: Path, per_family: int | None) -> list[AuditItem]:
    """What `judge_calibration` judges: `calibration_sample` of the hand-written set, then the reviewed verdicts
    (those whose id is not a hand-written item's)."""
    hand = calibration_sample(load_audit_set(Path(seeds_folder) / AUDIT_DIR), per_family)
    taken = {item.id for item in hand}
    return [*hand, *(item for item in reviewed_items(seeds_folder) if item.id not in taken)]


def label_sources(items: list[AuditItem]) -> list[str]:
    """The files the items came from, in order (for the check to say which labels it used)."""
    return list(dict.fromkeys(item.origin.rsplit(":", 1)[0] for item in items))


def hand_written_agreement(seeds_folder: Path) -> list[ReviewerAgreement]:
    """Each reviewer's labels on the hand-written calibration items against those items' labels (Cohen's kappa)."""
    hand = {item.id: item.accept for item in load_audit_set(Path(seeds_folder) / AUDIT_DIR)}
    found = []
    for reviewer, labels in sorted(load_labels(seeds_folder, "judge").items()):
        theirs = {str(x["id"]): bool(x["human"]["accept"]) for x in labels if x["source"] == CALIBRATION}
        pair = reviewer_agreement(hand, theirs, ("hand-written", reviewer))
        if pair.shared:
            found.append(pair)
    return found
