"""Resources: configured once (from `Settings` or the UI's launchpad), read from `self`, never from the environment."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import dagster as dg
from pydantic import Field, PrivateAttr

from generators.llm import EndpointConfig, LLMCache, LLMClient
from generators.rewrite import REWRITE_KINDS
from training.serving import ModelServer
from training.tiny_model import build_quickstart_model, quickstart_model_dir, seed_texts
from validators.dedup import MinHashConfig
from validators.judge import AcceptanceRule, CalibrationFloors, TokenPrices
from validators.registry import VerifyContext
from validators.seeds import SeedSet, load_seeds
from validators.splits import SplitConfig


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

    def load(self) -> SeedSet:
        """Load and check every seed file; origins are shown relative to the seeds folder's parent."""
        if not self.folder.is_dir():
            raise FileNotFoundError(f"seeds folder {self.folder} does not exist: set SEEDWHEEL_SEEDS or `path`")
        return load_seeds([self.folder], root=self.folder.parent, context=self.verify_context())


class LLMEndpoint(dg.ConfigurableResource):
    """An OpenAI-compatible endpoint (OpenAI, vLLM, `transformers serve`) for generation and judging.

    With `base_url` empty, a local server is started on loopback the first time a step asks for a client, and
    stopped when the step ends (also on failure): `transformers serve` on CPU or `vllm serve` on GPU, serving
    `model` (a local directory or a model id), or, when `model` is empty too, a tiny random model built from
    the seed texts (the quickstart: offline, no weights to download). Every call is cached on disk under
    `cache_dir`, so a rerun makes only the calls whose inputs changed.
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
    local_backend: str = "transformers"
    cache_dir: str
    work_dir: str
    seeds_path: str

    _stack: ExitStack | None = PrivateAttr(default=None)
    _server: ModelServer | None = PrivateAttr(default=None)

    @contextmanager
    def yield_for_execution(self, context: dg.InitResourceContext) -> Iterator[LLMEndpoint]:
        with ExitStack() as stack:
            self._stack = stack
            try:
                yield self
            finally:
                self._stack = None
                self._server = None

    def client(self) -> LLMClient:
        """A client for this endpoint. Without a `base_url`, the local server starts only when a request misses
        the cache, so a fully cached rerun starts nothing."""
        if self.base_url:
            return LLMClient(self._config(self.base_url, self.model), self._cache())
        if self._stack is None:
            raise RuntimeError("LLMEndpoint.client() is only available while a step runs")
        model = self.model or str(quickstart_model_dir(self._models_dir(), seed_texts(self.seeds_path)))
        # Any loopback URL: the cache keys a loopback endpoint without its port, and `connect` sets the real one.
        return LLMClient(self._config("http://127.0.0.1:1/v1", model), self._cache(), connect=self._start_server)

    def _config(self, base_url: str, model: str) -> EndpointConfig:
        return EndpointConfig(
            base_url=base_url,
            model=model,
            api_key_env=self.api_key_env,
            max_concurrency=self.max_concurrency,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            max_calls=self.max_calls,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )

    def _cache(self) -> LLMCache:
        return LLMCache(self.cache_dir)

    def _models_dir(self) -> Path:
        return Path(self.work_dir) / "models"

    def _start_server(self) -> str:
        if self._server is None:
            model = self.model or str(build_quickstart_model(self._models_dir(), self.seeds_path))
            server = ModelServer(model, log_dir=Path(self.work_dir) / "logs", backend=self.local_backend)  # type: ignore[arg-type]
            self._server = self._stack.enter_context(server)  # type: ignore[union-attr]
        return self._server.base_url


class VariantPlan(dg.ConfigurableResource):
    """How many variants to make of each seed, and with which generators (the profile sets the defaults)."""

    per_seed: int = 3
    random_seed: int = 0
    families: list[str] | None = None
    rewrite_kinds: list[str] = Field(default_factory=lambda: ["paraphrase"])
    rewrites_per_kind: int = 1

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
    split_salt: str = "seedwheel-split-v1"
    stratify_by: list[str] = Field(default_factory=lambda: ["family"])

    def minhash_config(self) -> MinHashConfig:
        return MinHashConfig(
            shingle_size=self.shingle_size, num_perm=self.num_perm, threshold=self.threshold, seed=self.minhash_seed
        )

    def split_config(self) -> SplitConfig:
        return SplitConfig(eval_fraction=self.eval_fraction, salt=self.split_salt, stratify_by=tuple(self.stratify_by))


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
