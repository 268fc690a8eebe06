"""Reward labels: a person's verdict on a real output becomes a reward-audit row beside the hand-written ones.

A label says whether the person agrees with the verifier's verdict on one output (`agree`) and, from that, whether
they would pay it (`human.accept`). `reviewed_rows` turns every reviewer's labels into
`training.reward_audit.LabelledCompletion`s (id `review/<reviewer>/<output id>`, tags `reviewed` and
`reviewer:<name>`), so `reward_sound` scores them with the training reward exactly as it scores
`seeds/audit/reward_audit.jsonl`: a place where the reward and a person differ is a disagreement of the audit, to fix
in the verifier or in the task. `agreement_table` splits the audit's agreement by source (hand-written,
reviewed), family and verifier.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from review.labels import (
    REWARD_KEYS,
    ReviewerAgreement,
    clean_reason,
    label_file,
    label_files,
    load_labels,
    now,
    pairwise_agreement,
    save_label,
)
from training.reward_audit import LabelledCompletion, RewardAuditPolicy, load_labelled, score_labelled
from validators.registry import VerifyContext
from validators.rewards import build_reward_funcs

HAND_WRITTEN = "hand-written"
REVIEWED = "reviewed"
REVIEW_PREFIX = "review/"
AGREEMENT_COLUMNS = (
    "source", "family", "verifier", "rows", "scored", "agreed", "agreement", "false_accepts", "false_rejects",
)  # fmt: skip


@dataclass(frozen=True)
class AuditLabels:
    """The reward audit's labelled rows and where they came from (the files, for the check to name)."""

    rows: list[LabelledCompletion]
    files: list[str] = field(default_factory=list)
    # How far each pair of reviewers who labelled the same outputs agree (`review.labels.pairwise_agreement`).
    reviewers: list[ReviewerAgreement] = field(default_factory=list)

    @property
    def reviewed(self) -> int:
        """How many of the rows came from reviewers' labels."""
        return sum(row.id.startswith(REVIEW_PREFIX) for row in self.rows)


def reward_label(output: Mapping[str, Any], reviewer: str, agree: bool, reason: str) -> dict[str, Any]:
    """The label of one output (`review.sampling`'s record) by one reviewer: agree or not with its verdict.

    Example:
        >>> output = {"id": "o1", "model": "m", "task_id": "t", "family": "arithmetic", "prompt": [],
        ...           "verifier": {"name": "numeric_answer", "version": 1, "params": {"answer": 4}},
        ...           "completion": "#### 5", "verdict": {"score": 0.0, "passed": False, "reason": "mismatch"},
        ...           "judge": None}
        >>> reward_label(output, "ana", agree=True, reason="5 is wrong")["human"]
        {'accept': False, 'reason': '5 is wrong'}
    """
    passed = bool(output["verdict"]["passed"])
    return {
        **{key: output[key] for key in REWARD_KEYS if key in output},
        "reviewer": reviewer,
        "labelled_at": now(),
        "agree": bool(agree),
        "human": {"accept": passed if agree else not passed, "reason": clean_reason(reason)},
    }


def save_reward_label(seeds_folder: Path, label: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Write one reward label into its reviewer's file (`<seeds>/audit/review/reward/<reviewer>.jsonl`)."""
    return save_label(label_file(seeds_folder, "reward", label["reviewer"]), label, REWARD_KEYS)


def as_labelled(label: Mapping[str, Any]) -> LabelledCompletion:
    """One reward label as a reward-audit row."""
    return LabelledCompletion(
        id=f"{REVIEW_PREFIX}{label['reviewer']}/{label['id']}",
        family=str(label["family"]),
        prompt=list(label["prompt"]),
        verifier=dict(label["verifier"]),
        completion=label["completion"],
        accept=bool(label["human"]["accept"]),
        reason=str(label["human"].get("reason", "")),
        tags=(REVIEWED, f"reviewer:{label['reviewer']}"),
    )


def reviewed_rows(seeds_folder: Path) -> AuditLabels:
    """Every reviewer's reward labels as reward-audit rows, with the files they came from."""
    labels = load_labels(seeds_folder, "reward")
    rows = [as_labelled(label) for name in sorted(labels) for label in labels[name]]
    files = [str(path) for path in label_files(seeds_folder, "reward")]
    return AuditLabels(rows, files, pairwise_agreement(labels))


def audit_labels(seeds_folder: Path, hand_written: Path, context: VerifyContext | None = None) -> AuditLabels:
    """The reward audit's labelled set: the hand-written file, then every reviewer's labels.

    Args:
        seeds_folder: the seeds folder (reviewers' labels live under its `audit/review/reward/`).
        hand_written: the hand-written set, e.g. `seeds/audit/reward_audit.jsonl`.
        context: where fixture paths resolve (`load_labelled`).
    """
    reviewed = reviewed_rows(seeds_folder)
    hand = load_labelled(hand_written, context=context)
    return AuditLabels([*hand, *reviewed.rows], [str(hand_written), *reviewed.files], reviewed.reviewers)


def source_of(row_id: str) -> str:
    """`reviewed` for a row built from a reviewer's label, else `hand-written`."""
    return REVIEWED if row_id.startswith(REVIEW_PREFIX) else HAND_WRITTEN


def agreement_table(scored: Iterable[Mapping[str, Any]], labelled: Sequence[LabelledCompletion]) -> list[dict]:
    """The audit's agreement per source, family and verifier, then per source over all (`family` and
    `verifier` `*`).

    Args:
        scored: the audit's scored rows (`RewardAudit.rows`: `id`, `family`, `human_accept`, `reward_accept`,
            `agree`).
        labelled: the labelled set they came from (for each row's verifier).

    Returns:
        Rows of `AGREEMENT_COLUMNS`; `agreement` is None where no row was scored.
    """
    verifier = {row.id: str(row.verifier.get("name")) for row in labelled}
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for row in scored:
        source = source_of(str(row["id"]))
        for key in ((source, row["family"], verifier.get(row["id"], "?")), (source, "*", "*")):
            groups.setdefault(key, []).append(row)
    table = []
    for (source, family, name), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] == "*", kv[0])):
        judged = [r for r in rows if r.get("agree") is not None]
        agreed = sum(bool(r["agree"]) for r in judged)
        table.append(
            {
                "source": source,
                "family": family,
                "verifier": name,
                "rows": len(rows),
                "scored": len(judged),
                "agreed": agreed,
                "agreement": round(agreed / len(judged), 4) if judged else None,
                "false_accepts": sum(bool(r["reward_accept"]) and not r["human_accept"] for r in judged),
                "false_rejects": sum(not r["reward_accept"] and bool(r["human_accept"]) for r in judged),
            }
        )
    return table


def reviewed_agreement(
    seeds_folder: Path, context: VerifyContext | None = None, policy: RewardAuditPolicy | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The reviewers' labels scored by the verifiers now (one reward judging every row with its own verifier, as
    the default `reward_weights` do), and their agreement table: what the review page shows after each label."""
    rows = reviewed_rows(seeds_folder).rows
    if not rows:
        return [], []
    funcs, weights = build_reward_funcs({"*": 1.0}, context=context)
    scored = score_labelled(funcs, weights, rows, policy=policy)
    return scored, agreement_table(scored, rows)
