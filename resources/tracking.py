"""Experiment tracking: where SFT, GRPO and DPO report their curves, and the evaluation and the gate their results
(MLflow and TensorBoard, `training.tracking`), and the switch that turns it off."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from core.folders import is_remote
from resources.folders import TRACKING_FOLDER
from resources.mirror import TRACKING_FIELDS
from training.tracking import TrackingConfig, local_store_uri

MLFLOW_FOLDER = "mlflow"
TENSORBOARD_FOLDER = "tensorboard"


class ExperimentTracking(dg.ConfigurableResource):
    """Where training, evaluation and the gate are tracked: an MLflow tracking URI and a TensorBoard folder
    (`training.tracking.TrackingConfig`); `enabled=False` tracks nothing (the trainers get `report_to=[]`)."""

    # The switch, settable per run in the launchpad; `SEEDWHEEL_TRACKING=off` sets it for every run.
    enabled: bool = True
    mlflow_uri: str = TRACKING_FIELDS.default("mlflow_uri")
    tensorboard_dir: str = TRACKING_FIELDS.default("tensorboard_dir")
    experiment: str = TRACKING_FIELDS.default("experiment")

    def config(self) -> TrackingConfig | None:
        """The library's config, or None when tracking is off or has nowhere to go."""
        config = TRACKING_FIELDS.build(self)
        return config if self.enabled and config.enabled else None


def experiment_tracking(root: str, mlflow_uri: str, *, enabled: bool) -> ExperimentTracking:
    """The tracking resource of a storage root.

    Args:
        root: the storage root (a folder or an object-store URL).
        mlflow_uri: a tracking URI given by the user (`MLFLOW_TRACKING_URI`: a tracking server), or empty.
        enabled: the switch (`SEEDWHEEL_TRACKING`).

    Returns:
        On a local root: MLflow in a SQLite store at `<root>/tracking/mlflow/mlflow.db` (unless a URI is given) and
        TensorBoard under `<root>/tracking/tensorboard/`. On an object store, only a given URI: a SQLite file
        cannot live there, and one on the machine that ran a step would scatter a cluster's runs over its workers,
        so a team points `MLFLOW_TRACKING_URI` at a tracking server (which keeps its artifacts in its own store,
        e.g. the same bucket); without one nothing is tracked there. TensorBoard event files are written locally
        only, so on an object-store root the curves are MLflow's.

    Example:
        >>> experiment_tracking("/srv/sw", "", enabled=True).mlflow_uri
        'sqlite:////srv/sw/tracking/mlflow/mlflow.db'
        >>> experiment_tracking("s3://bucket/sw", "", enabled=True).config() is None
        True
    """
    if is_remote(root):
        return ExperimentTracking(enabled=enabled, mlflow_uri=mlflow_uri)
    folder = Path(root, TRACKING_FOLDER)
    return ExperimentTracking(
        enabled=enabled,
        mlflow_uri=mlflow_uri or local_store_uri(folder / MLFLOW_FOLDER),
        tensorboard_dir=str(folder / TENSORBOARD_FOLDER),
    )
