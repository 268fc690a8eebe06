"""The profile's choices, settable in the launchpad: the variant plan, curation floors, the judge, training and
the promotion gate."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal
from urllib.parse import urlparse

import dagster as dg
import pandas as pd
from pydantic import Field

from core.shards import shard_count
from core.state import StateStore
from core.tables import records_from_frame
from curation.dedup import DedupIndex, MinHashConfig
from curation.splits import SplitConfig, hash_sample
from curation.validation_shards import ShardConfig
from generators.rewrite import REWRITE_KINDS
from judge import AcceptanceRule, CalibrationFloors, TokenPrices
from langmodels.models import bundled_model
from resources.folders import DEDUP_INDEX_FOLDER
from resources.mirror import (
    AUDIT_FIELDS,
    DEFAULT_MIN_REFERENCE_CORRECTNESS,
    FLOOR_FIELDS,
    GRPO_JOB_FIELDS,
    MINHASH_FIELDS,
    PRICE_FIELDS,
    PROMOTION_FIELDS,
    SFT_FIELDS,
    SHARD_FIELDS,
    SPLIT_FIELDS,
)
from resources.storage import StorageRoot
from training.episodes import play_and_score
from training.evaluation import SampledVerdicts
from training.grpo_job import Runtime
from training.promotion import FamilyRule, PromotionPolicy, PromotionRegistry
from training.reward_audit import RewardAuditPolicy
from training.sft import SFTSettings
from validators.registry import VerifyContext
from validators.tasks import TASK_FIELDS

# Which judged tasks the splits keep: the judge's accepted ones, or all of them (labels shown, not used).
LabelUse = Literal["accepted", "all"]
# Where a run's training starts: the base model every time, or the promoted model (continual training).
StartFrom = Literal["base", "promoted"]


class VariantPlan(dg.ConfigurableResource):
    """How many variants to make of each seed, and with which generators (the profile sets the defaults)."""

    per_seed: int = 3
    random_seed: int = 0
    families: list[str] | None = None
    # Plain text checked by `check`: Dagster's config has no list of `Literal` choices.
    rewrite_kinds: list[str] = Field(default_factory=lambda: ["paraphrase"])
    rewrites_per_kind: int = 1
    # Rewrite at most this many parents per family (None: all), the easiest first: caps the LLM calls.
    rewrite_max_per_family: int | None = None
    # Programmatic generation in shards (`core.shards`): `task_variants` generates each hash range of parent ids
    # in its own step, so an executor with N workers runs it about N times faster (the rewrites: one step beside).
    generation_shards: int = 1

    def shards(self) -> int:
        return shard_count(self.generation_shards, "generation_shards")

    def check(self, known_families: set[str]) -> None:
        """Fail before any work or LLM call when the plan cannot work, with the fix in the message."""
        self.shards()
        if self.per_seed < 0 or self.rewrites_per_kind < 0:
            raise ValueError(
                f"per_seed ({self.per_seed}) and rewrites_per_kind ({self.rewrites_per_kind}) must be >= 0"
            )
        if self.per_seed == 0 and (self.rewrites_per_kind == 0 or not self.rewrite_kinds):
            raise ValueError("the variant plan makes no variants: set per_seed or rewrites_per_kind above 0")
        unknown = sorted(set(self.families or ()) - known_families)
        if unknown:
            raise ValueError(f"unknown families {unknown} in the variant plan; seeds have {sorted(known_families)}")
        unknown_kinds = sorted(set(self.rewrite_kinds) - set(REWRITE_KINDS))
        if unknown_kinds:
            raise ValueError(f"unknown rewrite kinds {unknown_kinds}; use {', '.join(REWRITE_KINDS)}")


class CurationPolicy(dg.ConfigurableResource):
    """Quality floors and curation parameters (the profile sets the defaults)."""

    min_validity_rate: float = 0.8  # per family, over generated variants: below it the run stops
    # MinHash near-dedup (`curation.dedup.MinHashConfig`); its defaults are measured (docs/curation.md,
    # bench/measure_dedup_recall.py). Changing any of them names a new persisted index, so the old one is never
    # matched with incompatible signatures.
    shingle_size: int = MINHASH_FIELDS.default("shingle_size")
    num_perm: int = MINHASH_FIELDS.default("num_perm")
    threshold: float = MINHASH_FIELDS.default("threshold")
    minhash_seed: int = MINHASH_FIELDS.default("minhash_seed")
    # The train/eval split by lineage (`curation.splits.SplitConfig`); `failure_eval_fraction` is the share of
    # production failures no seed explains that is held out for the gate's line.
    eval_fraction: float = SPLIT_FIELDS.default("eval_fraction")
    failure_eval_fraction: float = SPLIT_FIELDS.default("failure_eval_fraction")
    split_salt: str = SPLIT_FIELDS.default("split_salt")
    stratify_by: list[str] = Field(default_factory=lambda: list(SPLIT_FIELDS.default("stratify_by")))
    # Where the LSH band tables live: empty keeps them in memory (recomputed from the stored signatures); a
    # redis:// URL shares them between workers (docs/production.md, "Scaling out"); needs the `redis` extra.
    lsh_redis_url: str = ""
    # Validation in shards (`curation.validation_shards.ShardConfig`): `validated_tasks` checks each hash range of
    # task ids in its own step, so an executor with N workers runs it about N times faster; threads per step (None: one
    # per CPU of the machine the step runs on; 1 for one-core workers).
    validation_shards: int = SHARD_FIELDS.default("validation_shards")
    validation_threads: int | None = SHARD_FIELDS.default("validation_threads")

    def minhash_config(self) -> MinHashConfig:
        return MINHASH_FIELDS.build(self)

    @contextmanager
    def dedup_index(self, storage: StorageRoot) -> Iterator[DedupIndex]:
        """The persisted dedup index of this config (`<root>/dedup_index/<config name>/`, through `storage.folder`)
        for the block, with its LSH storage and the storage's run-level lock (`StorageRoot.state()`): every opener
        takes the same lock. On an object store, what the block commits is committed back when it ends."""
        config = self.minhash_config()
        store = storage.state()
        with storage.folder(DEDUP_INDEX_FOLDER, config.name) as folder:
            yield DedupIndex.open(folder, config, storage_config=self.lsh_storage(), store=store)

    def shard_config(self) -> ShardConfig:
        return SHARD_FIELDS.build(self)

    def lsh_storage(self) -> dict[str, Any] | None:
        """datasketch's storage config for the LSH tables, from `lsh_redis_url` (None: in memory)."""
        if not self.lsh_redis_url:
            return None
        url = urlparse(self.lsh_redis_url)
        if url.scheme != "redis" or not url.hostname:
            raise ValueError(f"lsh_redis_url {self.lsh_redis_url!r} must look like redis://host:6379/0")
        connection = {"host": url.hostname, "port": url.port or 6379, "db": int(url.path.strip("/") or 0)}
        if url.password:
            connection["password"] = url.password
        return {"type": "redis", "redis": connection}

    def split_config(self) -> SplitConfig:
        return SPLIT_FIELDS.build(self)  # SplitConfig stores stratify_by as a tuple


