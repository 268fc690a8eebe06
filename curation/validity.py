"""Which checked tasks are valid, the reject rows of the others, and the validity rates the floor is judged on.

`validated_tasks` checks every variant and failure task (`validators.tasks.check_tasks`); `split_checked` keeps
the valid ones and turns each invalid one into a reject row (`TASK_REJECT_COLUMNS`: the whole record with its
first problem's code and every problem's text), and `validity_rates` counts valid over checked per family or
generator. The `family_validity_floor` check reads `family_validity` and `below_floor`: only generated variants
count there, since a failure task rejected here (derived from logs) says nothing about a generator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from validators.records import TaskReject
from validators.tasks import Problem

# Where an ungenerated task came from, in its lineage: rejected failure tasks are left out of the validity floor.
FAILURE_SOURCE = "production_failure"
TASK_REJECT_COLUMNS: tuple[str, ...] = tuple(TaskReject.__annotations__)


def task_generator(task: Mapping[str, Any]) -> str:
    """The generator's name, or where an ungenerated task came from (`production_failure`), or `seed`.

    Example:
        >>> task_generator({"lineage": {"source": "variant", "generator": {"name": "sql_literal_swap"}}})
        'sql_literal_swap'
        >>> task_generator({"lineage": {"source": "production_failure", "generator": None}})
        'production_failure'
    """
    lineage = task.get("lineage") or {}
    return (lineage.get("generator") or {}).get("name") or lineage.get("source") or "seed"


def reject_row(task: Mapping[str, Any], problems: Sequence[Problem]) -> TaskReject:
    """The `task_rejects` row of a task that failed its checks: ids, the first problem's code, all problems' text.

    Args:
        task: the task record (kept whole in `record`).
        problems: what `check_tasks` found, at least one.

    Returns:
        A `TaskReject` (its keys are `TASK_REJECT_COLUMNS`).
    """
    return {
        "task_id": task.get("task_id"),
        "family": task.get("family"),
        "generator": task_generator(task),
        "seed_id": (task.get("lineage") or {}).get("seed_id"),
        "reason_code": problems[0].code,
        "reason": "; ".join(map(str, problems)),
        "record": task,
    }


def split_checked(
    tasks: Sequence[Mapping[str, Any]], problems: Sequence[Sequence[Problem]]
) -> tuple[list[Mapping[str, Any]], list[TaskReject]]:
    """The tasks without problems, and a reject row (`reject_row`) for each of the others, both in input order.

    Args:
        tasks: the checked task records.
        problems: one list per task, as `check_tasks` returns them (empty for a valid task).

    Returns:
        `(valid tasks, reject rows)`.

    Raises:
        ValueError: `tasks` and `problems` differ in length.
    """
    good: list[Mapping[str, Any]] = []
    rejects: list[TaskReject] = []
    for task, found in zip(tasks, problems, strict=True):
        if found:
            rejects.append(reject_row(task, found))
        else:
            good.append(task)
    return good, rejects


def validity_rates(checked: pd.Series, rejected: pd.Series) -> dict[str, tuple[int, int]]:
    """(valid, checked) per key, sorted by key, from the keys of every checked row and of the rejected rows.

    Example:
        >>> validity_rates(pd.Series(["sql", "sql", "json"]), pd.Series(["sql"]))
        {'json': (1, 1), 'sql': (1, 2)}
    """
    bad = rejected.value_counts()
    return {str(k): (int(n - bad.get(k, 0)), int(n)) for k, n in sorted(checked.value_counts().items())}


def family_validity(variant_families: pd.Series, rejects: pd.DataFrame) -> dict[str, float]:
    """The share of valid variants per family; rejected failure tasks (`FAILURE_SOURCE`) are no variants.

    Args:
        variant_families: the family of every generated variant checked.
        rejects: `task_rejects` (columns `family` and `generator` at least).

    Returns:
        family -> valid / checked, sorted by family.
    """
    generated = rejects[rejects["generator"] != FAILURE_SOURCE]
    counts = validity_rates(variant_families, generated["family"])
    return {family: valid / n for family, (valid, n) in counts.items()}


def below_floor(rates: Mapping[str, float], floor: float) -> dict[str, float]:
    """The entries whose rate is below `floor` (a rate equal to the floor meets it).

    Example:
        >>> below_floor({"sql": 0.8, "json": 0.79}, 0.8)
        {'json': 0.79}
    """
    return {key: rate for key, rate in rates.items() if rate < floor}
