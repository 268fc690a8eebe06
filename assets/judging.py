"""Judging assets: an LLM judge scores tasks on a versioned rubric, calibrated against human labels first."""

import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd

from assets import groups
from assets.metadata import count_table, markdown_table, preview, progress_logger, shard_metadata, shard_steps
from assets.plots import bar_chart
from core.shards import plan_shards
from core.tables import frame_from_records, records_from_frame
from curation.splits import first_per_family
from judge import (
    DEFAULT_RUBRIC,
    LABEL_PARAMS,
    AuditItem,
    Calibration,
    JudgeHistoryError,
    JudgeSetup,
    JudgeStats,
    Judgment,
    accept_rate,
    audit_labels,
    calibrate,
    calibration_verdict,
    describe_change,
    judge_setup,
    judge_tasks,
    label_table,
    load_setup,
    lowest_score_counts,
    save_setup,
    score_counts,
    self_consistency,
    tasks_to_label,
    verdicts_by_family,
    worst_labelled,
)
from judge import check as check_calibration
from judge.rubric import SCORES
from resources import JUDGE_HISTORY_FOLDER, JudgePolicy, LLMEndpoint, SeedRepository, StorageRoot
from review.judging import REVIEWED_TAG, calibration_items, label_sources
from validators.tasks import TASK_FIELDS

WORST_ROWS = 10
JUDGMENT_COLUMNS = (*(f.name for f in fields(Judgment)), "verdict")  # `Judgment.as_dict`'s row
# What one judging shard step did: its tasks, the calls it made, the seconds it took, its `JudgeStats.record()`.
SHARD_STATS_COLUMNS = ("shard", "tasks", "calls", "seconds", "stats")
CALIBRATION_NUMBERS = ("accuracy", "kappa", "false_accept_rate", "false_reject_rate")


def build_judge_calibration(severity: dg.AssetCheckSeverity) -> dg.AssetsDefinition:
    """`judge_calibration` with its `judge_agreement` check: an ERROR in production, a WARN in the quickstart (a
    135M judge cannot agree with people). Never blocking: a judge below its floors loses its say in the splits
    (`JudgePolicy.labels_in_use`: its labels neither filter nor vouch), and the run goes on without them."""

    @dg.asset(
        name="judge_calibration",
        group_name=groups.JUDGING,
        check_specs=[
            dg.AssetCheckSpec(
                "judge_agreement",
                asset="judge_calibration",
                blocking=False,
                description="The judge agrees with the human labels of the audit set at least as much as the floors "
                "(else its labels are not used).",
            )
        ],
    )
    def judge_calibration(
        context: dg.AssetExecutionContext, seeds: SeedRepository, llm: LLMEndpoint, judge: JudgePolicy
    ):  # no return annotation: with a check spec the op has two outputs, and Dagster reads annotations per output
        """The judge's agreement with human labels on the audit set, and with itself over repeated samples."""
        items = calibration_items(seeds.folder, judge.calibration_per_family)  # + the verdicts reviewers labelled
        context.log.info(f"judging {len(items)} labelled audit items, {judge.calibration_samples} samples each")
        run = judge_tasks(
            [item.as_task() for item in items],
            client=llm.client(),
            rule=judge.rule(),
            samples=judge.calibration_samples,
            params={"temperature": judge.calibration_temperature},
            progress=progress_logger(context, "calibration judgments"),
        )
        calibration = calibrate(run.judgments, audit_labels(items))
        consistency = self_consistency(run.judgments)
        passed, reasons = check_calibration(calibration, judge.floors())
        for reason in reasons:
            context.log.warning(f"judge calibration: {reason}")
        return dg.MaterializeResult(
            # Each judgment carries the verdict on the judge that made it: `judged_tasks` passes it on to the splits.
            value=pd.DataFrame([j.as_dict() for j in run.judgments]).assign(calibration_passed=passed),
            metadata={
                **_items_metadata(items),
                **_calibration_numbers(calibration),
                "self_consistency": dg.MetadataValue.json(
                    {"label_agreement": consistency.label_agreement, "unstable": list(consistency.unstable)}
                ),
                "llm": dg.MetadataValue.json(run.stats.as_dict(judge.prices())),
            },
            check_results=[
                dg.AssetCheckResult(
                    check_name="judge_agreement",
                    passed=passed,
                    severity=severity,
                    description="meets the floors" if passed else "; ".join(reasons) + ": its labels are not used",
                    metadata=_check_metadata(judge, calibration, items),
                )
            ],
        )

    return judge_calibration


