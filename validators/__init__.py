"""Task schema, the verifier registry (= rewards) and the sandbox untrusted code runs in. No Dagster here."""

from validators.registry import Completion, Verdict, Verifier, VerifyContext, register, verify

__all__ = ["Completion", "Verdict", "Verifier", "VerifyContext", "register", "verify"]
