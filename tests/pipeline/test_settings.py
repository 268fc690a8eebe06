"""Settings: one switch read once, CLI flags over environment over defaults."""

from pathlib import Path

import pytest

from core.database import DatabaseUnavailable
from pipeline.settings import Settings


@pytest.mark.parametrize(
    ("environ", "overrides", "expected"),
    [
        # Defaults: storage in ./.seedwheel, the Dagster instance beside it.
        ({}, {}, ("quickstart", ".seedwheel", ".seedwheel-dagster")),
        # The environment moves both.
        (
            {"SEEDWHEEL_HOME": "/data/sw", "SEEDWHEEL_PROFILE": "production"},
            {},
            ("production", "/data/sw", "/data/sw-dagster"),
        ),
        # DAGSTER_HOME is respected when set.
        ({"DAGSTER_HOME": "/dh"}, {}, ("quickstart", ".seedwheel", "/dh")),
        # A flag beats the environment; None means the flag was not given.
        ({"SEEDWHEEL_HOME": "/data/sw"}, {"home": "/flag", "profile": None}, ("quickstart", "/flag", "/flag-dagster")),
    ],
)
def test_precedence(environ, overrides, expected):
    settings = Settings.from_env(environ, **overrides)
    profile, home, dagster_home = expected
    assert settings.profile == profile
    assert settings.home == Path(home).resolve()
    assert settings.dagster_home == Path(dagster_home).resolve()


def test_models_live_in_the_user_cache_shared_by_every_storage_root(monkeypatch, tmp_path):
    """The bundled model is converted once per machine, not once per checkout or storage root."""
    monkeypatch.setattr(Path, "home", lambda: tmp_path / "me")
    roots = [Settings.from_env({}, home=tmp_path / name) for name in ("a", "b")]
    assert {s.models_dir for s in roots} == {tmp_path / "me" / ".cache" / "seedwheel" / "models"}
    xdg = Settings.from_env({"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert xdg.models_dir == tmp_path / "xdg" / "seedwheel" / "models"
    given = Settings.from_env({"XDG_CACHE_HOME": "/x", "SEEDWHEEL_MODELS_DIR": str(tmp_path / "m")})
    assert given.models_dir == tmp_path / "m"


def test_unknown_profile_names_the_choices():
    with pytest.raises(ValueError, match="unknown profile 'prod': use one of quickstart, production"):
        Settings.from_env({"SEEDWHEEL_PROFILE": "prod"})


@pytest.mark.parametrize("retrain_growth", [None, 0.2])
def test_environ_round_trips(retrain_growth):
    environ = {} if retrain_growth is None else {"SEEDWHEEL_RETRAIN_GROWTH": str(retrain_growth)}
    settings = Settings.from_env(environ, home="/x", profile="production")
    assert settings.retrain_growth == retrain_growth
    assert Settings.from_env(settings.environ()) == settings


@pytest.mark.parametrize("value", ["0", "-0.1", "20%", "nan"])
def test_a_retrain_growth_that_is_no_fraction_above_zero_is_refused(value):
    with pytest.raises(
        ValueError, match=rf"SEEDWHEEL_RETRAIN_GROWTH='{value}' must be a fraction above 0, e\.g\. 0\.2"
    ):
        Settings.from_env({"SEEDWHEEL_RETRAIN_GROWTH": value})


@pytest.mark.parametrize(
    ("quarantine", "variable"),
    [
        ("home/raw", "SEEDWHEEL_HOME"),
        ("home", "SEEDWHEEL_HOME"),
        ("home-dagster/raw", "DAGSTER_HOME"),
        ("home-inbox/done", "SEEDWHEEL_FAILURE_INBOX"),
        ("models/raw", "SEEDWHEEL_MODELS_DIR"),
        ("seeds/raw", "SEEDWHEEL_SEEDS"),  # under version control
    ],
)
def test_a_quarantine_inside_a_folder_the_project_keeps_is_refused(tmp_path, quarantine, variable):
    environ = {
        "SEEDWHEEL_FAILURE_QUARANTINE": str(tmp_path / quarantine),
        "SEEDWHEEL_MODELS_DIR": str(tmp_path / "models"),
    }
    with pytest.raises(ValueError, match=rf"SEEDWHEEL_FAILURE_QUARANTINE=.* is inside {variable} .*leave it empty"):
        Settings.from_env(environ, home=tmp_path / "home", seeds_dir=tmp_path / "seeds")


def test_the_quarantine_is_empty_by_default_and_round_trips(tmp_path):
    assert Settings.from_env({}).failure_quarantine == ""  # raw logs are deleted once redacted
    settings = Settings.from_env({"SEEDWHEEL_FAILURE_QUARANTINE": str(tmp_path / "q" / "..") + "/raw"}, home="/x")
    assert settings.failure_quarantine == str(tmp_path / "raw")
    assert Settings.from_env(settings.environ()) == settings


@pytest.mark.parametrize("broker", ["redis:///0", "amqp://guest@rabbit//", "127.0.0.1:6379"])
def test_a_broker_that_is_no_redis_url_with_a_host_is_refused(broker):
    with pytest.raises(ValueError, match=r"SEEDWHEEL_CELERY_BROKER=.*redis://host:6379/0"):
        Settings.from_env({"SEEDWHEEL_CELERY_BROKER": broker})


def test_a_database_url_without_a_host_names_the_variable_not_the_password():
    with pytest.raises(DatabaseUnavailable, match="SEEDWHEEL_DATABASE_URL") as caught:
        Settings.from_env({"SEEDWHEEL_DATABASE_URL": "postgresql://sw:hunter2@/seedwheel"})
    assert "hunter2" not in str(caught.value)


def test_the_database_and_the_broker_reach_child_processes():
    environ = {"SEEDWHEEL_DATABASE_URL": "postgresql://sw:pw@db/sw", "SEEDWHEEL_CELERY_BROKER": "redis://r:6379/1"}
    settings = Settings.from_env(environ)
    assert (settings.database_url, settings.celery_broker) == ("postgresql://sw:pw@db/sw", "redis://r:6379/1")
    assert Settings.from_env(settings.environ()) == settings


@pytest.mark.parametrize(
    ("environ", "tracking", "uri"),
    [
        ({}, True, ""),  # on by default: a SQLite store under a local root (resources.tracking)
        ({"SEEDWHEEL_TRACKING": "off"}, False, ""),
        ({"SEEDWHEEL_TRACKING": "0", "MLFLOW_TRACKING_URI": "http://mlflow:5000"}, False, "http://mlflow:5000"),
        ({"MLFLOW_TRACKING_URI": " http://mlflow:5000 "}, True, "http://mlflow:5000"),  # a tracking server
    ],
)
def test_tracking_is_a_switch_and_mlflows_own_variable(environ, tracking, uri):
    settings = Settings.from_env(environ)
    assert (settings.tracking, settings.mlflow_tracking_uri) == (tracking, uri)
    assert Settings.from_env(settings.environ()) == settings


def test_a_tracking_switch_that_is_no_switch_is_refused():
    with pytest.raises(ValueError, match=r"SEEDWHEEL_TRACKING='maybe' is not a switch: set it to on or off"):
        Settings.from_env({"SEEDWHEEL_TRACKING": "maybe"})
