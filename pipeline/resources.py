"""Resources: configured once (from `Settings` or the UI's launchpad), read from `self`, never from the environment."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

import dagster as dg
import pandas as pd
from pydantic import Field, PrivateAttr
from upath import UPath

from curation.dedup import MinHashConfig
from curation.splits import SplitConfig
from generators.rewrite import REWRITE_KINDS
from judge import AcceptanceRule, CalibrationFloors, TokenPrices
from llm import LOCAL_PLACEHOLDER_URL, Endpoint, EndpointConfig, LLMClient
from llm.models import bundled_model, bundled_model_dir
from llm.serving import Backend, ModelServer
from pipeline.storage import is_local
from training.promotion import PromotionPolicy, PromotionRegistry
from training.reward_audit import RewardAuditPolicy
from validators.cache_store import CacheStore
from validators.registry import VerifyContext
from validators.seeds import SeedSet, load_seeds
from validators.tasks import TASK_FIELDS

# Side state kept under the storage root, beside the asset tables, for as long as the root lives.
SPLITS_FOLDER = "splits"  # the split ledger: every lineage root's side, append-only (curation.split_ledger)
CHECKPOINTS_FOLDER = "checkpoints"  # one manifest per trained checkpoint (curation.manifests)
VALIDATION_CACHE_FOLDER = "validation_cache"  # verdicts by content (validators.tasks.verdict_key)
GENERATION_CACHE_FOLDER = "generation_cache"  # programmatic outputs per parent (generators.programmatic.variants_key)


class StorageRoot(dg.ConfigurableResource):
    """The storage root, for the data assets keep beside their tables (indexes, exports, caches)."""

    root: str

    def path(self, *parts: str) -> Path:
        return Path(self.root, *parts)


class SeedRepository(dg.ConfigurableResource):
    """The curated seed sets under version control: `<path>/<family>/*.jsonl|yaml`."""

    path: str

    @property
    def folder(self) -> Path:
        return Path(self.path)

    def verify_context(self) -> VerifyContext:
        """Verifier fixture paths (SQLite files) in seeds resolve against the seeds folder."""
        return VerifyContext(seeds_dir=self.folder)

    def load(self, cache: CacheStore | None = None) -> SeedSet:
        """Load and check every seed file (an unchanged seed's verdict comes from `cache`, when given); origins
        are shown relative to the seeds folder's parent."""
        if not self.folder.is_dir():
            raise FileNotFoundError(f"seeds folder {self.folder} does not exist: set SEEDWHEEL_SEEDS or `path`")
        return load_seeds([self.folder], root=self.folder.parent, context=self.verify_context(), cache=cache)


class LLMEndpoint(dg.ConfigurableResource):
    """An OpenAI-compatible endpoint (OpenAI, vLLM, `seedwheel serve`) for generation and judging.

    With `base_url` empty, a local server is started on loopback the first time a step asks for a client, and
    stopped when the step ends (also on failure): `seedwheel serve` on CPU or `vllm serve` on GPU, serving
    `model` (a local directory or a model id), or, when `model` is empty too, the bundled SmolLM2-135M-Instruct
    converted under `models_dir` (the quickstart: offline, no weights to download). Every call is cached on disk
    under `cache_dir`, so a rerun makes only the calls whose inputs changed.
    """

    base_url: str = ""
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    max_concurrency: int = 8
    timeout_s: float = 60.0
    max_retries: int = 4
    max_calls: int | None = None
    temperature: float = 0.7
    max_tokens: int = 256
    local_backend: Backend = "seedwheel"
    # torch threads of a local `seedwheel serve`; 1 when other work shares the cores (two spin against each other).
    local_threads: int = 1
    cache_dir: str
    models_dir: str  # where the bundled model is converted when `model` is empty
    log_dir: str  # the local server's logs

    _endpoint: Endpoint | None = PrivateAttr(default=None)

    @contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext) -> Iterator[LLMEndpoint]:
        with self.endpoint() as endpoint:
            self._endpoint = endpoint
            try:
                yield self
            finally:
                self._endpoint = None

    def client(self) -> LLMClient:
        """A client for this endpoint. Without a `base_url`, the local server starts only when a request misses
        the cache, so a fully cached rerun starts nothing."""
        if self._endpoint is None:
            raise RuntimeError(
                "LLMEndpoint.client() is only available while a step runs; outside Dagster use "
                "`with llm.endpoint() as endpoint: endpoint.client()`"
            )
        return self._endpoint.client()

    def endpoint(self) -> Endpoint:
        """This endpoint as a plain `llm.Endpoint` (no Dagster), e.g. for `seedwheel judge`."""
        model = self.model
        if not model and not self.base_url:  # the bundled model, named before it is converted
            model = str(bundled_model_dir(self.models_dir))
        config = EndpointConfig(
            base_url=self.base_url or LOCAL_PLACEHOLDER_URL,
            model=model,
            api_key_env=self.api_key_env,
            max_concurrency=self.max_concurrency,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            max_calls=self.max_calls,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )
        return Endpoint(config, cache_dir=self.cache_dir, local_server=None if self.base_url else self._local_server)

    @contextmanager
    def _local_server(self) -> Iterator[str]:
        model = self.model or str(bundled_model(self.models_dir))
        threads = ["--threads", str(self.local_threads)] if self.local_backend == "seedwheel" else []
        with ModelServer(model, log_dir=self.log_dir, backend=self.local_backend, extra_args=threads) as server:
            yield server.base_url


