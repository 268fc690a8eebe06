"""Curation assets: every task validated against the schema and its own verifier (in shards, a step each), then
deduplicated and split."""

import time
from typing import Any

import dagster as dg
import pandas as pd

from assets import groups
from assets.metadata import count_table, markdown_table, preview, shard_metadata, shard_steps, task_preview
from core.shards import cache_totals, plan_shards
from core.tables import frame_from_records, records_from_frame
from curation.curate import dedup_tasks
from curation.validation_shards import (
    SHARD_STATS_COLUMNS,
    SHARD_VERDICT_COLUMNS,
    ShardStats,
    Validation,
    merge_validation,
    shard_verdicts,
)
from curation.validity import TASK_REJECT_COLUMNS, below_floor, family_validity
from resources import VALIDATION_CACHE_FOLDER, CurationPolicy, SeedRepository, StorageRoot
from validators.tasks import TASK_FIELDS, check_tasks


@dg.op(out=dg.DynamicOut(pd.DataFrame))
def validation_shards(failure_tasks: pd.DataFrame, task_variants: pd.DataFrame, policy: CurationPolicy):
    """The failure tasks and variants to check, one table per non-empty shard of task-id hashes."""
    tasks = _checked_tasks(failure_tasks, task_variants)
    shards = plan_shards([t.get("task_id") for t in tasks], policy.shard_config().shards)
    for shard, positions in enumerate(shards):
        if positions:  # an empty hash range makes no step
            frame = frame_from_records([tasks[i] for i in positions], TASK_FIELDS).assign(position=positions)
            yield dg.DynamicOutput(frame, mapping_key=str(shard))


@dg.op(out={"verdicts": dg.Out(pd.DataFrame), "stats": dg.Out(pd.DataFrame)})
def check_shard(
    context: dg.OpExecutionContext,
    shard: pd.DataFrame,
    seeds: SeedRepository,
    storage: StorageRoot,
    policy: CurationPolicy,
):
    """One shard's checks: schema, id hash, verifier params, reference passes, a wrong answer fails."""
    tasks = records_from_frame(shard[list(TASK_FIELDS)])
    # Verdicts of earlier nights by content (validators.tasks.verdict_key): only new or changed tasks are checked.
    # Shards share the cache: each commit adds a segment of its own (core.cache_store).
    with storage.cache(VALIDATION_CACHE_FOLDER) as cache:
        if cache.rebuilt:
            context.log.warning(f"validation cache partly recomputed: {cache.rebuild_reason}")
        started = time.monotonic()
        problems = check_tasks(tasks, seeds.verify_context(), workers=policy.shard_config().threads, cache=cache)
    stats: ShardStats = {
        "shard": int(context.get_mapping_key()),  # the shard index: validation_shards keys its outputs by it
        "tasks": len(tasks),
        "cache_hits": cache.hits,
        "cache_rebuilt": cache.rebuilt,
        "seconds": round(time.monotonic() - started, 3),
    }
    verdicts = shard_verdicts(shard["position"].tolist(), tasks, problems)
    yield dg.Output(frame_from_records(verdicts, SHARD_VERDICT_COLUMNS), output_name="verdicts", metadata={**stats})
    yield dg.Output(frame_from_records([stats], SHARD_STATS_COLUMNS), output_name="stats")


@dg.op(out={"validated_tasks": dg.Out(pd.DataFrame), "task_rejects": dg.Out(pd.DataFrame)})
def merge_shards(
    context: dg.OpExecutionContext,
    seed_tasks: pd.DataFrame,
    failure_tasks: pd.DataFrame,
    task_variants: pd.DataFrame,
    verdicts: list[pd.DataFrame],
    stats: list[pd.DataFrame],
    storage: StorageRoot,
    policy: CurationPolicy,
):
    """The shards' verdicts back in input order: seeds plus the valid tasks, and a reject row for each other."""
    rows = (verdict for frame in verdicts for verdict in records_from_frame(frame))
    merged = merge_validation(seed_tasks, _checked_tasks(failure_tasks, task_variants), rows)
    for task_id in merged.repeated[:20]:
        context.log.info(f"task {task_id} reached validation twice (the same prompt and verifier): kept once")
    for reject in merged.rejects[:20]:
        context.log.warning(f"variant {reject['task_id']} ({reject['generator']}): {reject['reason']}")
    yield dg.Output(
        merged.tasks,
        output_name="validated_tasks",
        metadata=_validated_metadata(merged, len(seed_tasks), shard_steps(stats), policy.shard_config().shards),
    )
    reject_frame = frame_from_records(merged.rejects, TASK_REJECT_COLUMNS)
    yield dg.Output(
        reject_frame,
        output_name="task_rejects",
        metadata={
            "rows": len(merged.rejects),
            "reasons": count_table(reject_frame["reason_code"], "reason_code"),
            "preview": preview(reject_frame, ("task_id", "generator", "reason")),
        },
    )
    storage.remove_step_outputs(context.run_id, "validated_tasks")  # the shards: this run's scratch, now merged


@dg.graph_multi_asset(
    group_name=groups.CURATION,
    outs={
        "validated_tasks": dg.AssetOut(description="Seeds and variants that pass the schema and their own verifier."),
        "task_rejects": dg.AssetOut(description="Variants that failed validation, with the reason code."),
    },
)
def validated_tasks(seed_tasks: pd.DataFrame, failure_tasks: pd.DataFrame, task_variants: pd.DataFrame):
    """Check variants and failure tasks in shards of task-id hashes, one step each (`policy.validation_shards`)."""
    # Seeds passed the same checks when they were loaded; failure tasks (derived from logs) and variants here.
    verdicts, stats = validation_shards(failure_tasks, task_variants).map(check_shard)
    return merge_shards(seed_tasks, failure_tasks, task_variants, verdicts.collect(), stats.collect())


