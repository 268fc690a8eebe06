"""Fixtures for training tests: one tiny model per test session, built under pytest's temporary folders."""

from pathlib import Path

import pytest

from tests.training.tiny import TINY_SIZES, TINY_TEXTS
from training.tiny_model import build_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random chat model directory, built once per session (read-only for tests: copy before changing)."""
    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny", TINY_TEXTS, **TINY_SIZES, seed=0)
