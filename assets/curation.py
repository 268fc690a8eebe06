"""Curation assets: every task validated against the schema and its own verifier, then deduplicated and split."""

import time

import dagster as dg
import pandas as pd

from assets import groups
from assets.metadata import count_table, markdown_table, preview, task_preview
from curation.curate import dedup_tasks
from curation.dedup import DedupIndex
from curation.validity import (
    TASK_REJECT_COLUMNS,
    below_floor,
    family_validity,
    split_checked,
    task_generator,
    validity_rates,
)
from pipeline.resources import VALIDATION_CACHE_FOLDER, CurationPolicy, SeedRepository, StorageRoot
from validators.cache_store import CacheStore
from validators.tables import frame_from_records, records_from_frame
from validators.tasks import TASK_FIELDS, check_tasks


@dg.multi_asset(
    group_name=groups.CURATION,
    outs={
        "validated_tasks": dg.AssetOut(description="Seeds and variants that pass the schema and their own verifier."),
        "task_rejects": dg.AssetOut(description="Variants that failed validation, with the reason code."),
    },
)
def validated_tasks(
    context: dg.AssetExecutionContext,
    seed_tasks: pd.DataFrame,
    failure_tasks: pd.DataFrame,
    task_variants: pd.DataFrame,
    seeds: SeedRepository,
    storage: StorageRoot,
):
    """Check variants and failure tasks: schema, id hash, verifier params, reference passes, a wrong answer fails."""
    # Seeds passed the same checks when they were loaded; failure tasks (derived from logs) and variants here.
    variants = [
        *records_from_frame(failure_tasks[list(TASK_FIELDS)]),
        *records_from_frame(task_variants[list(TASK_FIELDS)]),
    ]
    # Verdicts of earlier nights by content (validators.tasks.verdict_key): only new or changed tasks are checked.
    cache = CacheStore.open(storage.path(VALIDATION_CACHE_FOLDER))
    if cache.rebuilt:
        context.log.warning(f"validation cache rebuilt from scratch: {cache.rebuild_reason}")
    started = time.monotonic()
    problems = check_tasks(variants, seeds.verify_context(), cache=cache)
    seconds = time.monotonic() - started
    good, rejects = split_checked(variants, problems)
    tasks = pd.concat([seed_tasks[list(TASK_FIELDS)], frame_from_records(good, TASK_FIELDS)], ignore_index=True)
    reject_frame = frame_from_records(rejects, TASK_REJECT_COLUMNS)
    by_family = validity_rates(pd.Series([v["family"] for v in variants]), reject_frame["family"])
    by_generator = validity_rates(pd.Series([task_generator(v) for v in variants]), reject_frame["generator"])
    for reject in rejects[:20]:
        context.log.warning(f"variant {reject['task_id']} ({reject['generator']}): {reject['reason']}")
    yield dg.Output(
        tasks,
        output_name="validated_tasks",
        metadata={
            "rows": len(tasks),
            "seeds": len(seed_tasks),
            "variants_checked": len(variants),
            "variants_rejected": len(rejects),
            "cache_hits": cache.hits,
            "cache_misses": len(variants) - cache.hits,  # checked now: new, changed, or not cacheable
            "cache_rebuilt": cache.rebuilt,
            "validation_seconds": dg.MetadataValue.float(round(seconds, 3)),
            "validity_rate": dg.MetadataValue.float(len(good) / len(variants) if variants else 1.0),
            "validity_by_family": dg.MetadataValue.md(_rates_table(by_family, "family")),
            "validity_by_generator": dg.MetadataValue.md(_rates_table(by_generator, "generator")),
            "families": count_table(tasks["family"], "family"),
            "preview": task_preview(tasks),
        },
    )
    yield dg.Output(
        reject_frame,
        output_name="task_rejects",
        metadata={
            "rows": len(rejects),
            "reasons": count_table(reject_frame["reason_code"], "reason_code"),
            "preview": preview(reject_frame, ("task_id", "generator", "reason")),
        },
    )


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
    index = DedupIndex.open(storage.path("dedup_index") / config.name, config, storage_config=policy.lsh_storage())
    if index.rebuilt:
        context.log.warning(f"dedup index rebuilt from scratch: {index.rebuild_reason}")
    tasks = records_from_frame(validated_tasks[list(TASK_FIELDS)])
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