class JudgePolicy(dg.ConfigurableResource):
    """How the LLM judge runs and how much its labels count (the profile sets the defaults)."""

    # Which judged tasks the splits keep: "accepted" (production: when the judge passed its calibration, else all)
    # or "all" (the quickstart, whose 135M judge misses its calibration floors: its labels are shown, not used).
    use_labels: LabelUse = "accepted"
    # Judge at most this many tasks per family (None: all); the others are labelled `not_judged`.
    max_per_family: int | None = None
    min_reference_correctness: int = DEFAULT_MIN_REFERENCE_CORRECTNESS
    calibration_samples: int = 3  # judgments per audit item, for self-consistency
    # Audit items per family (half accept, half reject where the set has both); None: the whole audit set.
    calibration_per_family: int | None = None
    calibration_temperature: float = 0.7
    # The calibration floors (`judge.CalibrationFloors`) and the endpoint's prices (`judge.TokenPrices`).
    min_kappa: float = FLOOR_FIELDS.default("min_kappa")
    min_accuracy: float = FLOOR_FIELDS.default("min_accuracy")
    max_false_accept: float = FLOOR_FIELDS.default("max_false_accept")
    max_judge_error: float = FLOOR_FIELDS.default("max_judge_error")
    price_in_per_1k: float = PRICE_FIELDS.default("price_in_per_1k")
    price_out_per_1k: float = PRICE_FIELDS.default("price_out_per_1k")
    # Judging in shards (`core.shards`): `judged_tasks` judges each hash range of task ids in its own step, so
    # N workers (each with its own client, `llm.max_concurrency` requests in flight) send about N times the load.
    judge_shards: int = 1

    def shards(self) -> int:
        return shard_count(self.judge_shards, "judge_shards")

    def labels_in_use(self, judged: pd.DataFrame) -> bool:
        """Whether the judge's labels count this run: `use_labels` is "accepted" and the judge that made them
        passed its calibration (`judged_tasks`' `judge_calibrated`). A judge below its floors neither filters
        the splits nor vouches for LLM text: the run goes on without its labels."""
        calibrated = "judge_calibrated" in judged and bool(judged["judge_calibrated"].fillna(False).all())
        return self.use_labels == "accepted" and calibrated

    def kept(self, judged: pd.DataFrame) -> pd.DataFrame:
        """The judged tasks the splits keep (the accepted ones where the labels are in use), as task records."""
        chosen = judged[judged["judge_verdict"] == "accept"] if self.labels_in_use(judged) else judged
        return chosen[list(TASK_FIELDS)]

    def rule(self) -> AcceptanceRule:
        return AcceptanceRule({"reference_correctness": self.min_reference_correctness})

    def floors(self) -> CalibrationFloors:
        return FLOOR_FIELDS.build(self)

    def prices(self) -> TokenPrices:
        return PRICE_FIELDS.build(self)


