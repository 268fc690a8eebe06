"""The Dagster code location: assembles assets, checks, jobs and resources. Computes nothing."""

from __future__ import annotations

import dagster as dg

from assets import budget, curation, evaluation, failures, generation, groups, judging, seeds, splits, training
from pipeline.instance import EXCLUSIVE_TAG
from pipeline.profiles import ProfileResources, profile_resources
from pipeline.settings import Settings
from pipeline.workers import step_executor
from resources import FailureInbox, SeedRepository, StorageRoot, experiment_tracking
from resources.storage import TableStorage

flywheel_job = dg.define_asset_job(
    "flywheel_job", selection=dg.AssetSelection.all(), description="The whole flywheel: every asset, in order."
)
# Seeds -> splits, without training: what the nightly schedule runs. Its cost follows what changed, because LLM
# calls are cached and the dedup index persists between runs.
# The failure logs are partitioned per file and materialized by the inbox sensor, not by the nightly run.
REGENERATION = dg.AssetSelection.groups(
    groups.SEEDS, groups.FAILURES, groups.GENERATION, groups.CURATION, groups.JUDGING
) - dg.AssetSelection.assets(*failures.LOG_ASSETS)
regeneration_job = dg.define_asset_job(
    "regeneration_job",
    selection=REGENERATION,
    description="Seeds to train/eval splits (no training): the nightly regeneration.",
    # One regeneration at a time: the instance's run queue holds a second one (see INSTANCE_YAML).
    tags={EXCLUSIVE_TAG: "regeneration"},
)

# Training and the promotion gate over the stored splits: launched on demand (the UI, `seedwheel run`) or by the
# `corpus_growth` sensor. One at a time: a second waits in the run queue (the gpu pool would serialize its steps,
# but it would train on the same data again).
training_job = dg.define_asset_job(
    "training_job",
    selection=dg.AssetSelection.groups(groups.TRAINING, groups.EVALUATION),
    description="Reward audit, SFT, GRPO, evaluation and the promotion gate, on the stored splits.",
    tags={EXCLUSIVE_TAG: "training"},
)


def build_definitions(settings: Settings) -> dg.Definitions:
    """Definitions wired to `settings` (storage root, seeds folder, profile, user verifiers); the profile's
    resources and switches come from `pipeline.profiles`."""
    settings.register_verifier_plugins()  # also in each step process, which re-imports this code location
    modules = [seeds, failures, generation, curation, judging, splits, training, budget, evaluation]
    profile = profile_resources(settings)
    return dg.Definitions(
        assets=[
            *dg.load_assets_from_modules(modules),
            judging.build_judge_calibration(profile.judge_gate_severity),
        ],
        asset_checks=dg.load_asset_checks_from_modules(modules),
        jobs=[flywheel_job, regeneration_job, training_job],
        executor=step_executor(settings),  # Celery workers when a broker is configured (pipeline.workers)
        schedules=[_nightly_regeneration(settings, profile)],
        sensors=[
            failures.build_failure_inbox(running=profile.failure_inbox_running),
            training.build_corpus_growth(training_job, settings.retrain_growth),
        ],
        resources={
            "io_manager": TableStorage(root=str(settings.home)),
            "seeds": SeedRepository(path=str(settings.seeds_dir)),
            "inbox": FailureInbox(path=settings.failure_inbox, quarantine=settings.failure_quarantine),
            "storage": StorageRoot(root=str(settings.home)),
            # MLflow and TensorBoard: under a local root, or the tracking server MLFLOW_TRACKING_URI names.
            "tracking": experiment_tracking(
                str(settings.home), settings.mlflow_tracking_uri, enabled=settings.tracking
            ),
            **profile.resources(),  # llm, plan, policy, judge, training, gate
            # Training runs in a child process (`python -m training.grpo_job`); on a cluster, swap in
            # dagster-k8s's PipesK8sClient with the same job config (docs/production.md, "Scaling out").
            "pipes": dg.PipesSubprocessClient(),
        },
    )


@dg.definitions
def defs() -> dg.Definitions:
    """Loaded by `dagster dev -w workspace.yaml`: settings come from the environment at load time."""
    return build_definitions(Settings.from_env())


def _nightly_regeneration(settings: Settings, profile: ProfileResources) -> dg.ScheduleDefinition:
    """The nightly regeneration of seeds -> splits: running by default where the profile says so (production),
    switched on in the UI else."""
    return dg.ScheduleDefinition(
        name="nightly_regeneration",
        job=regeneration_job,
        cron_schedule=settings.nightly_cron,
        execution_timezone=settings.timezone,
        default_status=dg.DefaultScheduleStatus.RUNNING
        if profile.nightly_running
        else dg.DefaultScheduleStatus.STOPPED,
        description="Regenerate seeds -> splits nightly; cached LLM calls and the dedup index keep it incremental.",
    )
