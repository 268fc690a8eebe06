"""Split assets: judged tasks to the train and eval sides of their lineage, and the contamination check."""

import dagster as dg
import pandas as pd

from assets import groups
from assets.metadata import count_table, markdown_table, task_preview
from pipeline.resources import CurationPolicy, JudgePolicy, StorageRoot
from validators.curate import task_text
from validators.dedup import near_duplicate_pairs
from validators.export import export_split
from validators.splits import lineage_leaks, plan_splits
from validators.tables import records_from_frame
from validators.tasks import TASK_FIELDS


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
def split_tasks(judged_tasks: pd.DataFrame, policy: CurationPolicy, judge: JudgePolicy, storage: StorageRoot):
    """Split the judged tasks by lineage root (stable, stratified) and export both sides for TRL; the eval side's
    production failures also form `failure_eval`."""
    if judge.use_labels not in ("accepted", "all"):
        raise ValueError(f"JudgePolicy.use_labels is {judge.use_labels!r}: use 'accepted' or 'all'")
    accepted = judged_tasks["judge_verdict"] == "accept"
    kept = (judged_tasks[accepted] if judge.use_labels == "accepted" else judged_tasks)[list(TASK_FIELDS)]
    plan = plan_splits(kept, policy.split_config())
    sides = pd.Series(plan.splits, index=kept.index)
    for name in ("train", "eval"):
        part = kept[sides == name].reset_index(drop=True)
        exported = export_split(part, storage.path("export"), name)
        summary_columns = ["source", *policy.stratify_by, "roots", f"{name}_roots", f"{name}_tasks"]
        yield dg.Output(
            part,
            output_name=f"{name}_tasks",
            metadata={
                "rows": len(part),
                "roots": len({r for r, s in zip(plan.roots, plan.splits, strict=True) if s == name}),
                "families": count_table(part["family"], "family"),
                "strata": dg.MetadataValue.md(markdown_table(plan.summary, summary_columns)),
                "export_parquet": dg.MetadataValue.path(str(exported.parquet)),
                "export_jsonl": dg.MetadataValue.path(str(exported.jsonl)),
                "preview": task_preview(part),
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
    description="No training task shares a lineage root with, or is a near-duplicate of, an evaluation task.",
    additional_ins={"eval_tasks": dg.AssetIn("eval_tasks")},
)
def no_eval_contamination(
    train_tasks: pd.DataFrame, eval_tasks: pd.DataFrame, policy: CurationPolicy
) -> dg.AssetCheckResult:
    train, evaluation = records_from_frame(train_tasks), records_from_frame(eval_tasks)
    leaks = lineage_leaks(train, evaluation)
    texts = [task_text(t) for t in train], [task_text(t) for t in evaluation]
    near = near_duplicate_pairs(*texts, policy.minhash_config())
    offenders = [
        *({"train": leak["train_task_id"], "eval": leak["eval_task_id"], "why": "shared lineage"} for leak in leaks),
        *(
            {"train": train[i]["task_id"], "eval": evaluation[j]["task_id"], "why": f"near-duplicate ({score:.2f})"}
            for i, j, score in near
        ),
    ]
    return dg.AssetCheckResult(
        passed=not offenders,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "lineage_leaks": len(leaks),
            "near_duplicates": len(near),
            "offenders": dg.MetadataValue.md(markdown_table(offenders[:50], ["train", "eval", "why"])),
        },
        description="clean" if not offenders else f"{len(offenders)} training tasks leak evaluation items",
    )
