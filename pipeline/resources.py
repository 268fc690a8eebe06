"""Resources: configured once (from `Settings` or the UI's launchpad), read from `self`, never from the environment.

A resource field that stands for a field of a library config class (`RewardAuditPolicy`, `PromotionPolicy`,
`MinHashConfig`, `SplitConfig`, `CalibrationFloors`, `TokenPrices`, `EndpointConfig`, `GRPOJobConfig`,
`SFTSettings`) takes its default from that class through a `Mirror`, and the resource builds the library object from
its fields with the same `Mirror`: each default is written once, in the library. The fields stay plain typed fields,
so the launchpad shows and checks them; a choice is a `Literal`, which the launchpad offers as a list.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Generic, Literal, TypeVar
from urllib.parse import urlparse

import dagster as dg
import pandas as pd
from pydantic import Field, PrivateAttr
from upath import UPath

from core.database import DATABASE_URL_ENV, database_url
from core.errors import SeedwheelError
from core.folders import committed_folders, is_remote, modified, read_only_copy, working_copy
from core.shards import shard_count
from core.state import StateStore
from curation.dedup import DedupIndex, MinHashConfig
from curation.shards import ShardConfig
from curation.split_ledger import SplitLedger
from curation.splits import SplitConfig, hash_sample
from generators.rewrite import REWRITE_KINDS
from judge import AcceptanceRule, CalibrationFloors, TokenPrices
from llm import LOCAL_PLACEHOLDER_URL, Endpoint, EndpointConfig, LLMClient
from llm.models import bundled_model, bundled_model_dir
from llm.serving import Backend, ModelServer
from pipeline.storage import STEP_OUTPUTS_FOLDER, is_local
from training.grpo_job import GRPOJobConfig, Runtime
from training.promotion import FamilyRule, PromotionPolicy, PromotionRegistry
from training.reward_audit import RewardAuditPolicy
from training.sft import SFTSettings
from validators.cache_store import CacheStore
from validators.registry import VerifyContext
from validators.seeds import SeedSet, load_seeds
from validators.tables import records_from_frame
from validators.tasks import TASK_FIELDS

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# Side state kept under the storage root, beside the asset tables, for as long as the root lives.
SPLITS_FOLDER = "splits"  # the split ledger: every lineage root's side, append-only (curation.split_ledger)
DEDUP_INDEX_FOLDER = "dedup_index"  # the accepted tasks of earlier runs, one folder per MinHash config
CHECKPOINTS_FOLDER = "checkpoints"  # one manifest per trained checkpoint (curation.manifests)
TRAINING_FOLDER = "training"  # a run folder per trained checkpoint, `training/<stage>/<digest>`, the model in it
# Under the temporary folder: read-only copies of checkpoints on an object store, by content (`model_dir`).
CHECKPOINT_CACHE_FOLDER = "seedwheel-checkpoints"
VALIDATION_CACHE_FOLDER = "validation_cache"  # verdicts by content (validators.tasks.verdict_key)
EXPORT_FOLDER = "export"  # the splits (and preference pairs) as Parquet + JSONL for TRL (validators.export)
JUDGE_HISTORY_FOLDER = "judge_history"  # the judge's setup per asset: its model, prompt and rubric (judge.history)
GENERATION_CACHE_FOLDER = "generation_cache"  # programmatic outputs per parent (generators.programmatic.variants_key)

# Which judged tasks the splits keep: the judge's accepted ones, or all of them (labels shown, not used).
LabelUse = Literal["accepted", "all"]

L = TypeVar("L", bound="DataclassInstance")


@dataclasses.dataclass(frozen=True)
class Mirror(Generic[L]):
    """Resource fields that stand for fields of a library config class: `{resource field: library field}`.

    The library class is each setting's one home: a mirrored field's default is read from it (`default`), and
    the library object is built from a resource's values (`build`). A library field that does not exist fails at
    import (its default is read then); `tests/pipeline/test_resource_defaults.py` checks every pair.

    Example:
        >>> Mirror(PromotionPolicy, {"family_rule": "family_rule"}).default("family_rule")
        'mean'
    """

    library: type[L]
    fields: Mapping[str, str]

    def default(self, name: str) -> Any:
        """The library's default of the field that resource field `name` mirrors."""
        spec = {f.name: f for f in dataclasses.fields(self.library)}[self.fields[name]]
        if spec.default is not dataclasses.MISSING:
            return spec.default
        if spec.default_factory is not dataclasses.MISSING:
            return spec.default_factory()
        raise TypeError(f"{self.library.__name__}.{spec.name} has no default for {name!r} to mirror")

    def build(self, resource: Any, **extra: Any) -> L:
        """The library object from `resource`'s mirrored fields, plus `extra` library fields."""
        return self.library(**{field: getattr(resource, name) for name, field in self.fields.items()}, **extra)


