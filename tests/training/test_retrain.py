"""When the corpus_growth sensor trains again: no checkpoint yet, or the split grew by the configured fraction."""

import pytest

from training.retrain import DEFAULT_RETRAIN_GROWTH, retrain_at, retrain_decision


@pytest.mark.parametrize(
    ("rows", "trained_rows", "growth", "train", "reason"),
    [
        # No checkpoint records its split: the first training.
        (100, None, 0.25, True, "no checkpoint records the split it came from: training on the 100 tasks"),
        # +24% of +25%: not yet, and the skip says when.
        (124, 100, 0.25, False, "trained from 100; training again at 125 (+25%)"),
        # Exactly +25%: grown enough.
        (125, 100, 0.25, True, "train_tasks grew from 100 to 125 rows since the last checkpoint"),
        # Well past it.
        (300, 100, 0.25, True, "grew from 100 to 300"),
        # An unchanged split never trains again.
        (100, 100, 0.2, False, "training again at 120 (+20%)"),
        # A split that shrank (a re-split) does not either.
        (80, 100, 0.2, False, "train_tasks has 80 rows"),
        # The default growth: +20%.
        (120, 100, DEFAULT_RETRAIN_GROWTH, True, "grew from 100 to 120"),
        # +10% of 100 is 110 rows, although (1 + 0.1) * 100 is a hair above 110 in floating point.
        (110, 100, 0.1, True, "grew from 100 to 110"),
    ],
)
def test_retrain_decision(rows, trained_rows, growth, train, reason):
    decision = retrain_decision(rows, trained_rows, growth)
    assert decision.train is train
    assert reason in decision.reason


@pytest.mark.parametrize(
    ("trained_rows", "growth", "at"),
    [
        # A whole number of rows: exactly (1 + growth) times.
        (100, 0.25, 125),
        # A fraction of a row is rounded up: 10 * 1.25 = 12.5 needs 13 rows.
        (10, 0.25, 13),
        # Floating point does not add a row: (1 + 0.1) * 100 = 110.00000000000001 is 110.
        (100, 0.1, 110),
    ],
)
def test_retrain_at(trained_rows, growth, at):
    assert retrain_at(trained_rows, growth) == at
    # The size it names is the first that trains.
    assert retrain_decision(at, trained_rows, growth).train
    assert not retrain_decision(at - 1, trained_rows, growth).train
