"""Split assets: judged tasks to the train and eval sides of their lineage, and the contamination check."""

from collections.abc import Iterator

import dagster as dg
import pandas as pd

from assets import groups
from assets.metadata import count_table, markdown_table, preview, task_preview
from core.tables import records_from_frame
from curation.admission import Admission, admit
from curation.curate import index_tasks, task_text
from curation.dedup import near_duplicate_pairs
from curation.manifests import checkpoint_leaks, trained_tasks
from curation.split_ledger import LedgerEntry
from curation.splits import EVAL, failure_count, failure_tasks, lineage_leaks
from generators.rewrite import CHECKS_VERSION, LLMRewriter
from resources import CHECKPOINTS_FOLDER, EXPORT_FOLDER, CurationPolicy, JudgePolicy, StorageRoot
from training.export import ExportedSplit, export_split

# The LLM generators, each with the version of the checks against its parent that vouch for its text today.
LLM_CHECKS = {LLMRewriter.name: CHECKS_VERSION}
# Logged when the judge's labels are wanted (`use_labels` "accepted") but the judge failed its calibration.
UNCALIBRATED_JUDGE = (
    "the judge did not pass its calibration (judge_agreement): its labels neither filter the splits nor vouch for "
    "LLM text this run"
)


@dg.multi_asset(
    group_name=groups.CURATION,
    outs={
        "train_tasks": dg.AssetOut(description="Judged tasks on the training side of the lineage split."),
        "eval_tasks": dg.AssetOut(description="Judged tasks held out for evaluation (whole seed lineages)."),
        "failure_eval": dg.AssetOut(
            description="The held-out tasks that come from production failures (and their variants): reported apart."
        ),
    },
)
def split_tasks(
    context: dg.AssetExecutionContext,
    judged_tasks: pd.DataFrame,
    policy: CurationPolicy,
    judge: JudgePolicy,
    storage: StorageRoot,
):
    """Split the judged tasks by lineage root and export both sides for TRL; the eval side's production failures
    also form `failure_eval`.

    Sides come from the split ledger (`<root>/splits/`, or its tables in the production database): a root keeps
    the side it was first given, and only roots seen for the first time are planned (stable hash, stratified), so
    the eval set only grows. The tasks kept here are then added to the dedup index: the index learns what the
    splits hold, nothing the judge rejected, so a rejected task never marks a later near-copy as a duplicate.
    """
    labels_in_use = judge.labels_in_use(judged_tasks)
    if judge.use_labels == "accepted" and not labels_in_use:
        context.log.warning(UNCALIBRATED_JUDGE)
    ledger = storage.split_ledger()
    admitted = admit(
        judge.kept(judged_tasks),
        judged_tasks["judge_verdict"],
        current_checks=LLM_CHECKS,
        judge_vouches=labels_in_use,
        config=policy.minhash_config(),
        known=ledger.state().sides,
    )
    for warning in admitted.warnings:
        context.log.warning(warning)
    entry = ledger.assign(admitted.tasks, policy.split_config(), run_id=context.run.run_id, follows=admitted.follows)
    for level, line in entry.log_lines():
        context.log.log(level, line)
    with policy.dedup_index(storage) as index:
        added = index_tasks(admitted.records, index)  # a rerun after a crash finds them known: idempotent
    parts = entry.plan.side_tasks(admitted.tasks)
    with storage.folder(EXPORT_FOLDER) as folder:
        exported = {name: export_split(part, folder, name) for name, part in parts.items()}
    index_numbers = {"dedup_index_rows_added": added, "dedup_index_rows": len(index)}
    yield from _split_outputs(parts, exported, entry, admitted, index_numbers, labels_in_use, policy, storage)


def _split_outputs(
    parts: dict[str, pd.DataFrame],
    exported: dict[str, ExportedSplit],
    entry: LedgerEntry,
    admitted: Admission,
    index_numbers: dict[str, int],
    labels_in_use: bool,
    policy: CurationPolicy,
    storage: StorageRoot,
) -> Iterator[dg.Output]:
    """The outputs of `split_tasks` with their metadata: both sides, then the eval side's production failures."""
    numbers = {
        **entry.as_metadata(),
        **index_numbers,
        "vouched_by": count_table(admitted.vouchers, "voucher"),
        "judge_labels_in_use": labels_in_use,
        "held_back": len(admitted.held_back),
        "held_back_reasons": count_table(admitted.held_back["reason"], "reason"),
    }
    for name, part in parts.items():
        strata = ["source", *policy.stratify_by, "roots", f"{name}_roots", f"{name}_tasks"]
        yield dg.Output(
            part,
            output_name=f"{name}_tasks",
            metadata={
                "rows": len(part),
                "roots": entry.plan.root_count(name),
                **numbers,
                "families": count_table(part["family"], "family"),
                "strata": dg.MetadataValue.md(markdown_table(entry.plan.summary, strata)),
                "export_parquet": dg.MetadataValue.path(storage.location(EXPORT_FOLDER, exported[name].parquet.name)),
                "export_jsonl": dg.MetadataValue.path(storage.location(EXPORT_FOLDER, exported[name].jsonl.name)),
                "preview": task_preview(part),
                "held_back_preview": preview(admitted.held_back, ["task_id", "family", "generator", "reason"]),
            },
        )
    failures = failure_tasks(parts[EVAL])
    yield dg.Output(
        failures,
        output_name="failure_eval",
        metadata={
            "rows": len(failures),
            "failures": failure_count(failures),
            "families": count_table(failures["family"], "family") if len(failures) else "none",
        },
    )


@dg.asset_check(
    asset="train_tasks",
    blocking=True,
    description=(
        "No training task shares a lineage root with, or is a near-duplicate of, an evaluation task; and no "
        "evaluation task is one that an existing checkpoint trained on (its root or a near-copy)."
    ),
    additional_ins={"eval_tasks": dg.AssetIn("eval_tasks")},
)
def no_eval_contamination(
    train_tasks: pd.DataFrame, eval_tasks: pd.DataFrame, policy: CurationPolicy, storage: StorageRoot
) -> dg.AssetCheckResult:
    train, evaluation = records_from_frame(train_tasks), records_from_frame(eval_tasks)
    config = policy.minhash_config()
    leaks = lineage_leaks(train, evaluation)
    texts = [task_text(t) for t in train], [task_text(t) for t in evaluation]
    near = near_duplicate_pairs(*texts, config)
    with storage.folder(CHECKPOINTS_FOLDER) as folder:  # the manifests and task lists, not the weights
        trained = trained_tasks(folder)
    earlier = checkpoint_leaks(evaluation, trained, config)
    offenders = [
        *({"train": leak["train_task_id"], "eval": leak["eval_task_id"], "why": "shared lineage"} for leak in leaks),
        *(
            {"train": train[i]["task_id"], "eval": evaluation[j]["task_id"], "why": f"near-duplicate ({score:.2f})"}
            for i, j, score in near
        ),
        *(
            {"train": f"{o['trained']} (checkpoint {o['checkpoint']})", "eval": o["eval"], "why": o["why"]}
            for o in earlier
        ),
    ]
    return dg.AssetCheckResult(
        passed=not offenders,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "lineage_leaks": len(leaks),
            "near_duplicates": len(near),
            "checkpoints": int(trained["checkpoint"].nunique()),
            "checkpoint_trained_tasks": len(trained),
            "checkpoint_leaks": len(earlier),
            "offenders": dg.MetadataValue.md(markdown_table(offenders[:50], ["train", "eval", "why"])),
        },
        description="clean" if not offenders else f"{len(offenders)} evaluation items leak into training",
    )