def _same(*names: str) -> dict[str, str]:
    """Mirrored fields named as in the library."""
    return {name: name for name in names}


ENDPOINT_FIELDS = Mirror(
    EndpointConfig,
    _same("api_key_env", "max_concurrency", "timeout_s", "max_retries", "max_calls", "temperature", "max_tokens"),
)
MINHASH_FIELDS = Mirror(
    MinHashConfig,
    {"shingle_size": "shingle_size", "num_perm": "num_perm", "threshold": "threshold", "minhash_seed": "seed"},
)
SPLIT_FIELDS = Mirror(
    SplitConfig,
    {
        "eval_fraction": "eval_fraction",
        "failure_eval_fraction": "failure_eval_fraction",
        "split_salt": "salt",
        "stratify_by": "stratify_by",
    },
)
SHARD_FIELDS = Mirror(ShardConfig, {"validation_shards": "shards", "validation_threads": "threads"})
FLOOR_FIELDS = Mirror(CalibrationFloors, _same("min_kappa", "min_accuracy", "max_false_accept", "max_judge_error"))
PRICE_FIELDS = Mirror(TokenPrices, {"price_in_per_1k": "input_per_1k", "price_out_per_1k": "output_per_1k"})
AUDIT_FIELDS = Mirror(
    RewardAuditPolicy,
    {
        "audit_min_agreement": "min_agreement",
        "audit_max_false_accept": "max_false_accept_rate",
        "audit_max_false_reject": "max_false_reject_rate",
        "audit_max_probe_score": "max_probe_score",
    },
)
GRPO_JOB_FIELDS = Mirror(GRPOJobConfig, {"runtime": "runtime"})
SFT_FIELDS = Mirror(
    SFTSettings,
    {
        "sft_max_steps": "max_steps",
        "sft_learning_rate": "learning_rate",
        "sft_batch_size": "batch_size",
        "sft_max_length": "max_length",
        "sft_use_lora": "use_lora",
    },
)
PROMOTION_FIELDS = Mirror(
    PromotionPolicy,
    _same("min_improvement", "max_family_regression", "family_rule", "min_tasks", "min_family_tasks"),
)
# The judge's acceptance rule is a mapping of minimums, not a flat field: its one mirrored minimum.
DEFAULT_MIN_REFERENCE_CORRECTNESS: int = AcceptanceRule().minimum("reference_correctness")


class StorageError(SeedwheelError, ValueError):
    """The storage root cannot hold what a step asks of it (an object store without the database)."""


