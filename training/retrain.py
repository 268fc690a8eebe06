"""When to train again: the training split has grown by a fraction since the split the last checkpoint came from.

The `corpus_growth` sensor reads the row count of the latest `train_tasks` and the `train_tasks_rows` the last
GRPO checkpoint recorded, and asks `retrain_decision` whether that is growth enough.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The growth the sensor uses when none is configured (switched on by hand in the UI): +20%.
DEFAULT_RETRAIN_GROWTH = 0.2


@dataclass(frozen=True)
class RetrainDecision:
    """Whether to train again, and why (a sentence for the run's tag or the sensor's skip reason)."""

    train: bool
    reason: str


def retrain_at(trained_rows: int, growth: float) -> int:
    """The smallest split size that trains again: `trained_rows` grown by `growth` (a fraction), rounded up.

    Example:
        >>> retrain_at(100, 0.25), retrain_at(10, 0.2), retrain_at(100, 0.1)
        (125, 12, 110)
    """
    # Rounded first: (1 + 0.1) * 100 is 110.00000000000001 in floating point, which must not round up to 111.
    return math.ceil(round((1 + growth) * trained_rows, 9))


def retrain_decision(rows: int, trained_rows: int | None, growth: float) -> RetrainDecision:
    """Train again when there is no checkpoint to compare with, or the split has grown by `growth` since.

    Args:
        rows: rows of the current `train_tasks`.
        trained_rows: rows of the split the last checkpoint was trained from; None when no checkpoint records it.
        growth: the fraction the split must have grown by (0.2: +20%).

    Returns:
        A `RetrainDecision`.

    Example:
        >>> retrain_decision(124, 100, 0.25).train, retrain_decision(125, 100, 0.25).train
        (False, True)
        >>> retrain_decision(124, 100, 0.25).reason
        'train_tasks has 124 rows, the last checkpoint was trained from 100; training again at 125 (+25%)'
    """
    if trained_rows is None:
        why = f"no checkpoint records the split it came from: training on the {rows} tasks of train_tasks"
        return RetrainDecision(True, why)
    if rows < retrain_at(trained_rows, growth):
        return RetrainDecision(
            False,
            f"train_tasks has {rows} rows, the last checkpoint was trained from {trained_rows}; "
            f"training again at {retrain_at(trained_rows, growth)} (+{growth:.0%})",
        )
    return RetrainDecision(True, f"train_tasks grew from {trained_rows} to {rows} rows since the last checkpoint")
