"""Report helpers: score counts per criterion, lowest score per family, worst-scored order, and the same read from
a labelled task table."""

import pandas as pd

from judge import (
    DEFAULT_RUBRIC,
    Judgment,
    accept_rate,
    lowest_score_counts,
    score_counts,
    verdicts_by_family,
    worst_labelled,
    worst_scored,
)


def judgment(task_id: str, scores: dict[str, int] | None, accepted: bool | None = True) -> Judgment:
    return Judgment(
        task_id=task_id,
        sample=0,
        rubric="task_quality-r1",
        template_version="judge-task_quality-r1-t1",
        scores=scores,
        rationale="why" if scores else None,
        accepted=accepted if scores else None,
        failed_criteria=(),
        error=None if scores else "json_missing",
        error_detail=None,
        raw=None,
        first_raw=None,
        repaired=False,
        cached=False,
        tokens_in=0,
        tokens_out=0,
    )


def scored(clarity: int, solvability: int, reference: int, on_topic: int) -> dict[str, int]:
    return {"clarity": clarity, "solvability": solvability, "reference_correctness": reference, "on_topic": on_topic}


JUDGMENTS = [
    judgment("a", scored(5, 5, 5, 5)),
    judgment("b", scored(4, 5, 2, 5), accepted=False),
    judgment("c", None),  # a judge_error: no scores, counted nowhere
    judgment("d", scored(3, 4, 4, 5)),
]
FAMILY = {"a": "sql", "b": "arithmetic", "c": "arithmetic", "d": "arithmetic"}


def test_score_counts_cover_every_score_of_every_criterion():
    counts = score_counts(JUDGMENTS, DEFAULT_RUBRIC)
    assert list(counts) == list(DEFAULT_RUBRIC.names)
    assert counts["reference_correctness"] == {1: 0, 2: 1, 3: 0, 4: 1, 5: 1}
    assert counts["on_topic"] == {1: 0, 2: 0, 3: 0, 4: 0, 5: 3}


def test_lowest_score_per_task_by_family():
    # b's weakest criterion is 2, d's is 3, a's is 5; families in name order.
    assert lowest_score_counts(JUDGMENTS, FAMILY) == {
        "arithmetic": {1: 0, 2: 1, 3: 1, 4: 0, 5: 0},
        "sql": {1: 0, 2: 0, 3: 0, 4: 0, 5: 1},
    }


def test_worst_scored_are_the_lowest_totals_first():
    assert [j.task_id for j in worst_scored(JUDGMENTS, 2)] == ["b", "d"]  # totals 16 and 16: ties by task_id
    assert [j.task_id for j in worst_scored(JUDGMENTS, 10)] == ["b", "d", "a"]  # the judge_error has no total


def test_accept_rate_counts_judge_errors_as_not_accepted():
    assert accept_rate(JUDGMENTS) == 0.5
    assert accept_rate([]) == 0.0


LABELLED = pd.DataFrame(
    {
        "task_id": ["a", "b", "c", "d", "e"],
        "family": ["sql", "arithmetic", "arithmetic", "arithmetic", "sql"],
        "judge_verdict": ["accept", "reject", "judge_error", "accept", "not_judged"],
        "judge_scores": [scored(5, 5, 5, 5), scored(4, 5, 2, 5), None, scored(3, 4, 4, 4), None],
    }
)


def test_verdicts_by_family_count_each_verdict_that_occurs():
    table = verdicts_by_family(LABELLED)
    assert list(table.columns) == ["family", "accept", "judge_error", "not_judged", "reject"]
    assert table.to_dict(orient="records") == [
        {"family": "arithmetic", "accept": 1, "judge_error": 1, "not_judged": 0, "reject": 1},
        {"family": "sql", "accept": 1, "judge_error": 0, "not_judged": 1, "reject": 0},
    ]


def test_worst_labelled_are_the_lowest_totals_first_without_the_unscored():
    # d totals 15, b 16, a 20; c (a judge error) and e (not judged) have no scores.
    worst = worst_labelled(LABELLED, 2)
    assert (worst["task_id"].tolist(), worst["total"].tolist()) == (["d", "b"], [15, 16])
    assert worst_labelled(LABELLED, 10)["task_id"].tolist() == ["d", "b", "a"]
