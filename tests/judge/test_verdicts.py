"""The judge's verdicts are one closed set: what a judgment says, plus `not_judged` for a task none covers."""

from typing import get_args

from judge import JUDGMENT_VERDICTS, NOT_JUDGED, VERDICTS, Judgment, Verdict, label_rows


def test_verdicts_are_the_judgment_verdicts_and_not_judged():
    assert VERDICTS == (*JUDGMENT_VERDICTS, NOT_JUDGED) == get_args(Verdict)
    assert NOT_JUDGED == "not_judged"


def test_every_label_a_run_can_write_is_a_verdict():
    def judged(task_id: str, accepted: bool | None) -> Judgment:
        return Judgment(
            task_id=task_id, sample=0, rubric="r", template_version="v", scores=None, rationale=None,
            accepted=accepted, failed_criteria=(), error=None if accepted is not None else "json_missing",
            error_detail=None, raw=None, first_raw=None, repaired=False, cached=False, tokens_in=0, tokens_out=0,
        )  # fmt: skip

    rows = label_rows(["a", "r", "e", "n"], [judged("a", True), judged("r", False), judged("e", None)])
    assert [row["judge_verdict"] for row in rows] == ["accept", "reject", "judge_error", "not_judged"]
    assert {row["judge_verdict"] for row in rows} == set(VERDICTS)
