"""Seed assets: the curated seed files, checked, as task records (and the rows that failed the checks)."""

import dagster as dg
import pandas as pd

from assets import groups
from assets.metadata import count_table, preview, task_preview
from core.tables import frame_from_records
from resources import VALIDATION_CACHE_FOLDER, SeedRepository, StorageRoot
from validators.tasks import TASK_FIELDS

REJECT_COLUMNS = ("origin", "task_id", "reason_code", "reason", "record")


@dg.multi_asset(
    group_name=groups.SEEDS,
    outs={
        "seed_tasks": dg.AssetOut(description="Curated seed tasks that passed every check, one task record a row."),
        "seed_rejects": dg.AssetOut(description="Seed records that failed a check, with the reason and location."),
    },
)
def seed_tasks(context: dg.AssetExecutionContext, seeds: SeedRepository, storage: StorageRoot):
    """Load the seed files under version control and split them into valid tasks and rejects."""
    # The same verdict cache as validated_tasks: a seed unchanged since an earlier night is not checked again.
    with storage.cache(VALIDATION_CACHE_FOLDER) as cache:
        if cache.rebuilt:
            context.log.warning(f"validation cache partly recomputed: {cache.rebuild_reason}")
        seed_set = seeds.load(cache)
    tasks = frame_from_records(seed_set.tasks, columns=(*TASK_FIELDS, "origin"))
    rejects = frame_from_records(seed_set.rejects, columns=REJECT_COLUMNS)
    for problem in seed_set.problems:
        context.log.warning(str(problem))
    total = len(tasks) + len(rejects)
    yield dg.Output(
        tasks,
        output_name="seed_tasks",
        metadata={
            "rows": len(tasks),
            "rejected": len(rejects),
            "valid_rate": dg.MetadataValue.float(len(tasks) / total if total else 1.0),
            "files": len(seed_set.files),
            "cache_hits": cache.hits,
            "cache_misses": cache.misses,  # checked now: new or changed seeds
            "families": count_table(tasks["family"], "family"),
            "verifiers": count_table((v["name"] for v in tasks["verifier"]), "verifier"),
            "preview": task_preview(tasks, ("task_id", "family", "prompt_text", "origin")),
        },
    )
    yield dg.Output(
        rejects,
        output_name="seed_rejects",
        metadata={
            "rows": len(rejects),
            "reasons": count_table(rejects["reason_code"], "reason_code"),
            "preview": preview(rejects, ("origin", "reason")),
        },
    )


@dg.asset_check(asset="seed_rejects", description="Warns when any seed record failed its checks.")
def seed_files_clean(seed_rejects: pd.DataFrame) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=seed_rejects.empty,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"rejected": len(seed_rejects), "origins": ", ".join(seed_rejects["origin"].head(20))},
    )
