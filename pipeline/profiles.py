"""The profiles: for each, every resource value and switch it sets, in one place (`PROFILES`).

`quickstart` runs the whole flywheel for real on 2 CPU cores, offline, with the bundled SmolLM2-135M-Instruct;
`production` uses served models on GPU machines, filters on the judge's labels and blocks on every gate. What a
profile does not name is the resource's default, which is the library's (`resources`, `Mirror`).
`pipeline.definitions` only assembles what `profile_resources(settings)` returns.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import dagster as dg

from langmodels.launcher import LOCAL_REQUEST_TIMEOUT_S
from pipeline.settings import Profile, Settings
from resources import CurationPolicy, JudgePolicy, LLMEndpoint, PromotionGate, TrainingPolicy, VariantPlan


@dataclass(frozen=True)
class ProfileResources:
    """What a profile decides: the resources that differ between profiles, and which gates and automations are on.

    Attributes:
        llm, plan, policy, judge, training, gate: the resources of those names.
        judge_gate_severity: how a failing `judge_agreement` check shows (ERROR or WARN); it never stops a run:
            a judge below its floors just loses its say in the splits.
        nightly_running: the nightly regeneration schedule starts switched on.
        failure_inbox_running: the failure-inbox sensor starts switched on.
    """

    llm: LLMEndpoint
    plan: VariantPlan
    policy: CurationPolicy
    judge: JudgePolicy
    training: TrainingPolicy
    gate: PromotionGate
    judge_gate_severity: dg.AssetCheckSeverity
    nightly_running: bool
    failure_inbox_running: bool

    def resources(self) -> dict[str, dg.ConfigurableResource]:
        """The profile's resources by the name assets ask for them."""
        return {
            "llm": self.llm,
            "plan": self.plan,
            "policy": self.policy,
            "judge": self.judge,
            "training": self.training,
            "gate": self.gate,
        }


# The endpoint's default sampling params in both profiles (a request may set its own). They are part of every
# LLM cache key, so changing them makes every call again; `langmodels.EndpointConfig`'s own defaults are 0.0 and 512.
GENERATION_PARAMS: dict[str, Any] = {"temperature": 0.7, "max_tokens": 256}


def quickstart(settings: Settings) -> ProfileResources:
    """CPU, offline, the bundled 135M model on 2 cores: every stage runs on real completions, in minutes."""
    return ProfileResources(
        # The local server batches 8 concurrent requests into one decode loop, with both cores (the step only
        # waits for it); a request may wait for the batch before it, hence the timeout.
        llm=LLMEndpoint(
            **_endpoint(settings),
            max_concurrency=8,
            timeout_s=LOCAL_REQUEST_TIMEOUT_S,
            local_threads=2,
            **GENERATION_PARAMS,
        ),
        # One paraphrase of the easiest parent per family: every family shows a real rewrite, a few calls in all.
        plan=VariantPlan(per_seed=3, rewrite_kinds=["paraphrase"], rewrites_per_kind=1, rewrite_max_per_family=1),
        # Validation in two shards: `dagster dev`'s multiprocess executor checks them side by side on the 2 cores.
        policy=CurationPolicy(validation_shards=2),
        # A 135M judge is a poor judge (its kappa is reported and warned about): its labels are shown, not used to
        # filter; one task and one audit item per family, judged once, keep the quickstart within minutes.
        judge=JudgePolicy(use_labels="all", max_per_family=1, calibration_per_family=1, calibration_samples=1),
        # An SFT warm-up on the JSON-extraction and tool-call references of at most 512 tokens (16 steps of 8 at
        # 5e-5): the formats a 135M model learns within minutes; code, SQL, arithmetic and episodes need more than
        # a warm-up, and most tool-call prompts carry a long tool catalogue and are left out for length
        # (docs/quickstart.md has the measurements). Then a difficulty profile of the 4 easiest tasks per family,
        # and four GRPO steps on the learnable ones alone, one prompt of 8 completions a step so that a group's
        # rewards can differ. Sampling at 0.7 everywhere: at 1.0 over the full distribution a 135M model's answers
        # fall apart.
        training=TrainingPolicy(
            **_training(settings),
            sft_max_steps=16,
            sft_learning_rate=5e-5,
            sft_batch_size=8,
            sft_max_length=512,
            sft_families=["json_extraction", "tool_call"],
            # 8 samples a task, as many as a GRPO group: a task solved 7 times in 8 has a reward spread in GRPO too,
            # and after the warm-up the easiest JSON tasks are solved nearly always (k=4 found none learnable).
            difficulty_k=8,
            difficulty_max_new_tokens=48,
            difficulty_batch_size=16,
            difficulty_temperature=0.7,
            difficulty_max_per_family=4,
            episode_max_turns=4,  # the episode seeds take 1-3 calls; a 135M model that loops stops early
            grpo_unprofiled=False,
            runtime="cpu",
            grpo={
                "temperature": 0.7,
                # Four steps: after the warm-up the learnable tasks are solved about 1 time in 8, and a group of 8
                # then has a reward spread 2 times in 3; two steps left GRPO without one.
                "max_steps": 4,
                # One prompt of 8 completions a step: it trains with a single learnable task too, and 8 rows a
                # step is the shape the CPU throughputs the budget plans with were measured on.
                "num_generations": 8,
                "per_device_train_batch_size": 8,
                "max_completion_length": 48,
                "max_prompt_tokens": 768,
                "learning_rate": 1e-5,
                "save_steps": 2,
            },
        ),
        # A uniform sample of 24 eval tasks by task-id hash (and every held-out production failure on top), so
        # the decision stands on more than the gate's min_tasks=20 paired tasks, chosen without looking at any
        # answer; 2 samples each keep both models' evaluation within minutes. Batches of 16 completions: fewer
        # decode loops than 8 (~10% faster, the same completions); 32 was slower, every row then reading the
        # longest prompt's padded KV cache.
        gate=PromotionGate(
            registry_path=_registry(settings),
            samples=2,
            max_new_tokens=48,
            temperature=0.7,
            max_tasks=24,
            batch_size=16,
            episode_max_turns=4,  # as the training episodes: a 135M model that loops calls stops early
        ),
        judge_gate_severity=dg.AssetCheckSeverity.WARN,  # a 135M judge cannot meet the floors
        nightly_running=False,  # switched on in the UI
        failure_inbox_running=False,
    )


