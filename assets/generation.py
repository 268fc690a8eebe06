"""Generation assets: seeds multiplied into variants, programmatic (gold recomputed; in shards of parent-id
hashes, a step each) and LLM rewrites (a step of their own, beside the shards)."""

import time
from typing import Any

import dagster as dg
import pandas as pd

from assets import groups
from assets.metadata import (
    count_table,
    preview,
    progress_logger,
    shard_metadata,
    shard_steps,
    task_preview,
)
from core.shards import cache_totals, plan_shards
from core.tables import frame_from_records, records_from_frame
from curation.splits import first_per_family
from generators.base import GenerationResult
from generators.programmatic import generate_variants
from generators.rewrite import rewrite_tasks
from generators.shards import SHARD_STATS_COLUMNS, ShardStats, merge_variants
from resources import GENERATION_CACHE_FOLDER, LLMEndpoint, StorageRoot, VariantPlan
from validators.tasks import TASK_FIELDS

REJECT_COLUMNS = ("parent_id", "seed_id", "family", "generator", "reason_code", "reason", "params", "raw")
BALANCE_COLUMNS = ("shard", "parents", "cache_hits", "seconds")  # the asset's table of the shard steps


@dg.op(out={"shards": dg.DynamicOut(pd.DataFrame), "parents": dg.Out(pd.DataFrame)})
def generation_shards(seed_tasks: pd.DataFrame, failure_tasks: pd.DataFrame, plan: VariantPlan):
    """The parents (seeds, then failure tasks; the plan's families), and one table of them per non-empty shard
    of parent-id hashes for the programmatic generators (none when `per_seed` is 0)."""
    plan.check(set(seed_tasks["family"]) | set(failure_tasks["family"]))
    parents = records_from_frame(seed_tasks[list(TASK_FIELDS)]) + records_from_frame(failure_tasks[list(TASK_FIELDS)])
    if plan.families:
        parents = [p for p in parents if p["family"] in plan.families]
    if plan.per_seed:
        for shard, positions in enumerate(plan_shards([p["task_id"] for p in parents], plan.shards())):
            if positions:  # an empty hash range makes no step
                frame = frame_from_records([parents[i] for i in positions], TASK_FIELDS)
                yield dg.DynamicOutput(frame, mapping_key=str(shard), output_name="shards")
    yield dg.Output(frame_from_records(parents, TASK_FIELDS), output_name="parents")


@dg.op(out={"variants": dg.Out(pd.DataFrame), "rejects": dg.Out(pd.DataFrame), "stats": dg.Out(pd.DataFrame)})
def generate_shard(context: dg.OpExecutionContext, shard: pd.DataFrame, plan: VariantPlan, storage: StorageRoot):
    """One shard's programmatic variants (each parent's output depends on that parent alone)."""
    parents = records_from_frame(shard[list(TASK_FIELDS)])
    # Outputs of earlier nights per parent (generators.programmatic.variants_key): an unchanged seed is not redone.
    # Shards share the cache: each commit adds a segment of its own (core.cache_store).
    with storage.cache(GENERATION_CACHE_FOLDER) as cache:
        if cache.rebuilt:
            context.log.warning(f"generation cache partly recomputed: {cache.rebuild_reason}")
        started = time.monotonic()
        result = generate_variants(parents, per_seed=plan.per_seed, random_seed=plan.random_seed, cache=cache)
    stats: ShardStats = {
        "shard": int(context.get_mapping_key()),  # generation_shards keys its outputs by the shard index
        "parents": len(parents),
        "cache_hits": cache.hits,
        "cache_rebuilt": cache.rebuilt,
        "seconds": round(time.monotonic() - started, 3),
    }
    yield dg.Output(frame_from_records(result.tasks, TASK_FIELDS), output_name="variants", metadata=stats)
    yield dg.Output(frame_from_records(result.rejects, REJECT_COLUMNS), output_name="rejects")
    yield dg.Output(frame_from_records([stats], SHARD_STATS_COLUMNS), output_name="stats")


@dg.op(out={"variants": dg.Out(pd.DataFrame), "rejects": dg.Out(pd.DataFrame), "llm": dg.Out(pd.DataFrame)})
def rewrite_variants(context: dg.OpExecutionContext, parents: pd.DataFrame, plan: VariantPlan, llm: LLMEndpoint):
    """The LLM rewrites of the plan's parents (the easiest per family first), in one batch through the call cache,
    and the endpoint's numbers (a row; none when the plan makes no rewrites)."""
    result = GenerationResult()
    llm_stats: list[dict] = []
    if plan.rewrite_kinds and plan.rewrites_per_kind:
        records = records_from_frame(parents[list(TASK_FIELDS)])
        client = llm.client()
        started = time.monotonic()
        result = rewrite_tasks(
            [records[i] for i in first_per_family(records, plan.rewrite_max_per_family)],
            kinds=plan.rewrite_kinds,
            per_kind=plan.rewrites_per_kind,
            client=client,
            random_seed=plan.random_seed,
            progress=progress_logger(context, "LLM rewrites"),
        )
        llm_stats.append({"stats": {**client.stats.as_dict(), "llm_seconds": round(time.monotonic() - started, 2)}})
    yield dg.Output(frame_from_records(result.tasks, TASK_FIELDS), output_name="variants")
    yield dg.Output(frame_from_records(result.rejects, REJECT_COLUMNS), output_name="rejects")
    yield dg.Output(frame_from_records(llm_stats, ["stats"]), output_name="llm")


