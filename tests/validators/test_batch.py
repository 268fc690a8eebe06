"""`verify_many`: the same verdicts as `verify`, in input order, with any number of workers."""

import pytest

from validators.batch import verify_many
from validators.registry import verify

CODE_TASK = {"verifier": {"name": "python_tests", "params": {"tests": "assert sq(3) == 9", "entry_point": "sq"}}}
NUMBER_TASK = {"verifier": {"name": "numeric_answer", "params": {"answer": 4}}}


@pytest.mark.parametrize(
    "workers",
    [
        # Inline.
        1,
        # Both cores.
        2,
        # More threads than items.
        16,
    ],
)
def test_verdicts_match_verify_in_order(workers):
    tasks = [CODE_TASK, NUMBER_TASK, CODE_TASK, NUMBER_TASK, CODE_TASK]
    completions = ["def sq(x): return x * x", "#### 4", "def sq(x): return x + x", "#### 5", "def nope(): pass"]
    expected = [verify(t, c) for t, c in zip(tasks, completions, strict=True)]
    assert verify_many(tasks, completions, workers=workers) == expected


@pytest.mark.parametrize(
    ("tasks", "completions", "workers"),
    [
        # Lengths differ.
        ([NUMBER_TASK], ["#### 4", "#### 4"], 2),
        # No workers.
        ([NUMBER_TASK], ["#### 4"], 0),
    ],
)
def test_bad_arguments_are_refused(tasks, completions, workers):
    with pytest.raises(ValueError):
        verify_many(tasks, completions, workers=workers)


def test_empty_input_gives_no_verdicts():
    assert verify_many([], []) == []
