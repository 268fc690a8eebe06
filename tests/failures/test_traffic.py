"""Production traffic: which records are failures, text-free rows per interaction, failure rates with intervals."""

import pytest

from failures import process_failure_log
from failures.traffic import ALL, TRAFFIC_COLUMNS, RateReport, rate_report, rate_table, traffic_rows, wilson_interval

USER = {"role": "user", "content": "What is 7 * 6?"}


# (failures, known, expected (low, high)): textbook Wilson 95% values.
WILSON = [
    (0, 20, (0.0, 0.1611)),  # none failed: the interval still reaches 16%, it is not [0, 0]
    (1, 10, (0.0179, 0.4042)),
    (5, 10, (0.2366, 0.7634)),  # symmetric around one half
    (20, 20, (0.8389, 1.0)),  # all failed: exact 1 at the top
    (0, 0, (0.0, 1.0)),  # nothing known: nothing is excluded
]


@pytest.mark.parametrize(("failures", "known", "expected"), WILSON)
def test_wilson_interval(failures, known, expected):
    low, high = wilson_interval(failures, known)
    assert (round(low, 4), round(high, 4)) == expected


def test_wilson_interval_refuses_counts_out_of_order():
    with pytest.raises(ValueError, match="between 0 and the known outcomes"):
        wilson_interval(3, 2)
    with pytest.raises(ValueError, match="confidence"):
        wilson_interval(1, 2, confidence=95)


def lines(model, outcomes, family="arithmetic"):
    return [
        f'{{"messages": [{{"role": "user", "content": "q{i}"}}], "output": "x", "model": "{model}", '
        f'"outcome": "{outcome}", "family": "{family}", "expected": {{"answer": {i}}}}}'
        for i, outcome in enumerate(outcomes)
    ]


def test_only_failures_go_on_to_tasks_and_every_interaction_is_a_row_without_text():
    batch = process_failure_log(lines("v1", ["passed", "failed", "corrected", "unknown"]), "n1.jsonl")
    assert [r["outcome"] for r in batch.failures] == ["failed", "corrected"]
    assert len(batch.tasks) + len(batch.review) == 2  # the success and the unknown derive nothing
    rows = traffic_rows(batch.records, "n1.jsonl")
    assert [r["outcome"] for r in rows] == ["passed", "failed", "corrected", "unknown"]
    assert all(list(row) == list(TRAFFIC_COLUMNS) for row in rows)
    assert not any("q1" in str(value) for row in rows for value in row.values())  # no text of the interaction


def rows_of(log, model, outcomes, timestamp=None, family="sql"):
    return [{"log": log, "timestamp": timestamp, "model": model, "family": family, "outcome": o} for o in outcomes]


def test_rate_table_counts_per_night_model_and_family_and_leaves_unknowns_out_of_the_rate():
    rows = [
        # night 2: its first timestamp is an hour after b's in UTC (not as text), although its name sorts first
        *rows_of("a.jsonl", "v2", ["passed"] * 3 + ["failed"], "2026-12-02T01:00:00Z"),
        *rows_of("b.jsonl", "v1", ["failed", "corrected", "passed", "unknown"], "2026-12-02T02:00:00+02:00"),
        *rows_of("b.jsonl", "v1", ["passed"], None, family="tool_call"),
    ]
    table = {(r["night"], r["model"], r["family"]): r for r in rate_table(rows)}
    first = table[1, "v1", ALL]
    assert first["log"] == "b.jsonl"
    assert (first["served"], first["failed"], first["unknown"]) == (5, 2, 1)
    assert first["failure_rate"] == 2 / 4  # the unknown is neither a failure nor a success
    assert (first["failure_rate_low"], first["failure_rate_high"]) == wilson_interval(2, 4)
    assert table[1, "v1", "sql"]["served"] == 4 and table[1, "v1", "tool_call"]["failure_rate"] == 0.0
    assert table[2, "v2", ALL]["failure_rate"] == 0.25
    assert table[0, "v1", ALL]["served"] == 5 and table[0, "v1", ALL]["log"] == ALL  # every night of a model
    assert table[0, "v2", "sql"]["failed"] == 1


def test_a_night_where_nothing_is_known_has_no_rate():
    night, *_ = rate_table(rows_of("a.jsonl", "v1", ["unknown", "unknown"]))
    assert night["failure_rate"] is None and (night["failure_rate_low"], night["failure_rate_high"]) == (0.0, 1.0)


def test_rate_report_splits_every_night_from_each_night_and_leaves_gaps_in_the_series():
    rows = [
        *rows_of("a.jsonl", "v1", ["failed", "passed"], "2026-12-01T00:00:00Z"),
        *rows_of("b.jsonl", "v2", ["failed", "passed", "passed", "passed"], "2026-12-02T00:00:00Z"),
        *rows_of("b.jsonl", "v1", ["unknown"], "2026-12-02T00:00:00Z", family="tool_call"),
    ]
    report = rate_report(rate_table(rows))
    assert report.nights == [1, 2]
    assert [(r["night"], r["model"]) for r in report.per_night] == [(1, "v1"), (2, "v1"), (2, "v2")]
    assert all(r["family"] == ALL for r in [*report.per_night, *report.per_model])  # families stay in the table
    assert [(r["model"], r["served"]) for r in report.per_model] == [("v1", 3), ("v2", 4)]
    low, high = wilson_interval(1, 2)
    # v1's second night knows no outcome, v2 served nothing the first: no point either way, not a zero.
    assert report.series == {"v1": [(0.5, low, high), None], "v2": [None, (0.25, *wilson_interval(1, 4))]}


def test_rate_report_of_no_traffic_is_empty():
    assert rate_report([]) == RateReport(per_model=[], per_night=[], nights=[], series={})
