"""Which of the judged tasks a night's split admits, and which it holds back, each with a reason.

Of the tasks the judge's labels keep, two kinds are held back (a row each, `curation.vouching.HELD_BACK_COLUMNS`,
for the split's metadata, and a line for the run's log):

1. LLM text that neither its generator's current checks nor a judge whose labels are in use vouches for
   (`curation.vouching.vouch`);
2. a production failure that near-copies tasks on both sides of the split (`curation.curate.near_copy_roots`): no
   side is clean for it, so it is held out of both.

A production failure that near-copies the task of another root takes that root's side (`Admission.follows`, for
`curation.split_ledger.SplitLedger.assign`): on its own side it could train on an eval item's twin, and the
contamination check would stop the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from core.tables import frame_from_records, records_from_frame
from curation.curate import near_copy_roots, torn_row
from curation.dedup import MinHashConfig
from curation.splits import task_roots
from curation.vouching import HELD_BACK_COLUMNS, Voucher, vouch


@dataclass(frozen=True)
class Admission:
    """What `admit` decided.

    Attributes:
        tasks: the admitted rows of the table given, in order, with their index.
        records: the same tasks as task records.
        vouchers: why each task that got past the vouching may be kept (`curation.vouching.Voucher`); a torn
            failure held back afterwards keeps its voucher here.
        unvouched: the held-back rows of LLM text nothing vouches for.
        torn: the held-back rows of production failures that near-copy both sides.
        held_back: both, as one table (`HELD_BACK_COLUMNS`), the unvouched first.
        follows: failure root -> the root whose side it takes.
    """

    tasks: pd.DataFrame
    records: list[dict[str, Any]]
    vouchers: list[Voucher]
    unvouched: list[dict[str, Any]]
    torn: list[dict[str, Any]]
    held_back: pd.DataFrame
    follows: dict[str, str]

    @property
    def warnings(self) -> list[str]:
        """One line per held-back task, for the run's log."""
        return [
            *(f"held back {r['task_id']} ({r['family']}, {r['generator']}): {r['reason']}." for r in self.unvouched),
            *(f"held back {r['task_id']} ({r['family']}): {r['reason']}." for r in self.torn),
        ]


def admit(
    tasks: pd.DataFrame,
    verdicts: pd.Series,
    *,
    current_checks: Mapping[str, str],
    judge_vouches: bool,
    config: MinHashConfig,
    known: Mapping[str, str],
) -> Admission:
    """The tasks a split admits, those it holds back, and the failure roots that take another root's side.

    Args:
        tasks: the judged tasks the judge's labels keep (task fields only, nested columns decoded).
        verdicts: the judged tasks' `judge_verdict`s, by the judged table's index (that of `tasks` picks theirs).
        current_checks: the LLM generators by name, each with the version of the checks it runs now.
        judge_vouches: whether the judge's acceptance vouches for LLM text (its labels are in use).
        config: the MinHash settings near-copies are found with (the dedup's and the contamination check's).
        known: root -> side from the split ledger; such roots lead their near-copies, and never follow.

    Returns:
        An `Admission`.
    """
    candidates = records_from_frame(tasks)
    verdicts_in_order = verdicts.loc[tasks.index].tolist()
    vouching = vouch(candidates, verdicts_in_order, current_checks=current_checks, judge_vouches=judge_vouches)
    kept = tasks[pd.Series(vouching.kept, index=tasks.index, dtype=bool)]  # none kept is no rows, not no columns
    records = [record for record, vouched in zip(candidates, vouching.kept, strict=True) if vouched]
    near = near_copy_roots(records, config, known=known)
    clean = [root not in near.torn for root in task_roots(records)]
    torn = [torn_row(record) for record, ok in zip(records, clean, strict=True) if not ok]
    return Admission(
        tasks=kept[pd.Series(clean, index=kept.index, dtype=bool)],
        records=[record for record, ok in zip(records, clean, strict=True) if ok],
        vouchers=[voucher for voucher in vouching.vouchers if voucher is not None],
        unvouched=vouching.held_back,
        torn=torn,
        held_back=frame_from_records([*vouching.held_back, *torn], HELD_BACK_COLUMNS),
        follows=near.follows,
    )
