"""The Dagster code location: assembles assets, checks, jobs and resources. Computes nothing."""

from __future__ import annotations

import dagster as dg

from assets import curation, generation, judging, seeds
from pipeline.resources import (
    CurationPolicy,
    JudgePolicy,
    LLMEndpoint,
    SeedRepository,
    StorageRoot,
    VariantPlan,
)
from pipeline.settings import Settings
from pipeline.storage import TableStorage

flywheel_job = dg.define_asset_job(
    "flywheel_job", selection=dg.AssetSelection.all(), description="The whole flywheel: every asset, in order."
)


def build_definitions(settings: Settings) -> dg.Definitions:
    """Definitions wired to `settings` (storage root, seeds folder, profile, user verifiers)."""
    settings.register_verifier_plugins()  # also in each step process, which re-imports this code location
    modules = [seeds, generation, curation, judging]
    production = settings.profile == "production"
    return dg.Definitions(
        assets=[*dg.load_assets_from_modules(modules), judging.build_judge_calibration(blocking=production)],
        asset_checks=dg.load_asset_checks_from_modules(modules),
        jobs=[flywheel_job],
        resources={
            "io_manager": TableStorage(root=str(settings.home)),
            "seeds": SeedRepository(path=str(settings.seeds_dir)),
            "llm": _llm_endpoint(settings),
            "plan": _variant_plan(settings),
            "policy": CurationPolicy(),
            "storage": StorageRoot(root=str(settings.home)),
            "judge": _judge_policy(settings),
        },
    )


def _llm_endpoint(settings: Settings) -> LLMEndpoint:
    """The profile's endpoint: a configured URL, else a local server (tiny model on CPU, or vLLM for production)."""
    shared = {
        "base_url": settings.llm_base_url,
        "cache_dir": str(settings.home / "llm_cache"),
        "work_dir": str(settings.home / "local_model"),
        "seeds_path": str(settings.seeds_dir),
    }
    if settings.profile == "production":
        return LLMEndpoint(**shared, model=settings.llm_model, local_backend="vllm", max_concurrency=32)
    # The tiny random model answers fast and badly: small batches, short answers, garbage lands in rejects.
    return LLMEndpoint(**shared, model=settings.llm_model, max_concurrency=4, max_tokens=64, timeout_s=30.0)


def _variant_plan(settings: Settings) -> VariantPlan:
    if settings.profile == "production":
        return VariantPlan(per_seed=5, rewrite_kinds=["paraphrase", "harder", "distractors"], rewrites_per_kind=2)
    return VariantPlan(per_seed=3, rewrite_kinds=["paraphrase"], rewrites_per_kind=1)


@dg.definitions
def defs() -> dg.Definitions:
    """Loaded by `dagster dev -w workspace.yaml`: settings come from the environment at load time."""
    return build_definitions(Settings.from_env())


def _judge_policy(settings: Settings) -> JudgePolicy:
    if settings.profile == "production":
        return JudgePolicy(use_labels="accepted")
    # The tiny random model's labels are noise: shown in metadata, not used to filter; a sample per family
    # keeps the quickstart to a few minutes on 2 cores.
    return JudgePolicy(use_labels="all", max_per_family=2, calibration_per_family=2, calibration_samples=2)
