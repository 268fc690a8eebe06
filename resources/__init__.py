"""Resources: configured once (from `Settings` or the UI's launchpad), read from `self`, never from the environment.

A resource field that stands for a field of a library config class (`RewardAuditPolicy`, `PromotionPolicy`,
`MinHashConfig`, `SplitConfig`, `CalibrationFloors`, `TokenPrices`, `EndpointConfig`, `GRPOJobConfig`,
`SFTSettings`) takes its default from that class through a `Mirror`, and the resource builds the library object from
its fields with the same `Mirror`: each default is written once, in the library. The fields stay plain typed fields,
so the launchpad shows and checks them; a choice is a `Literal`, which the launchpad offers as a list.
"""

from typing import Any

import dagster as dg

from resources.endpoint import LLMEndpoint
from resources.folders import (
    CHECKPOINT_CACHE_FOLDER,
    CHECKPOINTS_FOLDER,
    DEDUP_INDEX_FOLDER,
    EXPORT_FOLDER,
    GENERATION_CACHE_FOLDER,
    JUDGE_HISTORY_FOLDER,
    SPLITS_FOLDER,
    STEP_OUTPUTS_FOLDER,
    TRACKING_FOLDER,
    TRAINING_FOLDER,
    VALIDATION_CACHE_FOLDER,
)
from resources.inputs import FailureInbox, SeedRepository
from resources.mirror import (
    AUDIT_FIELDS,
    ENDPOINT_FIELDS,
    FLOOR_FIELDS,
    GRPO_JOB_FIELDS,
    MINHASH_FIELDS,
    PRICE_FIELDS,
    PROMOTION_FIELDS,
    SFT_FIELDS,
    SHARD_FIELDS,
    SPLIT_FIELDS,
    TRACKING_FIELDS,
    Mirror,
)
from resources.policies import (
    GATE_SAMPLE_SALT,
    CurationPolicy,
    JudgePolicy,
    PromotionGate,
    TrainingPolicy,
    VariantPlan,
)
from resources.storage import (
    ParquetTableIOManager,
    StorageError,
    StorageRoot,
    TableStorage,
    load_table,
    store_table,
)
from resources.tracking import ExperimentTracking, experiment_tracking

# Every resource that mirrors a library config class, with its `Mirror` (tests/resources/test_mirror.py).
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
    (ExperimentTracking, TRACKING_FIELDS),
)

__all__ = [
    "AUDIT_FIELDS",
    "CHECKPOINTS_FOLDER",
    "CHECKPOINT_CACHE_FOLDER",
    "DEDUP_INDEX_FOLDER",
    "ENDPOINT_FIELDS",
    "EXPORT_FOLDER",
    "FLOOR_FIELDS",
    "GATE_SAMPLE_SALT",
    "GENERATION_CACHE_FOLDER",
    "GRPO_JOB_FIELDS",
    "JUDGE_HISTORY_FOLDER",
    "MINHASH_FIELDS",
    "MIRRORS",
    "PRICE_FIELDS",
    "PROMOTION_FIELDS",
    "SFT_FIELDS",
    "SHARD_FIELDS",
    "SPLITS_FOLDER",
    "SPLIT_FIELDS",
    "STEP_OUTPUTS_FOLDER",
    "TRACKING_FIELDS",
    "TRACKING_FOLDER",
    "TRAINING_FOLDER",
    "VALIDATION_CACHE_FOLDER",
    "CurationPolicy",
    "ExperimentTracking",
    "FailureInbox",
    "JudgePolicy",
    "LLMEndpoint",
    "Mirror",
    "ParquetTableIOManager",
    "PromotionGate",
    "SeedRepository",
    "StorageError",
    "StorageRoot",
    "TableStorage",
    "TrainingPolicy",
    "VariantPlan",
    "experiment_tracking",
    "load_table",
    "store_table",
]