def _items_metadata(items: list[AuditItem]) -> dict[str, Any]:
    """How many items were judged, how many came from reviewers' labels, and the label files they came from."""
    return {
        "items": len(items),
        "reviewed_items": sum(REVIEWED_TAG in item.tags for item in items),
        "label_files": dg.MetadataValue.json(label_sources(items)),
    }


def _check_metadata(judge: JudgePolicy, calibration: Calibration, items: list[AuditItem]) -> dict[str, Any]:
    """The check's floors, its kappa and the label files it used."""
    return {
        "floors": dg.MetadataValue.json(judge.floors().__dict__),
        "kappa": calibration.kappa,
        "label_files": dg.MetadataValue.json(label_sources(items)),
    }


def _calibration_numbers(calibration: Calibration) -> dict[str, Any]:
    """The judge's agreement figures as metadata (those it could compute), its error rate and confusion table."""
    numbers = {k: v for k, v in calibration.as_dict().items() if v is not None}
    return {
        **{k: numbers[k] for k in CALIBRATION_NUMBERS if k in numbers},
        "judge_error_rate": calibration.judge_error_rate,
        "confusion": dg.MetadataValue.md(f"```\n{calibration.table()}\n```"),
    }


@dg.op(ins={"deduplicated_tasks": dg.In(), "judge_calibration": dg.In(dg.Nothing)}, out=dg.DynamicOut(pd.DataFrame))
def judge_shards(deduplicated_tasks: pd.DataFrame, judge: JudgePolicy):
    """The tasks to judge (non-duplicates, `judge.max_per_family` per family), one table per non-empty shard of
    task-id hashes; after the calibration (the two would share the endpoint)."""
    tasks = records_from_frame(tasks_to_label(deduplicated_tasks))
    chosen = [tasks[i] for i in first_per_family(tasks, judge.max_per_family)]
    for shard, positions in enumerate(plan_shards([t["task_id"] for t in chosen], judge.shards())):
        if positions:  # an empty hash range makes no step
            yield dg.DynamicOutput(frame_from_records([chosen[i] for i in positions], TASK_FIELDS), str(shard))


@dg.op(out={"judgments": dg.Out(pd.DataFrame), "stats": dg.Out(pd.DataFrame)})
def judge_shard(context: dg.OpExecutionContext, shard: pd.DataFrame, llm: LLMEndpoint, judge: JudgePolicy):
    """One shard's judgments, through the endpoint's call cache (shared by the shards)."""
    started = time.monotonic()
    run = judge_tasks(
        records_from_frame(shard[list(TASK_FIELDS)]),
        client=llm.client(),
        rule=judge.rule(),
        params=LABEL_PARAMS,
        progress=progress_logger(context, "judged"),
    )
    stats = {
        "shard": int(context.get_mapping_key()),  # judge_shards keys its outputs by the shard index
        "tasks": len(shard),
        "calls": run.stats.calls,
        "seconds": round(time.monotonic() - started, 3),
    }
    yield dg.Output(frame_from_records(run.rows(), JUDGMENT_COLUMNS), output_name="judgments", metadata=stats)
    yield dg.Output(frame_from_records([{**stats, "stats": run.stats.record()}], SHARD_STATS_COLUMNS), "stats")


@dg.op
def merge_judgments(
    context: dg.OpExecutionContext,
    deduplicated_tasks: pd.DataFrame,
    judge_calibration: pd.DataFrame,
    judgments: list[pd.DataFrame],
    stats: list[pd.DataFrame],
    llm: LLMEndpoint,
    judge: JudgePolicy,
    storage: StorageRoot,
) -> dg.Output[pd.DataFrame]:
    """The shards' judgments as labels of every non-duplicate task (in its input order), and the run's record."""
    judged = [Judgment.from_dict(row) for frame in judgments for row in records_from_frame(frame)]
    shards = shard_steps(stats)
    totals = JudgeStats.total(JudgeStats.from_record(row["stats"]) for row in shards)
    setup = judge_setup(llm.client(), params=LABEL_PARAMS)  # the shards' setup (no call is made for it)
    calibrated = calibration_verdict(judge_calibration)  # the splits use the judge's labels only if True
    labelled = label_table(tasks_to_label(deduplicated_tasks), judged, calibrated)
    # Which judge setup the labels came from, kept beside the storage root's other side state (judge.history).
    with storage.folder(JUDGE_HISTORY_FOLDER) as folder:
        history = folder / "judged_tasks.json"
        rejudged = _rejudged(context, history, setup)
        save_setup(history, setup)  # only once the run succeeded: a failed run leaves the previous record
    storage.remove_step_outputs(context.run_id, "judged_tasks")  # the shards: this run's scratch, now merged
    metadata = _judged_metadata(labelled, judged, calibrated, rejudged, totals, setup, shards, judge)
    return dg.Output(labelled, metadata=metadata)


