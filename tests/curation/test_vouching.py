"""Which LLM-written tasks may reach the splits: a voucher per task, a reason for each one held back."""

import pytest

from curation.vouching import vouch

CHECKS = {"llm_rewrite": "rewrite-checks-v2"}


def task(generator: dict | None) -> dict:
    return {"task_id": "t", "family": "sql", "lineage": {"generator": generator}}


def rewrite(checks: str | None) -> dict:
    params = {"kind": "paraphrase"} | ({"checks": checks} if checks else {})
    return task({"name": "llm_rewrite", "version": 1, "params": params})


@pytest.mark.parametrize(
    ("record", "verdict", "judge_vouches", "voucher", "reason"),
    [
        # A seed: people wrote it.
        (task(None), "not_judged", False, "not_llm", None),
        # A programmatic variant: code wrote it, from a seed people wrote.
        (task({"name": "numeric_perturbation", "version": 1, "params": {}}), "reject", True, "not_llm", None),
        # A rewrite that passed the checks its generator runs today, judged or not.
        (rewrite("rewrite-checks-v2"), "not_judged", False, "checks", None),
        # A rewrite made before those checks, accepted by a judge whose labels are in use.
        (rewrite("rewrite-checks-v1"), "accept", True, "judge", None),
        # ...the same, where the judge's labels are shown, not used (a judge below its calibration floors).
        (rewrite("rewrite-checks-v1"), "accept", False, None, "its checks rewrite-checks-v1 are not the current"),
        # ...rejected by a judge in use.
        (rewrite("rewrite-checks-v1"), "reject", True, None, "does not vouch: its verdict is reject"),
        # A rewrite from before any check was recorded, that the judge never saw.
        (rewrite(None), "not_judged", True, None, "it was made before the current rewrite-checks-v2"),
    ],
)
def test_a_voucher_per_task_and_a_reason_for_each_held_back(record, verdict, judge_vouches, voucher, reason):
    result = vouch([record], [verdict], current_checks=CHECKS, judge_vouches=judge_vouches)
    assert result.vouchers == [voucher]
    assert result.kept == [voucher is not None]
    if reason is None:
        assert result.held_back == []
    else:
        [row] = result.held_back
        assert reason in row["reason"] and (row["task_id"], row["judge_verdict"]) == ("t", verdict)


def test_one_verdict_per_task():
    with pytest.raises(ValueError, match="2 tasks but 1 verdicts"):
        vouch([task(None), task(None)], ["accept"], current_checks=CHECKS, judge_vouches=True)
