"""Split assets: judged tasks to the train and eval sides of their lineage, and the contamination check."""

from typing import Any

import dagster as dg
import pandas as pd

from assets import groups
from assets.metadata import count_table, markdown_table, preview, task_preview
from curation.curate import index_tasks, near_copy_roots, task_text, torn_row
from curation.dedup import near_duplicate_pairs
from curation.manifests import checkpoint_leaks, trained_tasks
from curation.splits import lineage_leaks, task_roots
from curation.vouching import HELD_BACK_COLUMNS, vouch
from generators.rewrite import CHECKS_VERSION, LLMRewriter
from pipeline.resources import CHECKPOINTS_FOLDER, EXPORT_FOLDER, CurationPolicy, JudgePolicy, StorageRoot
from validators.export import export_split
from validators.tables import frame_from_records, records_from_frame

# The LLM generators, each with the version of the checks against its parent that vouch for its text today.
LLM_CHECKS = {LLMRewriter.name: CHECKS_VERSION}


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
        context.log.warning(
            "the judge did not pass its calibration (judge_agreement): its labels neither filter the splits nor "
            "vouch for LLM text this run"
        )
    kept = judge.kept(judged_tasks)
    # LLM text that neither its current checks nor a judge whose labels are in use vouches for is held back.
    candidates = records_from_frame(kept)
    vouching = vouch(
        candidates,
        judged_tasks.loc[kept.index, "judge_verdict"].tolist(),
        current_checks=LLM_CHECKS,
        judge_vouches=labels_in_use,
    )
    for row in vouching.held_back:
        context.log.warning(f"held back {row['task_id']} ({row['family']}, {row['generator']}): {row['reason']}.")
    kept = kept[vouching.kept]
    records = [record for record, vouched in zip(candidates, vouching.kept, strict=True) if vouched]
    ledger = storage.split_ledger()
    # A production failure that near-copies another root's task takes that root's side (else it could train on an
    # eval item's twin, and the contamination check would stop the run); one that near-copies both sides is held out.
    near = near_copy_roots(records, policy.minhash_config(), known=ledger.state().sides)
    clean = [root not in near.torn for root in task_roots(records)]
    torn = [torn_row(record) for record, ok in zip(records, clean, strict=True) if not ok]
    for row in torn:
        context.log.warning(f"held back {row['task_id']} ({row['family']}): {row['reason']}.")
    kept, records = kept[clean], [record for record, ok in zip(records, clean, strict=True) if ok]
    held_back = frame_from_records([*vouching.held_back, *torn], HELD_BACK_COLUMNS)
    entry = ledger.assign(kept, policy.split_config(), run_id=context.run.run_id, follows=near.follows)
    for note in entry.notes:
        context.log.warning(f"split: {note}")
    plan, state = entry.plan, entry.state
    for root, leader in plan.followed.items():
        context.log.info(f"split: failure root {root} near-copies a task of {leader}: it takes its side")
    with policy.dedup_index(storage) as index:
        added = index_tasks(records, index)  # a rerun after a crash finds them known: idempotent
    sides = pd.Series(plan.splits, index=kept.index)
    split_numbers: dict[str, Any] = {
        "split_plan": state.seq,
        "split_epoch": state.epoch,
        "split_plan_id": state.plan_id,
        "new_roots": len(entry.new_roots),
        "followed_roots": len(plan.followed),
        "ledger_roots": len(state.sides),
        "dedup_index_rows_added": added,
        "dedup_index_rows": len(index),
        "vouched_by": count_table([v for v in vouching.vouchers if v is not None], "voucher"),
        "judge_labels_in_use": labels_in_use,
        "held_back": len(held_back),
        "held_back_reasons": count_table(held_back["reason"], "reason"),
    }
    parts = {name: kept[sides == name].reset_index(drop=True) for name in ("train", "eval")}
    with storage.folder(EXPORT_FOLDER) as folder:
        exported = {name: export_split(part, folder, name) for name, part in parts.items()}
    for name, part in parts.items():
        summary_columns = ["source", *policy.stratify_by, "roots", f"{name}_roots", f"{name}_tasks"]
        yield dg.Output(
            part,
            output_name=f"{name}_tasks",
            metadata={
                "rows": len(part),
                "roots": len({r for r, s in zip(plan.roots, plan.splits, strict=True) if s == name}),
                **split_numbers,
                "families": count_table(part["family"], "family"),
                "strata": dg.MetadataValue.md(markdown_table(plan.summary, summary_columns)),
                "export_parquet": dg.MetadataValue.path(storage.location(EXPORT_FOLDER, exported[name].parquet.name)),
                "export_jsonl": dg.MetadataValue.path(storage.location(EXPORT_FOLDER, exported[name].jsonl.name)),
                "preview": task_preview(part),
                "held_back_preview": preview(held_back, ["task_id", "family", "generator", "reason"]),
            },
        )
        if name == "eval":
            failures = part[[bool((lineage or {}).get("failure_id")) for lineage in part["lineage"]]]
            yield dg.Output(
                failures.reset_index(drop=True),
                output_name="failure_eval",
                metadata={
                    "rows": len(failures),
                    "failures": len({lineage["failure_id"] for lineage in failures["lineage"]}),
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
