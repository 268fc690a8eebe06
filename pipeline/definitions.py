"""The Dagster code location: assembles assets, checks, jobs and resources. Computes nothing."""

from __future__ import annotations

import dagster as dg

from assets import curation, evaluation, failures, generation, groups, judging, seeds, splits, training
from pipeline.instance import EXCLUSIVE_TAG
from pipeline.resources import (
    CurationPolicy,
    FailureInbox,
    JudgePolicy,
    LLMEndpoint,
    PromotionGate,
    SeedRepository,
    StorageRoot,
    TrainingPolicy,
    VariantPlan,
)
from pipeline.settings import Settings
from pipeline.storage import TableStorage

flywheel_job = dg.define_asset_job(
    "flywheel_job", selection=dg.AssetSelection.all(), description="The whole flywheel: every asset, in order."
)
# Seeds -> splits, without training: what the nightly schedule runs. Its cost follows what changed, because LLM
# calls are cached and the dedup index persists between runs.
# The failure logs are partitioned per file and materialized by the inbox sensor, not by the nightly run.
REGENERATION = dg.AssetSelection.groups(
    groups.SEEDS, groups.FAILURES, groups.GENERATION, groups.CURATION, groups.JUDGING
) - dg.AssetSelection.assets("failure_logs", "failure_rejects")
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
    """Definitions wired to `settings` (storage root, seeds folder, profile, user verifiers)."""
    settings.register_verifier_plugins()  # also in each step process, which re-imports this code location
    modules = [seeds, failures, generation, curation, judging, splits, training, evaluation]
    production = settings.profile == "production"
    return dg.Definitions(
        assets=[*dg.load_assets_from_modules(modules), judging.build_judge_calibration(blocking=production)],
        asset_checks=dg.load_asset_checks_from_modules(modules),
        jobs=[flywheel_job, regeneration_job, training_job],
        schedules=[_nightly_regeneration(settings)],
        sensors=[
            failures.build_failure_inbox(running=settings.profile == "production"),
            training.build_corpus_growth(training_job, settings.retrain_growth),
        ],
        resources={
            "io_manager": TableStorage(root=str(settings.home)),
            "seeds": SeedRepository(path=str(settings.seeds_dir)),
            "inbox": FailureInbox(path=settings.failure_inbox, quarantine=settings.failure_quarantine),
            "llm": _llm_endpoint(settings),
            "plan": _variant_plan(settings),
            "policy": CurationPolicy(),
            "storage": StorageRoot(root=str(settings.home)),
            "judge": _judge_policy(settings),
            "training": _training_policy(settings),
            "gate": _promotion_gate(settings),
            # Training runs in a child process (`python -m training.grpo_job`); on a cluster, swap in
            # dagster-k8s's PipesK8sClient with the same job config (README, "Scaling out").
            "pipes": dg.PipesSubprocessClient(),
        },
    )


def _llm_endpoint(settings: Settings) -> LLMEndpoint:
    """The profile's endpoint: a configured URL, else a local server (tiny model on CPU, or vLLM for production)."""
    shared = {
        "base_url": settings.llm_base_url,
        "cache_dir": str(settings.home / "llm_cache"),
        "models_dir": str(settings.models_dir),
        "log_dir": str(settings.home / "local_model" / "logs"),
    }
    if settings.profile == "production":
        return LLMEndpoint(**shared, model=settings.llm_model, local_backend="vllm", max_concurrency=32)
    # The bundled 135M model on 2 CPU cores: the local server batches 8 concurrent requests into one decode loop,
    # with both cores (the step only waits for it); a request may wait for the batch before it, hence the timeout.
    return LLMEndpoint(
        **shared, model=settings.llm_model, max_concurrency=8, max_tokens=256, timeout_s=900.0, local_threads=2
    )


