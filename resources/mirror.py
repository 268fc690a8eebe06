"""Resource fields that stand for fields of a library config class: each default is written once, in the library."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from curation.dedup import MinHashConfig
from curation.splits import SplitConfig
from curation.validation_shards import ShardConfig
from judge import AcceptanceRule, CalibrationFloors, TokenPrices
from langmodels import EndpointConfig
from training.grpo_job import GRPOJobConfig
from training.promotion import PromotionPolicy
from training.reward_audit import RewardAuditPolicy
from training.sft import SFTSettings
from training.tracking import TrackingConfig

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

L = TypeVar("L", bound="DataclassInstance")


@dataclasses.dataclass(frozen=True)
class Mirror(Generic[L]):
    """Resource fields that stand for fields of a library config class: `{resource field: library field}`.

    The library class is each setting's one home: a mirrored field's default is read from it (`default`), and
    the library object is built from a resource's values (`build`). A library field that does not exist fails at
    import (its default is read then); `tests/resources/test_mirror.py` checks every pair.

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
TRACKING_FIELDS = Mirror(TrackingConfig, _same("mlflow_uri", "tensorboard_dir", "experiment"))
# The judge's acceptance rule is a mapping of minimums, not a flat field: its one mirrored minimum.
DEFAULT_MIN_REFERENCE_CORRECTNESS: int = AcceptanceRule().minimum("reference_correctness")