class TrainingPolicy(dg.ConfigurableResource):
    """What the training stage does: the base model, the reward, and which optional stages run (profile defaults).

    `grpo` takes any `SeedwheelGRPOConfig` field (every `trl.GRPOConfig` field included: `loss_type`,
    `epsilon_high`, `importance_sampling_level`, `beta`, `num_generations`, `max_steps`, `use_vllm`, ...); it is
    passed to the training job as is, so the config in the UI's launchpad is the config the trainer sees.
    """

    # A model directory or hub id; empty: the bundled SmolLM2-135M-Instruct (the quickstart, offline).
    base_model: str = ""
    # "base": every run trains the base model on its own data (a run whose data and recipe match the promoted
    # model's reuses its steps, and its candidate is that model). "promoted": a run trains on from the model the
    # promotion record names (the base model until one is promoted), so each promotion is a step from the last.
    start_from: StartFrom = "base"
    models_dir: str  # where the bundled model is converted
    reward_weights: dict[str, float] = Field(default_factory=lambda: {"*": 1.0})
    # The reward audit (blocking; `training.reward_audit.RewardAuditPolicy`): floors on agreement with the
    # labelled audit set, and the probes' ceiling.
    audit_min_agreement: float = AUDIT_FIELDS.default("audit_min_agreement")
    audit_max_false_accept: float = AUDIT_FIELDS.default("audit_max_false_accept")
    audit_max_false_reject: float = AUDIT_FIELDS.default("audit_max_false_reject")
    audit_max_probe_score: float = AUDIT_FIELDS.default("audit_max_probe_score")
    # SFT warm-up on the training tasks' references, for a policy that cannot produce the format yet
    # (`training.sft.SFTSettings`).
    sft: bool = True
    sft_max_steps: int = SFT_FIELDS.default("sft_max_steps")
    sft_learning_rate: float = SFT_FIELDS.default("sft_learning_rate")
    sft_batch_size: int = SFT_FIELDS.default("sft_batch_size")
    sft_max_length: int = SFT_FIELDS.default("sft_max_length")
    sft_use_lora: bool = SFT_FIELDS.default("sft_use_lora")
    # Warm up on these families' references alone (None: every family's): a short warm-up spent on the formats the
    # policy can learn in it, rather than spread thin over all of them.
    sft_families: list[str] | None = None
    # Offline dynamic sampling: the starting policy samples k completions per task; always- and never-solved
    # tasks carry no GRPO signal (every group has zero reward variance) and are left out.
    difficulty_profile: bool = True
    difficulty_k: int = 8
    difficulty_max_new_tokens: int = 512
    difficulty_batch_size: int = 8  # completions per generate call
    difficulty_temperature: float = 1.0  # sample as GRPO will (its `temperature`), or the profile misjudges signal
    # Profile at most this many training tasks per family, the easiest first (None: all); the others are
    # `not_profiled`, and join the GRPO set unless `grpo_unprofiled` is False (then GRPO trains on the profile's
    # learnable tasks alone: a small budget of steps spent where the rewards vary).
    difficulty_max_per_family: int | None = None
    grpo_unprofiled: bool = True
    # `episodes`: the starting policy plays the profile's multi-turn episode tasks (its k, length, temperature,
    # batch and per-family cap; the profile reads their verdicts), each at most this many turns (None: each task's
    # own limit).
    # GRPO's episode rollouts take the same cap (its `max_episode_turns`).
    episode_max_turns: int | None = None
    # GRPO: "auto" picks CPU settings without a GPU and vLLM (colocate) on one; "cpu" or "none" as in grpo_job.
    runtime: Runtime = GRPO_JOB_FIELDS.default("runtime")
    grpo: dict[str, Any] = Field(default_factory=dict)

    def model(self) -> str:
        """The base model, converting the bundled one first when none is configured."""
        return self.base_model or str(bundled_model(self.models_dir))

    def start_model(self, base: str, registry: Callable[[], PromotionRegistry]) -> str:
        """The model this run's training starts from (`start_from`): `base` (the resolved `model()`), or the
        promoted one. The promotion record is opened only for "promoted": an object-store root without a database
        has none, and trains from the base all the same."""
        return registry().baseline(base) if self.start_from == "promoted" else base

    def audit_policy(self) -> RewardAuditPolicy:
        return AUDIT_FIELDS.build(self)

    def sft_settings(self) -> SFTSettings:
        return SFT_FIELDS.build(self)

    def episode_sampling(self) -> str:
        """How `episodes` plays (one turn's length, the temperature, the turn cap), as one string: each row it
        writes carries it, and `difficulty_profile` profiles only with episodes played as it would sample."""
        played = {
            "max_new_tokens": self.difficulty_max_new_tokens,
            "temperature": self.difficulty_temperature,
            "max_turns": self.episode_max_turns,
        }
        return ", ".join(f"{key}={value}" for key, value in played.items())