class VariantPlan(dg.ConfigurableResource):
    """How many variants to make of each seed, and with which generators (the profile sets the defaults)."""

    per_seed: int = 3
    random_seed: int = 0
    families: list[str] | None = None
    rewrite_kinds: list[str] = Field(default_factory=lambda: ["paraphrase"])
    rewrites_per_kind: int = 1
    # Rewrite at most this many parents per family (None: all), the easiest first: caps the LLM calls.
    rewrite_max_per_family: int | None = None

    def check(self, known_families: set[str]) -> None:
        """Fail before any work or LLM call when the plan cannot work, with the fix in the message."""
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
    # MinHash near-dedup; the defaults are measured (README, bench/measure_dedup_recall.py). Changing any of
    # them names a new persisted index, so the old one is never matched with incompatible signatures.
    shingle_size: int = 3
    num_perm: int = 128
    threshold: float = 0.5
    minhash_seed: int = 1
    eval_fraction: float = 0.2
    failure_eval_fraction: float = 0.5  # of production failures no seed explains: held out for the gate's line
    split_salt: str = "seedwheel-split-v1"
    stratify_by: list[str] = Field(default_factory=lambda: ["family"])
    # Where the LSH band tables live: empty keeps them in memory (recomputed from the stored signatures); a
    # redis:// URL shares them between workers (README, "Scaling out"); needs the `redis` extra.
    lsh_redis_url: str = ""

    def minhash_config(self) -> MinHashConfig:
        return MinHashConfig(
            shingle_size=self.shingle_size, num_perm=self.num_perm, threshold=self.threshold, seed=self.minhash_seed
        )

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
        return SplitConfig(
            eval_fraction=self.eval_fraction,
            failure_eval_fraction=self.failure_eval_fraction,
            salt=self.split_salt,
            stratify_by=tuple(self.stratify_by),
        )


class JudgePolicy(dg.ConfigurableResource):
    """How the LLM judge runs and how much its labels count (the profile sets the defaults)."""

    # Which judged tasks the splits keep: "accepted" (production) or "all" (the quickstart, whose random tiny
    # model can only produce judge_error or noise: its labels are shown, not used).
    use_labels: str = "accepted"
    # Judge at most this many tasks per family (None: all); the others are labelled `not_judged`.
    max_per_family: int | None = None
    min_reference_correctness: int = 4
    calibration_samples: int = 3  # judgments per audit item, for self-consistency
    # Audit items per family (half accept, half reject where the set has both); None: the whole audit set.
    calibration_per_family: int | None = None
    calibration_temperature: float = 0.7
    min_kappa: float = 0.6
    min_accuracy: float = 0.8
    max_false_accept: float = 0.15
    max_judge_error: float = 0.05
    price_in_per_1k: float = 0.0
    price_out_per_1k: float = 0.0

    def kept(self, judged: pd.DataFrame) -> pd.DataFrame:
        """The judged tasks the splits keep (by `use_labels`), as plain task records."""
        if self.use_labels not in ("accepted", "all"):
            raise ValueError(f"JudgePolicy.use_labels is {self.use_labels!r}: use 'accepted' or 'all'")
        chosen = judged[judged["judge_verdict"] == "accept"] if self.use_labels == "accepted" else judged
        return chosen[list(TASK_FIELDS)]

    def rule(self) -> AcceptanceRule:
        return AcceptanceRule({"reference_correctness": self.min_reference_correctness})

    def floors(self) -> CalibrationFloors:
        return CalibrationFloors(
            min_kappa=self.min_kappa,
            min_accuracy=self.min_accuracy,
            max_false_accept=self.max_false_accept,
            max_judge_error=self.max_judge_error,
        )

    def prices(self) -> TokenPrices:
        return TokenPrices(self.price_in_per_1k, self.price_out_per_1k)


