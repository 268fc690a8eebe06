"""The tracking resource: where a root's runs are tracked, and the switch that turns it off."""

from pathlib import Path

import pytest

from resources import ExperimentTracking, experiment_tracking
from training.tracking import TrackingConfig, TrackingConfigError


def test_a_local_root_tracks_under_itself_unless_a_server_is_given(tmp_path: Path) -> None:
    local = experiment_tracking(str(tmp_path), "", enabled=True).config()
    assert local == TrackingConfig(
        mlflow_uri=f"sqlite:///{tmp_path}/tracking/mlflow/mlflow.db",
        tensorboard_dir=str(tmp_path / "tracking/tensorboard"),
    )
    served = experiment_tracking(str(tmp_path), "http://mlflow:5000", enabled=True).config()
    assert served is not None and served.mlflow_uri == "http://mlflow:5000"


def test_an_object_store_root_tracks_only_on_a_tracking_server() -> None:
    # A SQLite file cannot live in a bucket, and one per worker would scatter a cluster's runs.
    assert experiment_tracking("s3://bucket/sw", "", enabled=True).config() is None
    served = experiment_tracking("s3://bucket/sw", "http://mlflow:5000", enabled=True).config()
    assert served == TrackingConfig(mlflow_uri="http://mlflow:5000")  # no TensorBoard files on a bucket


def test_the_switch_turns_everything_off(tmp_path: Path) -> None:
    assert experiment_tracking(str(tmp_path), "", enabled=False).config() is None
    assert ExperimentTracking().config() is None  # nowhere to go


def test_a_tracking_uri_that_is_no_uri_names_the_fix() -> None:
    with pytest.raises(TrackingConfigError, match=r"mlflow_uri='mlruns' is not a URI; give sqlite:////abs/path"):
        ExperimentTracking(mlflow_uri="mlruns").config()
