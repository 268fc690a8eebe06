"""The folders a storage root holds beside the asset tables, for as long as the root lives."""

SPLITS_FOLDER = "splits"  # the split ledger: every lineage root's side, append-only (curation.split_ledger)
DEDUP_INDEX_FOLDER = "dedup_index"  # the accepted tasks of earlier runs, one folder per MinHash config
CHECKPOINTS_FOLDER = "checkpoints"  # one manifest per trained checkpoint (curation.manifests)
TRAINING_FOLDER = "training"  # a run folder per trained checkpoint, `training/<stage>/<digest>`, the model in it
# Under the temporary folder: read-only copies of checkpoints on an object store, by content (`model_dir`).
CHECKPOINT_CACHE_FOLDER = "seedwheel-checkpoints"
VALIDATION_CACHE_FOLDER = "validation_cache"  # verdicts by content (validators.tasks.verdict_key)
EXPORT_FOLDER = "export"  # the splits (and preference pairs) as Parquet + JSONL for TRL (training.export)
JUDGE_HISTORY_FOLDER = "judge_history"  # the judge's setup per asset: its model, prompt and rubric (judge.history)
GENERATION_CACHE_FOLDER = "generation_cache"  # programmatic outputs per parent (generators.programmatic.variants_key)
STEP_OUTPUTS_FOLDER = "steps"  # op outputs inside graph-backed assets, per run (`resources.storage`)
# Experiment tracking on a local root: MLflow's store (`tracking/mlflow/mlflow.db`, its artifacts beside it) and
# TensorBoard's event files (`tracking/tensorboard/<run>`), for `mlflow ui` and `tensorboard --logdir`.
TRACKING_FOLDER = "tracking"
