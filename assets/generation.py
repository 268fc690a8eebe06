"""Generation assets: seeds multiplied into variants, programmatic (gold recomputed) and LLM rewrites."""

import time

import dagster as dg
import pandas as pd

from assets import groups
from assets.metadata import count_table, preview, progress_logger, task_preview
from curation.splits import first_per_family
from generators.base import GenerationResult
from generators.programmatic import generate_variants
from generators.rewrite import rewrite_tasks
from pipeline.resources import GENERATION_CACHE_FOLDER, LLMEndpoint, StorageRoot, VariantPlan
from validators.tables import frame_from_records, records_from_frame
from validators.tasks import TASK_FIELDS

REJECT_COLUMNS = ("parent_id", "seed_id", "family", "generator", "reason_code", "reason", "params", "raw")


@dg.multi_asset(
    group_name=groups.GENERATION,
    outs={
        "task_variants": dg.AssetOut(description="Variants of the seeds and failure tasks, with lineage to them."),
        "variant_rejects": dg.AssetOut(description="Generation attempts that failed a check, with the reason."),
    },
)
def task_variants(
    context: dg.AssetExecutionContext,
    seed_tasks: pd.DataFrame,
    failure_tasks: pd.DataFrame,
    plan: VariantPlan,
    llm: LLMEndpoint,
    storage: StorageRoot,
):
    """Make variants of every seed and every production-failure task with the planned generators."""
    plan.check(set(seed_tasks["family"]) | set(failure_tasks["family"]))
    parents = records_from_frame(seed_tasks[list(TASK_FIELDS)]) + records_from_frame(failure_tasks[list(TASK_FIELDS)])
    if plan.families:
        parents = [p for p in parents if p["family"] in plan.families]

    result = GenerationResult()
    # Outputs of earlier nights per parent (generators.programmatic.variants_key): an unchanged seed is not redone.
    with storage.cache(GENERATION_CACHE_FOLDER) as cache:
        if cache.rebuilt:
            context.log.warning(f"generation cache partly recomputed: {cache.rebuild_reason}")
        started = time.monotonic()
        if plan.per_seed:
            result.extend(
                generate_variants(parents, per_seed=plan.per_seed, random_seed=plan.random_seed, cache=cache)
            )
        programmatic_seconds = time.monotonic() - started
    llm_stats: dict[str, float] = {}
    if plan.rewrite_kinds and plan.rewrites_per_kind:
        client = llm.client()
        started = time.monotonic()
        result.extend(
            rewrite_tasks(
                [parents[i] for i in first_per_family(parents, plan.rewrite_max_per_family)],
                kinds=plan.rewrite_kinds,
                per_kind=plan.rewrites_per_kind,
                client=client,
                random_seed=plan.random_seed,
                progress=progress_logger(context, "LLM rewrites"),
            )
        )
        llm_stats = {**client.stats.as_dict(), "llm_seconds": round(time.monotonic() - started, 2)}

    variants = frame_from_records(result.tasks, columns=TASK_FIELDS)
    rejects = frame_from_records(result.rejects, columns=REJECT_COLUMNS)
    generators = [t["lineage"]["generator"]["name"] for t in result.tasks]
    attempts = len(variants) + len(rejects)
    yield dg.Output(
        variants,
        output_name="task_variants",
        metadata={
            "rows": len(variants),
            "rejected": len(rejects),
            "accept_rate": dg.MetadataValue.float(len(variants) / attempts if attempts else 1.0),
            "parents": len(parents),
            "failure_parents": len(failure_tasks),
            "programmatic_parents_reused": cache.hits,
            "programmatic_parents_generated": len(parents) - cache.hits if plan.per_seed else 0,
            "programmatic_cache_rebuilt": cache.rebuilt,
            "programmatic_seconds": dg.MetadataValue.float(round(programmatic_seconds, 3)),
            "families": count_table(variants["family"], "family"),
            "generators": count_table(generators, "generator"),
            "llm_calls_made": int(llm_stats.get("calls", 0)),
            "llm_calls_cached": int(llm_stats.get("hits", 0)),
            "llm": dg.MetadataValue.json(llm_stats),
            "preview": task_preview(variants),
        },
    )
    yield dg.Output(
        rejects,
        output_name="variant_rejects",
        metadata={
            "rows": len(rejects),
            "reasons": count_table(rejects["reason_code"], "reason_code"),
            "by_generator": count_table(rejects["generator"], "generator"),
            "preview": preview(rejects, ("generator", "family", "reason", "raw")),
        },
    )