# The salt of the gate's eval sample: one fixed sample of task ids, independent of the split's salt.
GATE_SAMPLE_SALT = "gate-sample-v1"


class PromotionGate(dg.ConfigurableResource):
    """How a checkpoint is evaluated against the baseline, and what it must show to be promoted."""

    samples: int = 4  # completions per eval task and model (pass@1 is their mean; pass@k for k = samples)
    max_new_tokens: int = 512
    temperature: float = 1.0
    seed: int = 0
    # Evaluate a uniform sample of at most this many eval tasks, chosen by a hash of each task id
    # (`curation.splits.hash_sample`), never by any model's answers. None: every eval task.
    max_tasks: int | None = None
    batch_size: int = 8  # completions generated together (a task's samples share one batch)
    # `episode` eval tasks are played turn by turn (`training.episodes`), each at most this many turns. None: each
    # task's own limit, the task as defined; a lower cap is cheaper and changes what passing means, for both models.
    episode_max_turns: int | None = None
    # The promotion rules (`training.promotion.PromotionPolicy`).
    min_improvement: float = PROMOTION_FIELDS.default("min_improvement")
    max_family_regression: float = PROMOTION_FIELDS.default("max_family_regression")
    family_rule: FamilyRule = PROMOTION_FIELDS.default("family_rule")
    min_tasks: int = PROMOTION_FIELDS.default("min_tasks")
    min_family_tasks: int = PROMOTION_FIELDS.default("min_family_tasks")
    # The promotion record without a database (the next run's baseline is its current model); with one, its
    # table (`StorageRoot.state()`).
    registry_path: str

    def policy(self) -> PromotionPolicy:
        return PROMOTION_FIELDS.build(self)

    def registry(self, store: StateStore) -> PromotionRegistry:
        """The promotion record: the file at `registry_path`, or the table in `store`'s database."""
        return PromotionRegistry(self.registry_path, store)

    def play(self, model_dir: str, tasks: list[dict[str, Any]], context: VerifyContext) -> SampledVerdicts:
        """One model's `samples` completions of each task (an episode task's, played turn by turn), scored."""
        return play_and_score(
            model_dir,
            tasks,
            k=self.samples,
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            seed=self.seed,
            batch_size=self.batch_size,
            max_turns=self.episode_max_turns,
            context=context,
        )

    def eval_tasks(self, eval_tasks: pd.DataFrame, failure_eval: pd.DataFrame) -> list[dict[str, Any]]:
        """The eval tasks `checkpoint_eval` scores, as task records in split order: a uniform sample of
        `max_tasks` (`curation.splits.hash_sample`), and every held-out production failure on top."""
        tasks = records_from_frame(eval_tasks[list(TASK_FIELDS)])
        failure_ids = set(failure_eval["task_id"])
        chosen = set(hash_sample(tasks, self.max_tasks, GATE_SAMPLE_SALT))
        return [task for i, task in enumerate(tasks) if i in chosen or task["task_id"] in failure_ids]
