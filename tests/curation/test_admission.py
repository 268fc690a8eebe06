"""Which judged tasks a split admits: unvouched LLM text and failures torn between both sides are held back."""

import pandas as pd

from core.tables import frame_from_records
from curation.admission import admit
from curation.dedup import MinHashConfig
from curation.vouching import HELD_BACK_COLUMNS

CHECKS = {"llm_rewrite": "rewrite-checks-v2"}
QUESTION = "Noah rides his bike to work for each of his {n} workdays. His work is 20 miles away. How far does he ride?"


def task(task_id, text, seed_id=None, failure_id=None, checks=None):
    """A task record with what admission reads; `checks` makes it an `llm_rewrite` that passed those checks."""
    generator = None if checks is None else {"name": "llm_rewrite", "params": {"checks": checks}}
    lineage = {"seed_id": seed_id, "failure_id": failure_id, "generator": generator}
    return {
        "task_id": task_id,
        "family": "arithmetic",
        "prompt": [{"role": "user", "content": text}],
        "lineage": lineage,
    }


def judged(tasks, verdicts, index):
    """The tasks as the judged table's rows at `index` (a filtered table keeps its labels), and their verdicts."""
    frame = frame_from_records(tasks).set_axis(index)
    return frame, pd.Series(verdicts, index=index)


def run(frame, verdicts, judge_vouches=False, known=None):
    return admit(
        frame,
        verdicts,
        current_checks=CHECKS,
        judge_vouches=judge_vouches,
        config=MinHashConfig(),
        known=known or {},
    )


def test_unvouched_llm_text_and_a_failure_torn_between_both_sides_are_held_back():
    tasks = [
        task("s", QUESTION.format(n=5), seed_id="seed-1"),
        task("r", "Um, um, um, um, um, um, um, um, um", seed_id="seed-1", checks="rewrite-checks-v1"),  # made before
        task("f", QUESTION.format(n=7), failure_id="failure-new"),  # near-copies a train and an eval root
        task("e", QUESTION.format(n=8), failure_id="failure-old"),
        task("g", "Write a SQL query that lists every customer in Paris.", seed_id="seed-2"),
    ]
    frame, verdicts = judged(tasks, ["accept"] * 5, [3, 5, 8, 13, 21])
    admitted = run(frame, verdicts, known={"seed-1": "train", "failure-old": "eval"})
    assert list(admitted.tasks.index) == [3, 13, 21]  # the rows of the table given, with their labels
    assert [r["task_id"] for r in admitted.records] == ["s", "e", "g"]
    assert admitted.vouchers == ["not_llm"] * 4  # the torn failure passed the vouching: its voucher is counted
    assert [r["task_id"] for r in admitted.unvouched] == ["r"] and [r["task_id"] for r in admitted.torn] == ["f"]
    assert list(admitted.held_back.columns) == list(HELD_BACK_COLUMNS)
    assert list(admitted.held_back["task_id"]) == ["r", "f"]  # the unvouched first
    assert admitted.warnings == [
        f"held back r (arithmetic, llm_rewrite): {admitted.unvouched[0]['reason']}.",
        "held back f (arithmetic): a production failure that near-copies tasks on both sides of the split: held "
        "out of both.",
    ]
    assert admitted.follows == {}


def test_a_failure_that_near_copies_one_root_takes_its_side_and_nothing_is_held_back():
    tasks = [
        task("s", QUESTION.format(n=5), seed_id="seed-1"),
        task("f", QUESTION.format(n=7), failure_id="failure-1"),
    ]
    admitted = run(*judged(tasks, ["accept", "accept"], [0, 1]))
    assert admitted.follows == {"failure-1": "seed-1"}
    assert [r["task_id"] for r in admitted.records] == ["s", "f"]
    assert admitted.held_back.empty and admitted.warnings == []


def test_each_task_is_vouched_for_by_its_own_verdict():
    # Two rewrites made before the current checks, where the judge's labels are in use: only its acceptance
    # vouches, so the verdict must be the one of the task's own row, picked by its label.
    tasks = [
        task("a", QUESTION.format(n=5), seed_id="seed-1", checks="rewrite-checks-v1"),
        task(
            "b", "Write a SQL query that lists every customer in Paris.", seed_id="seed-2", checks="rewrite-checks-v1"
        ),
    ]
    frame = frame_from_records(tasks).set_axis([7, 2])
    verdicts = pd.Series({2: "accept", 5: "reject", 7: "reject"})  # every judged row, in another order
    admitted = run(frame, verdicts, judge_vouches=True)
    assert [r["task_id"] for r in admitted.records] == ["b"] and admitted.vouchers == ["judge"]
    assert [(r["task_id"], r["judge_verdict"]) for r in admitted.unvouched] == [("a", "reject")]


def test_nothing_admitted_is_no_rows_with_every_column():
    # Every task unvouched LLM text: the admitted table keeps its columns, as downstream steps read them.
    tasks = [task(f"r{i}", f"Um, um, {i}", seed_id="seed-1", checks="rewrite-checks-v1") for i in range(2)]
    frame, verdicts = judged(tasks, ["accept"] * 2, [0, 1])
    admitted = run(frame, verdicts)
    assert admitted.tasks.empty and list(admitted.tasks.columns) == list(frame.columns)
    assert admitted.records == [] and len(admitted.held_back) == 2
