"""The tracking resource: where a root's runs are tracked, and the switch that turns it off."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from resources import ExperimentTracking, experiment_tracking
from tests.paths import REPO
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


@pytest.mark.parametrize(("variable", "sends"), [(None, False), ("false", True)])
def test_mlflow_sends_no_telemetry_unless_the_user_asks(variable: str | None, sends: bool) -> None:
    # MLflow decides at import: a fresh process, without the CI variables that would turn it off by themselves.
    script = (
        "from training.tracking import _mlflow; _mlflow(); "
        "from mlflow.telemetry.client import get_telemetry_client; print(get_telemetry_client() is not None)"
    )
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR", "VIRTUAL_ENV") if k in os.environ}
    if variable is not None:
        env["MLFLOW_DISABLE_TELEMETRY"] = variable
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(sends)
