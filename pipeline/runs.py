"""Running the flywheel outside the UI: the same definitions, recorded in the persistent Dagster instance."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.definitions.asset_selection import DagsterInvalidAssetSelectionError
from upath import UPath

from core.errors import SeedwheelError
from core.signals import dispositions_kept
from pipeline.definitions import build_definitions
from pipeline.instance import PROCESS_TAG, exported, open_instance, process_tag, reap_dead_runs
from pipeline.settings import CELERY_BROKER_ENV, Settings

logger = logging.getLogger(__name__)
# Steps at a time in a multiprocess run: one per core of the 2-core machines this is tested on.
MULTIPROCESS_STEPS = 2


class RunRequestError(SeedwheelError, ValueError):
    """A run that cannot start as asked: a selection that is not one or matches nothing, an unknown executor or
    resource field."""


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
    step_seconds: dict[str, float] = field(default_factory=dict)  # step key -> its wall time, for the steps that ended


def materialize(
    settings: Settings,
    select: str | None = None,
    resources: Mapping[str, Mapping[str, Any]] | None = None,
    partition: str | None = None,
    executor: str = "in_process",
    ops: Mapping[str, Mapping[str, Any]] | None = None,
    steps: int = MULTIPROCESS_STEPS,
    job: str | None = None,
) -> RunSummary:
    """Materialize the selected assets (all when `select` is None; else as `selected_asset_keys` reads it), or
    those of the job named `job` (`flywheel_job`, `regeneration_job`, `training_job`).

    `executor`: `in_process` (one process, the CLI's default), `multiprocess` (a process per step, up to `steps`
    at a time, as `dagster dev` runs them; the steps rebuild the definitions from `settings.environ()`) or
    `celery` (each step queued on `settings.celery_broker` for a `seedwheel worker`; `pipeline.workers`).

    Without `partition` the run covers the unpartitioned assets of the selection; with it, the partitioned ones
    for that partition (a failure log's file name), which is added to the instance when new.

    `resources` sets resource fields for this run, as the UI's launchpad does, e.g.
    `{"training": {"difficulty_k": 4}}`; fields not given keep the profile's values. `ops` is the run config of
    ops (an asset's `dg.Config`), e.g. `{"failure_logs": {"path": "/data/log.jsonl"}}`.

    The process's SIGTERM and SIGINT handlers are as they were afterwards (Dagster's run rewrites them:
    `core.signals`).

    Raises:
        RunRequestError: when `select` is not a selection or matches no asset.
    """
    defs = build_definitions(settings)
    keys = (
        selected_asset_keys(defs, select, partition) if job is None else job_asset_keys(defs, job, select, partition)
    )
    graph = defs.resolve_asset_graph()
    missing = unstored_inputs(defs, keys, settings.home)
    if missing:
        needed = ", ".join(f"{name} (read by {', '.join(readers)})" for name, readers in missing.items())
        groups = sorted({f"group:{graph.get(dg.AssetKey.from_user_string(name)).group_name}" for name in missing})
        raise RunRequestError(
            f"the selection reads {needed}, which it does not make and {settings.home} does not hold",
            hint=f"make them first (seedwheel run --select {','.join(groups)}; or add that to this run's selection), "
            "or run the whole graph once: seedwheel run",
        )
    with dispositions_kept(), open_instance(settings) as instance:
        for run_id in reap_dead_runs(instance):
            logger.warning("run %s was killed before it finished: marked failed, its pool slots freed", run_id)
        if partition is not None:
            for key in keys:
                partitions = graph.get(key).partitions_def
                if isinstance(partitions, dg.DynamicPartitionsDefinition) and not instance.has_dynamic_partition(
                    partitions.name, partition
                ):
                    instance.add_dynamic_partitions(partitions.name, [partition])
        run_config = {
            "loggers": {"console": {"config": {"log_level": "INFO"}}},
            "resources": _resource_config(defs, resources or {}),
            "ops": {name: {"config": dict(config)} for name, config in (ops or {}).items()},
        }
        tags = {"seedwheel/profile": settings.profile, "seedwheel/launched_by": "cli", PROCESS_TAG: process_tag()}
        if job is not None:
            tags["seedwheel/job"] = job
        if executor == "in_process":
            result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
                partition_key=partition,
                run_config=run_config,
                instance=instance,
                asset_selection=keys,
                raise_on_error=False,
                tags=tags,
            )
            return _summary(settings, instance, result.run_id, result.success, result.all_events, partition)
        if executor not in ("multiprocess", "celery"):
            raise RunRequestError(f"executor {executor!r}: use in_process, multiprocess or celery")
        if executor == "celery" and not settings.celery_broker:
            raise RunRequestError(
                f"executor 'celery' needs the broker its workers listen on: set {CELERY_BROKER_ENV}=redis://host:6379/0"
                " and start `seedwheel worker` processes with the same settings"
            )
        if executor == "multiprocess" and settings.celery_broker:
            raise RunRequestError(
                f"{CELERY_BROKER_ENV} is set, so steps run on Celery workers: use executor celery (or in_process), "
                "or unset it to run a process per step here"
            )
        if executor == "multiprocess":
            run_config["execution"] = {"config": {"multiprocess": {"max_concurrent": steps}}}
        if partition is not None:
            tags["dagster/partition"] = partition
        with (
            exported(settings.environ()),
            dg.execute_job(
                dg.reconstructable(flywheel_job_from_env),
                instance=instance,
                run_config=run_config,
                tags=tags,
                asset_selection=keys,
                raise_on_error=False,
            ) as result,
        ):
            return _summary(settings, instance, result.run_id, result.success, result.all_events, partition)


def selected_asset_keys(defs: dg.Definitions, select: str | None, partition: str | None = None) -> list[dg.AssetKey]:
    """The asset keys a run of `select` covers, as `dagster asset materialize --select` reads it.

    `select` is a comma-separated list of Dagster selections, each a key (`seed_tasks`), a key with its
    neighbours (`seed_tasks+`, `+train_tasks`), a group (`group:seeds`) or an expression
    (`key:checkpoint_eval or key:promotion`); None selects every asset. A multi-asset (seed_tasks +
    seed_rejects) runs whole: selecting one output brings its siblings. Without `partition` the keys are the
    unpartitioned assets of the selection; with it, the partitioned ones.

    Raises:
        RunRequestError: when `select` is not a selection, or matches no asset.
    """
    try:
        # The parsing of Dagster's own CLI (dagster/_cli/asset.py): each comma-separated part is a selection.
        selection = dg.AssetSelection.all() if select is None else dg.AssetSelection.from_coercible(select.split(","))
    except DagsterInvalidAssetSelectionError:
        raise RunRequestError(
            f"--select {select!r} is not a Dagster asset selection; e.g. 'promotion', 'seed_tasks+', "
            "'group:training', 'seed_tasks,task_variants' or 'key:checkpoint_eval or key:promotion'"
        ) from None
    selection = selection.required_multi_asset_neighbors()
    graph = defs.resolve_asset_graph()
    try:
        keys = sorted(selection.resolve(graph))
    except dg.DagsterInvalidSubsetError as exc:
        raise RunRequestError(f"--select {select!r} matches no asset: {exc}") from None
    # A run covers one partition of the partitioned assets (a failure log file) or none of them.
    keys = [key for key in keys if (graph.get(key).partitions_def is not None) == (partition is not None)]
    if not keys:
        raise RunRequestError(f"--select {select!r} matches no asset; try e.g. 'seed_tasks+' or 'group:seeds'")
    return keys


def job_asset_keys(defs: dg.Definitions, job: str, select: str | None, partition: str | None) -> list[dg.AssetKey]:
    """The asset keys of the job named `job`: its unpartitioned ones, or with `partition` its partitioned ones.

    Raises:
        RunRequestError: when `select` is given too, or no job has that name.
    """
    if select is not None:
        raise RunRequestError(f"--select {select!r} and --job {job!r}: give one of them")
    names = sorted(j.name for j in defs.jobs if not j.name.startswith("__"))
    if job not in names:
        raise RunRequestError(f"no job {job!r}; the jobs: {', '.join(names)}")
    graph = defs.resolve_asset_graph()
    selected = defs.resolve_job_def(job).asset_layer.selected_asset_keys
    keys = sorted(key for key in selected if (graph.get(key).partitions_def is not None) == (partition is not None))
    if not keys:
        raise RunRequestError(f"job {job!r} has no {'partitioned' if partition else 'unpartitioned'} asset")
    return keys


def unstored_inputs(defs: dg.Definitions, keys: Sequence[dg.AssetKey], home: Path | str) -> dict[str, list[str]]:
    """The unpartitioned tables that the assets `keys` load, that `keys` do not make and `home` does not hold:
    each one's name -> the names of the assets that read it. A run of `keys` would fail on each of them."""
    graph = defs.resolve_asset_graph()
    selected = set(keys)
    missing: dict[str, list[str]] = {}
    for key in keys:
        assets = defs.resolve_assets_def(key)
        nothing = {d.name for d in assets.node_def.input_defs if d.dagster_type.is_nothing}  # order only, not read
        for name, parent in assets.keys_by_input_name.items():
            if name in nothing or parent in selected or graph.get(parent).partitions_def is not None:
                continue
            if not UPath(str(home)).joinpath(*parent.path[:-1], f"{parent.path[-1]}.parquet").exists():
                missing.setdefault(parent.to_user_string(), []).append(key.to_user_string())
    return missing


def flywheel_job_from_env() -> dg.JobDefinition:
    """`flywheel_job` (every asset), rebuilt from the environment in each step process of a multiprocess run."""
    return build_definitions(Settings.from_env()).resolve_job_def("flywheel_job")


def run_summary(settings: Settings, run_id: str | None = None) -> RunSummary:
    """What a recorded run did, read back from the Dagster instance at `settings.dagster_home`.

    `run_id`: that run; None reads the latest run `seedwheel run` made of the unpartitioned assets (as after
    `make quickstart`).

    Raises:
        RunRequestError: when the instance has no such run.
    """
    with open_instance(settings) as instance:
        if run_id is None:
            runs = instance.get_runs(filters=dg.RunsFilter(tags={"seedwheel/launched_by": "cli"}))
            run = next((r for r in runs if "dagster/partition" not in r.tags), None)  # newest first
        else:
            run = instance.get_run_by_id(run_id)
        if run is None:
            raise RunRequestError(
                f"no run {run_id or 'of the asset graph'} in the Dagster instance at {settings.dagster_home}",
                hint="run `seedwheel run` first, or give the DAGSTER_HOME it used",
            )
        events = [record.dagster_event for record in instance.all_logs(run.run_id) if record.dagster_event]
        success = run.status == dg.DagsterRunStatus.SUCCESS
        partition = run.tags.get("dagster/partition")
        return _summary(settings, instance, run.run_id, success, events, partition)


def _summary(
    settings: Settings,
    instance: dg.DagsterInstance,
    run_id: str,
    success: bool,
    events: Sequence[dg.DagsterEvent],
    partition: str | None,
) -> RunSummary:
    """What a finished run did, from its events, and how long each of its steps took, from the instance."""
    step_seconds = {
        stats.step_key: stats.end_time - stats.start_time
        for stats in instance.get_run_step_stats(run_id)
        if stats.start_time is not None and stats.end_time is not None
    }
    summary = RunSummary(run_id=run_id, success=success, step_seconds=step_seconds)
    for event in events:
        if event.is_step_materialization:
            materialization = event.step_materialization_data.materialization
            key = materialization.asset_key.to_user_string()
            metadata = {name: value.value for name, value in materialization.metadata.items()}
            rows = metadata.get("dagster/row_count")
            path = settings.home / (f"{key}/{partition}.parquet" if partition is not None else f"{key}.parquet")
            summary.assets.append(MaterializedAsset(key, rows if isinstance(rows, int) else None, path, metadata))
        elif event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
            evaluation = event.asset_check_evaluation_data
            severity = evaluation.severity.value if not evaluation.passed else "passed"
            summary.checks.append((evaluation.check_name, evaluation.passed, severity))
            summary.check_metadata[evaluation.check_name] = {k: v.value for k, v in evaluation.metadata.items()}
        elif event.is_step_failure and event.step_failure_data.error:
            error = event.step_failure_data.error
            while error.cause is not None:  # Dagster wraps an error raised in an asset: report the asset's own
                error = error.cause
            summary.failures.append(f"{event.step_key}: {error.message.strip()}")
    return summary


def _resource_config(defs: dg.Definitions, overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Run config for the overridden resources: the profile's values with the given fields replaced.

    Run config replaces a resource's whole config, so the fields set in code are carried over explicitly.
    """
    config = {}
    for name, fields in overrides.items():
        resource = defs.resources.get(name)
        if resource is None:
            raise RunRequestError(f"no resource named {name!r}; resources: {', '.join(sorted(defs.resources))}")
        current = {field: getattr(resource, field) for field in type(resource).model_fields}
        unknown = sorted(set(fields) - set(current))
        if unknown:
            raise RunRequestError(
                f"resource {name!r} has no field(s) {', '.join(unknown)}; fields: {', '.join(current)}"
            )
        config[name] = {"config": {**current, **fields}}
    return config