@dg.op(out={"task_variants": dg.Out(pd.DataFrame), "variant_rejects": dg.Out(pd.DataFrame)})
def merge_generation(
    context: dg.OpExecutionContext,
    parents: pd.DataFrame,
    failure_tasks: pd.DataFrame,
    variants: list[pd.DataFrame],
    rejects: list[pd.DataFrame],
    stats: list[pd.DataFrame],
    rewrites: pd.DataFrame,
    rewrite_rejects: pd.DataFrame,
    llm: pd.DataFrame,
    plan: VariantPlan,
    storage: StorageRoot,
):
    """The shards' variants back in parent order, then the rewrites: the tables one step would have made."""
    merged = merge_variants(
        parents["task_id"].tolist(),
        [task for frame in variants for task in records_from_frame(frame)],
        [reject for frame in rejects for reject in records_from_frame(frame)],
        GenerationResult(records_from_frame(rewrites), records_from_frame(rewrite_rejects)),
    )
    variant_frame = frame_from_records(merged.tasks, columns=TASK_FIELDS)
    reject_frame = frame_from_records(merged.rejects, columns=REJECT_COLUMNS)
    yield dg.Output(
        variant_frame,
        output_name="task_variants",
        metadata=_variant_metadata(merged, variant_frame, parents, failure_tasks, shard_steps(stats), llm, plan),
    )
    yield dg.Output(
        reject_frame,
        output_name="variant_rejects",
        metadata={
            "rows": len(reject_frame),
            "reasons": count_table(reject_frame["reason_code"], "reason_code"),
            "by_generator": count_table(reject_frame["generator"], "generator"),
            "preview": preview(reject_frame, ("generator", "family", "reason", "raw")),
        },
    )
    storage.remove_step_outputs(context.run_id, "task_variants")  # the shards: this run's scratch, now merged


@dg.graph_multi_asset(
    group_name=groups.GENERATION,
    outs={
        "task_variants": dg.AssetOut(description="Variants of the seeds and failure tasks, with lineage to them."),
        "variant_rejects": dg.AssetOut(description="Generation attempts that failed a check, with the reason."),
    },
)
def task_variants(seed_tasks: pd.DataFrame, failure_tasks: pd.DataFrame):
    """Make variants of every seed and every production-failure task with the planned generators: programmatic in
    shards of parent-id hashes, one step each (`plan.generation_shards`), LLM rewrites in a step beside them."""
    shards, parents = generation_shards(seed_tasks, failure_tasks)
    variants, rejects, stats = shards.map(generate_shard)
    rewrites, rewrite_rejects, llm = rewrite_variants(parents)
    return merge_generation(
        parents, failure_tasks, variants.collect(), rejects.collect(), stats.collect(), rewrites, rewrite_rejects, llm
    )


def _variant_metadata(
    merged: GenerationResult,
    variant_frame: pd.DataFrame,
    parents: pd.DataFrame,
    failure_tasks: pd.DataFrame,
    shards: list[dict[str, Any]],
    llm: pd.DataFrame,
    plan: VariantPlan,
) -> dict[str, Any]:
    """`task_variants`' metadata: its numbers, the shard steps' and the LLM rewrites' (a row; none: no rewrites)."""
    cache = cache_totals(shards, "parents")
    llm_stats = llm["stats"].iloc[0] if len(llm) else {}
    return {
        "rows": len(merged.tasks),
        "rejected": len(merged.rejects),
        "accept_rate": dg.MetadataValue.float(merged.accept_rate()),
        "parents": len(parents),
        "failure_parents": len(failure_tasks),
        "programmatic_parents_reused": cache.hits,
        "programmatic_parents_generated": cache.misses,
        "programmatic_cache_rebuilt": cache.rebuilt,
        # The shard steps' generation time added up (the work); `shard_balance` shows each step's share.
        "programmatic_seconds": dg.MetadataValue.float(cache.seconds),
        **shard_metadata(plan.shards(), shards, BALANCE_COLUMNS),
        "families": count_table(variant_frame["family"], "family"),
        "generators": count_table((task["lineage"]["generator"]["name"] for task in merged.tasks), "generator"),
        "llm_calls_made": int(llm_stats.get("calls", 0)),
        "llm_calls_cached": int(llm_stats.get("hits", 0)),
        "llm": dg.MetadataValue.json(llm_stats),
        "preview": task_preview(variant_frame),
    }
