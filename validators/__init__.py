"""Task schema, verifiers (= rewards), dedup, judge and splits. Pure Python: no Dagster here."""

from validators.registry import Completion, Verdict, Verifier, VerifyContext, register, verify

__all__ = ["Completion", "Verdict", "Verifier", "VerifyContext", "register", "verify"]
