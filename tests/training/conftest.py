"""Test-only verifiers for the GRPO runs, registered in a copy of the registry for one test."""

from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from validators.registry import REGISTRY, Completion, Verdict, Verifier, VerifyContext


class DigitShare(Verifier):
    """Test-only: the share of digits in the completion, so random text gets rewards that differ within a group."""

    name = "test_digit_share"
    version = 1

    def check(self, params: Mapping[str, Any], completion: Completion, context: VerifyContext) -> Verdict:
        text = completion.text.strip()
        return Verdict(score=sum(c.isdigit() for c in text) / max(1, len(text)), passed=True, reason="ok")


class Exploding(Verifier):
    """Test-only: a broken verifier that raises on every completion."""

    name = "test_exploding"
    version = 1
    params_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    def check(self, params: Mapping[str, Any], completion: Completion, context: VerifyContext) -> Verdict:
        raise RuntimeError("deliberately broken verifier")


@pytest.fixture
def test_verifiers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register the test-only verifiers in a copy of the registry, dropped after the test."""
    REGISTRY.names()  # load the built-ins first, so the copy holds them
    monkeypatch.setattr(REGISTRY, "_verifiers", dict(REGISTRY._verifiers))
    REGISTRY.register(DigitShare)
    REGISTRY.register(Exploding)