def _variant_plan(settings: Settings) -> VariantPlan:
    if settings.profile == "production":
        return VariantPlan(per_seed=5, rewrite_kinds=["paraphrase", "harder", "distractors"], rewrites_per_kind=2)
    # One paraphrase of the easiest parent per family: every family shows a real rewrite, a few calls in all.
    return VariantPlan(per_seed=3, rewrite_kinds=["paraphrase"], rewrites_per_kind=1, rewrite_max_per_family=1)


@dg.definitions
def defs() -> dg.Definitions:
    """Loaded by `dagster dev -w workspace.yaml`: settings come from the environment at load time."""
    return build_definitions(Settings.from_env())


def _judge_policy(settings: Settings) -> JudgePolicy:
    if settings.profile == "production":
        return JudgePolicy(use_labels="accepted")
    # A 135M judge is a poor judge (its kappa is reported and warned about): its labels are shown, not used to
    # filter; one task and one audit item per family, judged once, keep the quickstart within minutes on 2 cores.
    return JudgePolicy(use_labels="all", max_per_family=1, calibration_per_family=1, calibration_samples=1)


def _training_policy(settings: Settings) -> TrainingPolicy:
    shared = {
        "base_model": settings.base_model,
        "models_dir": str(settings.models_dir),
    }
    if settings.profile == "production":
        grpo = {"num_generations": 8, "max_completion_length": 1024, "max_prompt_tokens": 2048, "save_steps": 50}
        return TrainingPolicy(**shared, grpo=grpo)
    # The bundled 135M model on 2 CPU cores: a short SFT warm-up on the references, a difficulty profile of the
    # 3 easiest tasks per family (the contact-extraction seeds are the ones it solves sometimes), and two GRPO
    # steps on the learnable ones alone, 4 completions per prompt so that a group's rewards can differ. Sampling at
    # 0.7 everywhere: at 1.0 over the full distribution a 135M model's answers fall apart.
    grpo = {
        "temperature": 0.7,
        "max_steps": 2,
        "num_generations": 4,
        "per_device_train_batch_size": 8,
        "max_completion_length": 48,
        "max_prompt_tokens": 768,
        "learning_rate": 1e-5,
        "save_steps": 2,
    }
    return TrainingPolicy(
        **shared,
        sft_max_steps=2,
        sft_learning_rate=1e-5,
        sft_batch_size=2,
        sft_max_length=512,
        difficulty_k=4,
        difficulty_max_new_tokens=48,
        difficulty_batch_size=16,
        difficulty_temperature=0.7,
        difficulty_max_per_family=3,
        grpo_unprofiled=False,
        runtime="cpu",
        grpo=grpo,
    )


def _promotion_gate(settings: Settings) -> PromotionGate:
    registry = str(settings.home / "promotion" / "promoted.json")
    if settings.profile == "production":
        return PromotionGate(registry_path=registry)
    # The easiest eval task of each family (and every held-out production failure), 4 samples each: the
    # decision is real and made from real completions; two GRPO steps cannot be shown to help on so few tasks,
    # and the gate says so. Batches of 16 completions (4 tasks): fewer decode loops than 8 (checkpoint_eval ~10%
    # faster, the same completions); 32 was slower, every row then reading the longest prompt's padded KV cache.
    return PromotionGate(
        registry_path=registry, samples=4, max_new_tokens=48, temperature=0.7, max_per_family=1, batch_size=16
    )


def _nightly_regeneration(settings: Settings) -> dg.ScheduleDefinition:
    """The nightly regeneration of seeds -> splits: running by default in production, switched on in the UI else."""
    production = settings.profile == "production"
    return dg.ScheduleDefinition(
        name="nightly_regeneration",
        job=regeneration_job,
        cron_schedule=settings.nightly_cron,
        execution_timezone=settings.timezone,
        default_status=dg.DefaultScheduleStatus.RUNNING if production else dg.DefaultScheduleStatus.STOPPED,
        description="Regenerate seeds -> splits nightly; cached LLM calls and the dedup index keep it incremental.",
    )