class TrainingPolicy(dg.ConfigurableResource):
    """What the training stage does: the base model, the reward, and which optional stages run (profile defaults).

    `grpo` takes any `SeedwheelGRPOConfig` field (every `trl.GRPOConfig` field included: `loss_type`,
    `epsilon_high`, `importance_sampling_level`, `beta`, `num_generations`, `max_steps`, `use_vllm`, ...); it is
    passed to the training job as is, so the config in the UI's launchpad is the config the trainer sees.
    """

    # A model directory or hub id; empty: the bundled SmolLM2-135M-Instruct (the quickstart, offline).
    base_model: str = ""
    models_dir: str  # where the bundled model is converted
    reward_weights: dict[str, float] = Field(default_factory=lambda: {"*": 1.0})
    # The reward audit (blocking): floors on agreement with the labelled audit set, and the probes' ceiling.
    audit_min_agreement: float = 0.9
    audit_max_false_accept: float = 0.05
    audit_max_false_reject: float = 0.1
    audit_max_probe_score: float = 0.1
    # SFT warm-up on the training tasks' references, for a policy that cannot produce the format yet.
    sft: bool = True
    sft_max_steps: int = 200
    sft_learning_rate: float = 2e-5
    sft_batch_size: int = 8
    sft_max_length: int = 2048
    sft_use_lora: bool = False
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
    # GRPO: "auto" picks CPU settings without a GPU and vLLM (colocate) on one; "cpu" or "none" as in grpo_job.
    runtime: str = "auto"
    grpo: dict[str, Any] = Field(default_factory=dict)

    def model(self) -> str:
        """The base model, converting the bundled one first when none is configured."""
        return self.base_model or str(bundled_model(self.models_dir))

    def audit_policy(self) -> RewardAuditPolicy:
        return RewardAuditPolicy(
            min_agreement=self.audit_min_agreement,
            max_false_accept_rate=self.audit_max_false_accept,
            max_false_reject_rate=self.audit_max_false_reject,
            max_probe_score=self.audit_max_probe_score,
        )


class PromotionGate(dg.ConfigurableResource):
    """How a checkpoint is evaluated against the baseline, and what it must show to be promoted."""

    samples: int = 4  # completions per eval task and model (pass@1 is their mean; pass@k for k = samples)
    max_new_tokens: int = 512
    temperature: float = 1.0
    seed: int = 0
    max_per_family: int | None = None  # evaluate at most this many eval tasks per family (None: all)
    batch_size: int = 8  # completions generated together (a task's samples share one batch)
    min_improvement: float = 0.0
    max_family_regression: float = 0.05
    family_rule: str = "mean"
    min_tasks: int = 20
    min_family_tasks: int = 5
    registry_path: str  # the promotion record: the next run's baseline is its current model

    def policy(self) -> PromotionPolicy:
        return PromotionPolicy(
            min_improvement=self.min_improvement,
            max_family_regression=self.max_family_regression,
            family_rule=self.family_rule,  # type: ignore[arg-type]  (checked by PromotionPolicy)
            min_tasks=self.min_tasks,
            min_family_tasks=self.min_family_tasks,
        )

    def registry(self) -> PromotionRegistry:
        return PromotionRegistry(self.registry_path)


class FailureInbox(dg.ConfigurableResource):
    """Where production failure logs arrive (`*.jsonl`): a local folder, or any fsspec URL (`s3://bucket/inbox`).

    A raw log leaves the inbox once its redacted records are stored (`retire`): deleted, or moved under
    `quarantine` when one is set (`SEEDWHEEL_FAILURE_QUARANTINE`, a folder or URL outside the project's folders).
    """

    path: str
    quarantine: str = ""  # empty: delete raw logs once redacted

    def _folder(self) -> UPath:
        return UPath(self.path)

    def files(self) -> list[tuple[str, str]]:
        """`(file name, "size:mtime")` of every log in the inbox, by name; the stamp changes when a file does."""
        folder = self._folder()
        if not folder.exists():
            return []
        return [(entry.name, _stamp(entry)) for entry in sorted(folder.glob("*.jsonl"), key=lambda p: p.name)]

    def stamp(self, name: str) -> str:
        """One log's `"size:mtime"`, as `files` gives it."""
        return _stamp(self._log(name))

    def open(self, name: str) -> IO[bytes]:
        """One log, opened for reading in binary (an iterable of lines: long lines are not read whole into memory,
        non-UTF-8 bytes reach the parser, which rejects those lines with their number)."""
        return self._log(name).open("rb")

    def retire(self, name: str, stamp: str, run_id: str) -> str | None:
        """Take a log whose redacted records are stored out of the inbox: delete it, or move it to
        `<quarantine>/<run_id>/<name>`.

        Returns:
            What became of it (`deleted`, or `moved to <path>`); None when its stamp is no longer `stamp` (it grew
            or was replaced since it was read): it is left for the run its new stamp gets from the sensor.
        """
        log = self._log(name)
        if _stamp(log) != stamp:
            return None
        if not self.quarantine:
            log.unlink()
            return "deleted"
        target = UPath(self.quarantine) / run_id / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if is_local(log) and is_local(target):
            shutil.move(log.path, target.path)  # a rename on one file system
        else:
            with log.open("rb") as source, target.open("wb") as copy:
                shutil.copyfileobj(source, copy)
            log.unlink()
        return f"moved to {target}"

    def _log(self, name: str) -> UPath:
        path = self._folder() / name
        if not path.exists():
            raise FileNotFoundError(
                f"failure log {path} is not in the inbox: put it there, or `seedwheel failures ingest` it. A log "
                "leaves the inbox once its redacted records are stored (deleted, or moved to "
                "SEEDWHEEL_FAILURE_QUARANTINE), so its failure_logs partition already holds them"
            )
        return path


def _stamp(path: UPath) -> str:
    stat = path.stat()
    return f"{stat.st_size}:{int(stat.st_mtime)}"
