"""Validity of checked tasks: reject rows, the generator a task is counted under, rates and the floor."""

import pandas as pd
import pytest

from curation.validity import (
    FAILURE_SOURCE,
    TASK_REJECT_COLUMNS,
    below_floor,
    family_validity,
    reject_row,
    split_checked,
    task_generator,
    validity_rates,
)
from validators.tasks import Problem

MISMATCH = Problem("task_id_mismatch", "/task_id", "task_id is not the content hash", "recompute it")
REFERENCE = Problem("reference_failed", "/reference", "the reference fails its verifier", "fix the reference")


def task(task_id: str, family: str = "sql", **lineage) -> dict:
    return {"task_id": task_id, "family": family, "lineage": lineage or None}


@pytest.mark.parametrize(
    ("lineage", "generator"),
    [
        # A variant is counted under the generator that made it.
        ({"source": "variant", "generator": {"name": "sql_literal_swap", "version": 1}}, "sql_literal_swap"),
        # A failure task has no generator: it is counted under where it came from.
        ({"source": FAILURE_SOURCE, "generator": None}, FAILURE_SOURCE),
        # A generator without a name falls back to the source too.
        ({"source": "rewrite", "generator": {}}, "rewrite"),
        # No lineage at all: a seed.
        (None, "seed"),
        # A lineage without source or generator: a seed as well.
        ({}, "seed"),
    ],
)
def test_task_generator(lineage, generator):
    assert task_generator({"task_id": "t", "lineage": lineage}) == generator


@pytest.mark.parametrize(
    ("problems", "code", "reason"),
    [
        # One problem: its code and its text.
        ([REFERENCE], "reference_failed", str(REFERENCE)),
        # Several: the first one's code names the row, and every problem's text is kept.
        ([MISMATCH, REFERENCE], "task_id_mismatch", f"{MISMATCH}; {REFERENCE}"),
    ],
)
def test_reject_row_keeps_the_record_the_first_code_and_every_reason(problems, code, reason):
    record = task("t1", seed_id="s1", source="variant", generator={"name": "planted"})
    row = reject_row(record, problems)
    assert tuple(row) == TASK_REJECT_COLUMNS
    assert row == {
        "task_id": "t1",
        "family": "sql",
        "generator": "planted",
        "seed_id": "s1",
        "reason_code": code,
        "reason": reason,
        "record": record,  # the whole row, not just an id
    }


def test_split_checked_keeps_valid_tasks_and_rejects_the_rest_in_order():
    tasks = [task("a"), task("b"), task("c"), task("d")]
    good, rejects = split_checked(tasks, [[], [REFERENCE], [], [MISMATCH]])
    assert [t["task_id"] for t in good] == ["a", "c"]
    codes = [(r["task_id"], r["reason_code"]) for r in rejects]
    assert codes == [("b", "reference_failed"), ("d", "task_id_mismatch")]
    # A reject row without its lineage still has every column (a seed_id of None).
    assert rejects[0]["seed_id"] is None and rejects[0]["generator"] == "seed"


def test_split_checked_refuses_problems_that_do_not_line_up():
    with pytest.raises(ValueError):
        split_checked([task("a")], [])


@pytest.mark.parametrize(
    ("checked", "rejected", "rates"),
    [
        # Nothing rejected: every key fully valid, sorted by key.
        (["sql", "json", "sql"], [], {"json": (1, 1), "sql": (2, 2)}),
        # Rejects subtract from their own key only.
        (["sql", "sql", "json"], ["sql"], {"json": (1, 1), "sql": (1, 2)}),
        # A key with every row rejected stays in the table at zero.
        (["sql", "json"], ["json"], {"json": (0, 1), "sql": (1, 1)}),
        # Nothing checked: an empty table.
        ([], [], {}),
    ],
)
def test_validity_rates(checked, rejected, rates):
    assert validity_rates(pd.Series(checked, dtype=object), pd.Series(rejected, dtype=object)) == rates


@pytest.mark.parametrize(
    ("families", "rejects", "rates"),
    [
        # 4 of 5 sql variants valid.
        (["sql"] * 5, [("sql", "sql_literal_swap")], {"sql": 0.8}),
        # A rejected failure task is no variant: it does not lower its family's rate.
        (["sql"] * 5, [("sql", "sql_literal_swap"), ("sql", FAILURE_SOURCE)], {"sql": 0.8}),
        # Families are rated apart.
        (["sql", "sql", "json"], [("json", "json_extraction_resample")], {"json": 0.0, "sql": 1.0}),
    ],
)
def test_family_validity_leaves_out_rejected_failure_tasks(families, rejects, rates):
    frame = pd.DataFrame(rejects, columns=["family", "generator"])
    assert family_validity(pd.Series(families), frame) == pytest.approx(rates)


@pytest.mark.parametrize(
    ("rates", "floor", "below"),
    [
        # A rate equal to the floor meets it (4 of 5 valid, floor 0.8).
        ({"sql": 0.8}, 0.8, {}),
        # Just under it does not.
        ({"sql": 0.8, "json": 0.79}, 0.8, {"json": 0.79}),
        # A floor of 0 never blocks.
        ({"sql": 0.0}, 0.0, {}),
    ],
)
def test_below_floor(rates, floor, below):
    assert below_floor(rates, floor) == below