def _checked_tasks(failure_tasks: pd.DataFrame, task_variants: pd.DataFrame) -> list[dict]:
    """The records `validated_tasks` checks, in its input order: failure tasks, then variants."""
    return [
        *records_from_frame(failure_tasks[list(TASK_FIELDS)]),
        *records_from_frame(task_variants[list(TASK_FIELDS)]),
    ]


def _validated_metadata(merged: Validation, seeds: int, steps: list[dict[str, Any]], shards: int) -> dict[str, Any]:
    """`validated_tasks`' metadata: its numbers, the validity rates and the shard steps'."""
    cache = cache_totals(steps, "tasks")
    return {
        "rows": len(merged.tasks),
        "seeds": seeds,
        "variants_checked": merged.checked,
        "variants_rejected": len(merged.rejects),
        "repeated_tasks": len(merged.repeated),
        "cache_hits": cache.hits,
        "cache_misses": cache.misses,  # checked now: new, changed, or not cacheable
        "cache_rebuilt": cache.rebuilt,
        # The shard steps' checking time added up (the work); `shard_balance` shows each step's share.
        "validation_seconds": dg.MetadataValue.float(cache.seconds),
        "validity_rate": dg.MetadataValue.float(merged.validity_rate),
        "validity_by_family": dg.MetadataValue.md(_rates_table(merged.by_family, "family")),
        "validity_by_generator": dg.MetadataValue.md(_rates_table(merged.by_generator, "generator")),
        **shard_metadata(shards, steps, ["shard", "tasks", "cache_hits", "seconds"]),
        "families": count_table(merged.tasks["family"], "family"),
        "preview": task_preview(merged.tasks),
    }


def _rates_table(rates: dict[str, tuple[int, int]], label: str) -> str:
    rows = [{label: k, "valid": v, "checked": n, "rate": f"{v / n:.1%}"} for k, (v, n) in rates.items()]
    return markdown_table(rows, [label, "valid", "checked", "rate"])


@dg.asset_check(
    asset="validated_tasks",
    blocking=True,
    description="Stops the run when a family's share of valid variants falls below the configured floor.",
    additional_ins={"task_variants": dg.AssetIn("task_variants"), "task_rejects": dg.AssetIn("task_rejects")},
)
def family_validity_floor(
    validated_tasks: pd.DataFrame, task_variants: pd.DataFrame, task_rejects: pd.DataFrame, policy: CurationPolicy
) -> dg.AssetCheckResult:
    # The floor is about generators: failure tasks rejected here (derived from logs) are not variants.
    rates = family_validity(task_variants["family"], task_rejects)
    below = below_floor(rates, policy.min_validity_rate)
    return dg.AssetCheckResult(
        passed=not below,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "floor": policy.min_validity_rate,
            "below_floor": dg.MetadataValue.json({k: round(v, 3) for k, v in below.items()}),
            "rates": dg.MetadataValue.json({k: round(v, 3) for k, v in sorted(rates.items())}),
        },
        description=(
            "every family meets the floor"
            if not below
            else f"validity below {policy.min_validity_rate:.0%} for {', '.join(below)}: inspect task_rejects"
        ),
    )


@dg.asset(group_name=groups.CURATION)
def deduplicated_tasks(
    context: dg.AssetExecutionContext, validated_tasks: pd.DataFrame, policy: CurationPolicy, storage: StorageRoot
) -> dg.MaterializeResult:
    """Validated tasks labelled `is_duplicate`, `cluster_id`, `duplicate_of` (exact + MinHash, and vs past runs).

    Past runs are the dedup index, which learns only the tasks a split kept (`split_tasks` adds them): a task the
    judge rejected never makes a later near-copy a duplicate. Nothing is committed here.
    """
    config = policy.minhash_config()
    tasks = records_from_frame(validated_tasks[list(TASK_FIELDS)])
    with policy.dedup_index(storage) as index:  # read only: this step commits nothing
        if index.rebuilt:
            context.log.warning(f"dedup index rebuilt from scratch: {index.rebuild_reason}")
        labels = dedup_tasks(tasks, config, index)
    labelled = validated_tasks[list(TASK_FIELDS)].assign(
        is_duplicate=[label.is_duplicate for label in labels],
        cluster_id=[label.cluster_id for label in labels],
        duplicate_of=pd.Series([label.duplicate_of for label in labels], dtype=object),
        dedup_kind=pd.Series([label.kind for label in labels], dtype=object),
    )
    duplicates = labelled[labelled["is_duplicate"]]
    return dg.MaterializeResult(
        value=labelled,
        metadata={
            "rows": len(labelled),
            "duplicates": len(duplicates),
            "dedup_rate": dg.MetadataValue.float(len(duplicates) / len(labelled) if len(labelled) else 0.0),
            "by_kind": count_table(duplicates["dedup_kind"], "kind"),
            "by_family": count_table(duplicates["family"], "family"),
            "minhash": str(config),
            "index_rows": len(index),
            "index_rebuilt": index.rebuilt,
            "preview": preview(duplicates, ("task_id", "family", "dedup_kind", "duplicate_of")),
        },
    )