class StorageRoot(dg.ConfigurableResource):
    """The storage root, for the data assets keep beside their tables (indexes, exports, caches, training runs):
    the table storage's root (`pipeline.storage.TableStorage`), a local folder or an object-store URL
    (`s3://bucket/prefix`).

    Side-state folders and training run folders are read and written through `folder()`: the folder itself when
    local, a working copy committed back by manifest on an object store (`core.folders`). A checkpoint is named by
    its `location()`, a path or a URL, and loaded through `model_dir()`.
    """

    root: str
    # The production database (core.database): when the variable is set, the split ledger, the promotion record
    # and the run-level locks live there (`state()`); its URL holds a password, so only the name is configuration.
    database_url_env: str = DATABASE_URL_ENV

    @property
    def remote(self) -> bool:
        """Whether the root is an object store."""
        return is_remote(self.root)

    def folder(self, *parts: str) -> AbstractContextManager[Path]:
        """The folder `<root>/<parts>` as a local folder for the block: itself on a local root; on an object store
        a working copy, committed (by manifest) when the block succeeds (`core.folders`)."""
        return working_copy(self.location(*parts))

    @contextmanager
    def cache(self, *parts: str) -> Iterator[CacheStore]:
        """The content-keyed cache in folder `<root>/<parts>` (`validators.cache_store`), through `folder()`."""
        with self.folder(*parts) as folder:
            yield CacheStore.open(folder)

    def location(self, *parts: str) -> str:
        """Where `<root>/<parts>` is, as a person reads it: a path, or a URL on an object store."""
        if self.remote:
            return "/".join([self.root.rstrip("/"), *parts])
        return str(Path(self.root, *parts))

    def model_dir(self, checkpoint: str) -> str:
        """A model to load `checkpoint` from: a local directory or hub id as it is; a checkpoint on an object store
        (a URL inside a committed run folder) as a read-only local copy under `<temp dir>/seedwheel-checkpoints/`,
        downloaded once per content and reused by every later caller on the machine (`core.folders`)."""
        if not is_remote(checkpoint):
            return checkpoint
        return str(read_only_copy(checkpoint, Path(tempfile.gettempdir(), CHECKPOINT_CACHE_FOLDER)))

    def state(self) -> StateStore:
        """Where the records overlapping runs share live and how they take turns (`core.state`): the database the
        variable names when it is set (read now, never at import), else files under the root and `flock`.

        Raises:
            StorageError: the root is an object store and no database is set (it has no locks to take turns by).
        """
        store = StateStore.from_env(variable=self.database_url_env)
        if self.remote and not store.in_database:
            raise StorageError(
                f"the storage root {self.root} is an object store, which cannot hold the split ledger, the promotion "
                "record or run-level locks",
                hint=f"set {self.database_url_env}=postgresql://user:password@host/db (they live there then)",
            )
        return store

    def split_ledger(self) -> SplitLedger:
        """The split ledger: `<root>/splits/`, or its tables in the database (`state()`)."""
        store = self.state()  # on an object store always the database, whose tables leave the folder unused
        return SplitLedger(Path(self.root, SPLITS_FOLDER), store)

    def remove_step_outputs(self, run_id: str, graph: str) -> None:
        """Delete the outputs the ops of graph-backed asset `graph` stored in run `run_id`, once the asset's own
        tables are stored: they are that run's scratch, and would otherwise pile up night after night. A run
        that fails before keeps them, for a re-execution from the failed step."""
        prefix = f"{graph}."  # step keys are `<graph>.<op>` or `<graph>.<op>[<mapping key>]`
        if self.remote:  # objects, no folders: delete the step outputs' files
            run = UPath(self.location(STEP_OUTPUTS_FOLDER, run_id))
            files = [f for f in run.fs.find(run.path) if f[len(run.path) :].lstrip("/").startswith(prefix)]
            if files:
                run.fs.rm(files)
            return
        folder = Path(self.location(STEP_OUTPUTS_FOLDER, run_id))
        for step in folder.glob(f"{prefix}*"):
            shutil.rmtree(step)
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()

    def prune(self, *, keep: int = 2, min_age_s: float = 86_400.0, now: float | None = None) -> list[dict[str, Any]]:
        """Delete the root's garbage once it is older than `min_age_s`, and say what went.

        - On an object store, each committed folder's superseded manifests (all but the newest `keep`) and the
          objects no remaining manifest names: uploads of killed commits, files of old generations
          (`core.folders.RemoteFolder.prune`, which says why the age makes it safe).
        - On either kind of root, the step outputs of runs that failed before their merge (`steps/<run id>/`,
          kept until then for a re-execution from the failed step).

        Returns:
            A row per place that had garbage: `what` (its location), `manifests`, `objects` (files), `bytes`.
        """
        now = time.time() if now is None else now
        rows = []
        if self.remote:
            for folder in committed_folders(self.root):
                pruned = folder.prune(keep=keep, min_age_s=min_age_s, now=now)
                if pruned.manifests or pruned.objects:
                    rows.append({"what": folder.url, **asdict(pruned)})
        steps = UPath(self.location(STEP_OUTPUTS_FOLDER))
        runs: dict[str, list[dict[str, Any]]] = {}
        for name, info in (steps.fs.find(steps.path, detail=True) if steps.exists() else {}).items():
            runs.setdefault(name[len(steps.path) :].lstrip("/").split("/", 1)[0], []).append(info)
        for run, files in sorted(runs.items()):
            if now - max(modified(info) for info in files) >= min_age_s:
                steps.fs.rm(str(steps / run), recursive=True)
                size = sum(int(info["size"]) for info in files)
                rows.append(
                    {
                        "what": self.location(STEP_OUTPUTS_FOLDER, run),
                        "manifests": 0,
                        "objects": len(files),
                        "bytes": size,
                    }
                )
        return rows


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
    converted under `models_dir` (the quickstart: offline, no weights to download). Every call is cached, so a
    rerun makes only the calls whose inputs changed: under `cache_dir` (SQLite, one machine), or, when the variable
    `cache_url_env` names is set, in the PostgreSQL database at its `postgresql://` URL, which a cluster's workers
    share (the URL holds a password, so only the variable's name is configuration).
    """

    base_url: str = ""
    model: str = ""
    # `llm.EndpointConfig`'s fields, with its defaults (each profile sets the generation params it samples with).
    api_key_env: str = ENDPOINT_FIELDS.default("api_key_env")
    max_concurrency: int = ENDPOINT_FIELDS.default("max_concurrency")
    timeout_s: float = ENDPOINT_FIELDS.default("timeout_s")
    max_retries: int = ENDPOINT_FIELDS.default("max_retries")
    max_calls: int | None = ENDPOINT_FIELDS.default("max_calls")
    temperature: float = ENDPOINT_FIELDS.default("temperature")
    max_tokens: int = ENDPOINT_FIELDS.default("max_tokens")
    local_backend: Backend = "seedwheel"
    # torch threads of a local `seedwheel serve`; 1 when other work shares the cores (two spin against each other).
    local_threads: int = 1
    cache_dir: str
    cache_url_env: str = DATABASE_URL_ENV  # the production database (core.database)
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
        config = ENDPOINT_FIELDS.build(self, base_url=self.base_url or LOCAL_PLACEHOLDER_URL, model=model)
        cache = database_url(variable=self.cache_url_env) or self.cache_dir
        return Endpoint(config, cache=cache, local_server=None if self.base_url else self._local_server)

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
    # Validation in shards (`curation.shards.ShardConfig`): `validated_tasks` checks each hash range of task ids
    # in its own step, so an executor with N workers runs it about N times faster; threads per step (None: one
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

    def eval_tasks(self, eval_tasks: pd.DataFrame, failure_eval: pd.DataFrame) -> list[dict[str, Any]]:
        """The eval tasks `checkpoint_eval` scores, as task records in split order: a uniform sample of
        `max_tasks` (`curation.splits.hash_sample`), and every held-out production failure on top."""
        tasks = records_from_frame(eval_tasks[list(TASK_FIELDS)])
        failure_ids = set(failure_eval["task_id"])
        chosen = set(hash_sample(tasks, self.max_tasks, GATE_SAMPLE_SALT))
        return [task for i, task in enumerate(tasks) if i in chosen or task["task_id"] in failure_ids]


# Every resource that mirrors a library config class, with its `Mirror` (tests/pipeline/test_resource_defaults.py).
MIRRORS: tuple[tuple[type[dg.ConfigurableResource], Mirror[Any]], ...] = (
    (LLMEndpoint, ENDPOINT_FIELDS),
    (CurationPolicy, MINHASH_FIELDS),
    (CurationPolicy, SPLIT_FIELDS),
    (CurationPolicy, SHARD_FIELDS),
    (JudgePolicy, FLOOR_FIELDS),
    (JudgePolicy, PRICE_FIELDS),
    (TrainingPolicy, AUDIT_FIELDS),
    (TrainingPolicy, GRPO_JOB_FIELDS),
    (TrainingPolicy, SFT_FIELDS),
    (PromotionGate, PROMOTION_FIELDS),
)


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

    def deliver(self, name: str, data: bytes) -> UPath:
        """Put a whole log into the inbox as `name`, as an app should: written beside it under a name the sensor
        ignores, then renamed in (one request on an object store), so no tick sees half a file."""
        folder = self._folder()
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / name
        if not is_local(target):
            target.fs.pipe_file(target.path, data)
            return target
        partial = folder / f".{name}.partial"
        partial.write_bytes(data)
        os.replace(partial.path, target.path)
        return target

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