def production(settings: Settings) -> ProfileResources:
    """Served models on GPU machines (vLLM when no endpoint URL is set); the judge's labels filter the splits."""
    return ProfileResources(
        llm=LLMEndpoint(**_endpoint(settings), local_backend="vllm", max_concurrency=32, **GENERATION_PARAMS),
        # Programmatic generation in eight shards, one step each (the LLM rewrites: one step beside them).
        plan=VariantPlan(
            per_seed=5, rewrite_kinds=["paraphrase", "harder", "distractors"], rewrites_per_kind=2, generation_shards=8
        ),
        # Validation in eight shards, one step each: at least one per worker (Celery, Kubernetes pods), which check
        # a shard with a thread per CPU they have (`validation_threads`).
        policy=CurationPolicy(validation_shards=8),
        # The judge stays one step: its load goes to the endpoint, which one step's `max_concurrency` requests
        # keep busy; set `judge_shards` when each worker has its own endpoint (a GPU per pod) or the endpoint is a
        # fleet that scales with load.
        judge=JudgePolicy(use_labels="accepted"),
        training=TrainingPolicy(
            **_training(settings),
            grpo={"num_generations": 8, "max_completion_length": 1024, "max_prompt_tokens": 2048, "save_steps": 50},
        ),
        gate=PromotionGate(registry_path=_registry(settings)),
        judge_gate_severity=dg.AssetCheckSeverity.ERROR,
        nightly_running=True,
        failure_inbox_running=True,
    )


PROFILES: dict[Profile, Callable[[Settings], ProfileResources]] = {
    "quickstart": quickstart,
    "production": production,
}


def profile_resources(settings: Settings) -> ProfileResources:
    """The resources and switches of `settings.profile`, wired to `settings` (paths, models)."""
    return PROFILES[settings.profile](settings)


class _EndpointFields(TypedDict):
    base_url: str
    model: str
    cache_dir: str
    models_dir: str
    log_dir: str


class _TrainingFields(TypedDict):
    base_model: str
    models_dir: str


def _endpoint(settings: Settings) -> _EndpointFields:
    """The endpoint's settings-given fields: a configured URL and model (else a local server), and its folders."""
    return {
        "base_url": settings.llm_base_url,
        "model": settings.llm_model,
        "cache_dir": str(settings.home / "llm_cache"),
        "models_dir": str(settings.models_dir),
        # A local server's logs stay on this machine: under a local root, else in the temporary folder.
        "log_dir": str(
            settings.home / "local_model" / "logs"
            if isinstance(settings.home, Path)
            else Path(tempfile.gettempdir()) / "seedwheel-local-model-logs"
        ),
    }


def _training(settings: Settings) -> _TrainingFields:
    """The policy to train (empty: the bundled model) and where the bundled model is converted."""
    return {"base_model": settings.base_model, "models_dir": str(settings.models_dir)}


def _registry(settings: Settings) -> str:
    """The promotion record, under the storage root."""
    return str(settings.home / "promotion" / "promoted.json")
