"""Running the flywheel outside the UI: the same definitions, recorded in the persistent Dagster instance."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from pipeline.definitions import build_definitions
from pipeline.settings import Settings

# Offline machines must not try to send telemetry; runs stay in a local SQLite-backed instance.
INSTANCE_YAML = "telemetry:\n  enabled: false\nnux:\n  enabled: false\n"


def open_instance(settings: Settings) -> dg.DagsterInstance:
    """The persistent instance at `settings.dagster_home`, created on first use."""
    settings.dagster_home.mkdir(parents=True, exist_ok=True)
    config = settings.dagster_home / "dagster.yaml"
    if not config.exists():
        config.write_text(INSTANCE_YAML, encoding="utf-8")
    return dg.DagsterInstance.from_config(str(settings.dagster_home))


@dataclass(frozen=True)
class MaterializedAsset:
    key: str
    rows: int | None
    path: Path
    metadata: dict[str, object] = field(default_factory=dict)  # the materialization's metadata, as plain values


@dataclass
class RunSummary:
    """What a run did: its id, success, what it wrote, how its checks went, and why steps failed."""

    run_id: str
    success: bool
    assets: list[MaterializedAsset] = field(default_factory=list)
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    check_metadata: dict[str, dict[str, object]] = field(default_factory=dict)  # check name -> plain values
    failures: list[str] = field(default_factory=list)


def materialize(settings: Settings, select: str | None = None) -> RunSummary:
    """Materialize the selected assets (all when `select` is None; Dagster selection syntax otherwise).

    Raises:
        ValueError: when the selection matches no asset.
    """
    defs = build_definitions(settings)
    job = defs.resolve_implicit_global_asset_job_def()
    # A multi-asset (seed_tasks + seed_rejects) runs whole: selecting one output brings its siblings.
    selection = dg.AssetSelection.all() if select is None else dg.AssetSelection.from_string(select)
    selection = selection.required_multi_asset_neighbors()
    try:
        keys = sorted(selection.resolve(defs.resolve_asset_graph()))
    except dg.DagsterInvalidSubsetError:
        keys = []
    if not keys:
        raise ValueError(f"--select {select!r} matches no asset; try e.g. 'seed_tasks+' or 'group:seeds'")
    with open_instance(settings) as instance:
        result = job.execute_in_process(
            run_config={"loggers": {"console": {"config": {"log_level": "INFO"}}}},
            instance=instance,
            asset_selection=keys,
            raise_on_error=False,
            tags={"seedwheel/profile": settings.profile, "seedwheel/launched_by": "cli"},
        )
    summary = RunSummary(run_id=result.run_id, success=result.success)
    for event in result.get_asset_materialization_events():
        materialization = event.materialization
        key = materialization.asset_key.to_user_string()
        metadata = {name: value.value for name, value in materialization.metadata.items()}
        rows = metadata.get("dagster/row_count")
        summary.assets.append(MaterializedAsset(key, rows, settings.home / f"{key}.parquet", metadata))  # type: ignore[arg-type]
    for evaluation in result.get_asset_check_evaluations():
        severity = evaluation.severity.value if not evaluation.passed else "passed"
        summary.checks.append((evaluation.check_name, evaluation.passed, severity))
        summary.check_metadata[evaluation.check_name] = {k: v.value for k, v in evaluation.metadata.items()}
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.error:
            summary.failures.append(f"{event.step_key}: {event.step_failure_data.error.message.strip()}")
    return summary
