"""The task contract (schema, records, seed files) and the verifier registry with its three uses: validation, the
GRPO reward, evaluation. Model-written code runs in `sandbox`, tables are read and written by `core.tables`, the
TRL export is `training.export`. No Dagster here."""

from validators.registry import Completion, Verdict, Verifier, VerifyContext, register, verify

__all__ = ["Completion", "Verdict", "Verifier", "VerifyContext", "register", "verify"]