@dg.graph_asset(group_name=groups.JUDGING)
def judged_tasks(deduplicated_tasks: pd.DataFrame, judge_calibration: pd.DataFrame):
    """Non-duplicate tasks labelled by the LLM judge (`judge_verdict`: accept, reject, judge_error, not_judged),
    judged in shards of task-id hashes, one step each (`judge.judge_shards`)."""
    judgments, stats = judge_shards(deduplicated_tasks, judge_calibration).map(judge_shard)
    return merge_judgments(deduplicated_tasks, judge_calibration, judgments.collect(), stats.collect())


def _rejudged(context: dg.OpExecutionContext, history: Path, setup: JudgeSetup) -> str:
    """Why this run did or did not re-judge every task: `first run`, `unchanged`, or what changed since the last."""
    try:
        previous = load_setup(history)
    except JudgeHistoryError as exc:
        context.log.warning(str(exc))
        return "unknown: the previous judge setup could not be read (see the log)"
    change = describe_change(previous, setup)
    if previous is not None and change != "unchanged":
        context.log.info(f"every task is judged again, since the judge changed: {change}")
    return change


def _judged_metadata(
    labelled: pd.DataFrame,
    judged: list[Judgment],
    calibrated: bool,
    rejudged: str,
    totals: JudgeStats,
    setup: JudgeSetup,
    shards: list[dict[str, Any]],
    judge: JudgePolicy,
) -> dict[str, Any]:
    """`judged_tasks`' metadata: the verdicts and scores (tables and plots), the calls, the setup, the shard steps."""
    counts = score_counts(judged, DEFAULT_RUBRIC)
    lowest = lowest_score_counts(judged, dict(zip(labelled["task_id"], labelled["family"], strict=True)))
    return {
        "rows": len(labelled),
        "judge_calibrated": calibrated,
        "judged": len(judged),
        "rejudged": rejudged,
        "verdicts": count_table(labelled["judge_verdict"], "verdict"),
        "accept_rate": dg.MetadataValue.float(accept_rate(judged)),
        "accept_by_family": _accept_by_family(labelled),
        "score_histograms": _histograms(counts),
        "score_plot": bar_chart(_by_score(counts), title="scores per criterion", xlabel="score", ylabel="tasks"),
        "lowest_score_plot": bar_chart(
            _by_score(lowest), title="lowest criterion score per task, by family", xlabel="score", ylabel="tasks"
        ),
        "judge_errors": count_table((j.error for j in judged if j.error), "error"),
        "llm_calls_made": totals.calls,
        "llm_calls_cached": totals.cached,
        "llm": dg.MetadataValue.json(totals.as_dict(judge.prices())),
        "judge_setup": dg.MetadataValue.json(setup.as_dict()),
        **shard_metadata(judge.shards(), shards, ["shard", "tasks", "calls", "seconds"]),
        "worst": preview(
            worst_labelled(labelled, WORST_ROWS), ("task_id", "family", "judge_scores", "judge_rationale")
        ),
        "rubric": DEFAULT_RUBRIC.label,
    }


def _accept_by_family(labelled: pd.DataFrame) -> dg.MetadataValue:
    table = verdicts_by_family(labelled)
    return dg.MetadataValue.md(markdown_table(table.to_dict(orient="records"), list(table.columns)))


def _histograms(counts: dict[str, dict[int, int]]) -> dg.MetadataValue:
    """Counts of each score 1-5 per criterion, as a Markdown table."""
    rows = [{"criterion": name, **_by_score(counts)[name]} for name in counts]
    return dg.MetadataValue.md(markdown_table(rows, ["criterion", *(str(score) for score in SCORES)]))


def _by_score(counts: dict[str, dict[int, int]]) -> dict[str, dict[str, int]]:
    """`{series: {score: n}}` with the scores as labels, in order 1-5 (what `bar_chart` and the tables take)."""
    return {name: {str(score): n for score, n in by_score.items()} for name, by_score in counts.items()}
