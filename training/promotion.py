"""The promotion gate: promote a candidate checkpoint only when held-out evaluation says it is better.

`decide(comparison, policy)` reads a paired comparison (`training.stats.compare`, candidate minus
baseline pass@1 on the same eval tasks) and applies three rules, all of which must hold:

1. **enough tasks**: at least `policy.min_tasks` paired tasks, else nothing can be concluded;
2. **better overall**: the lower bound of the overall difference's confidence interval exceeds
   `policy.min_improvement` (default 0: the interval must exclude "no change"). A mean that is higher but
   whose interval reaches 0 is noise as far as the gate is concerned;
3. **no family regresses**: no family's mean difference is below `-policy.max_family_regression`;
4. **one split**: both models were trained under the same split epoch (`curation.split_ledger`). After a
   re-split the eval sets of the two epochs differ, so a checkpoint of the new epoch is never compared with (and
   never replaces) one of the old; a model with no manifest (the base model) has no epoch and always compares.

Rule 3 uses the family's *mean* by default (`family_rule="mean"`), not its interval. That is the stricter
choice: the alternative (`family_rule="ci"`, block only when the whole interval lies below the tolerance) needs
evidence of harm, and small families never produce it (their intervals are wide), so a checkpoint that
improves arithmetic while quietly breaking a 20-task SQL family would pass. The gate puts the burden of proof
on the candidate: it must show it is better overall and must not *look* worse anywhere. Families smaller
than `min_family_tasks` are reported but do not block (a 3-task family's mean is mostly noise).

`PromotionRegistry` records what was promoted, so the next run's baseline is the current promoted checkpoint
(`current()` is None before the first promotion: the base model is the baseline): in a small JSON file, or, with
the production database (`SEEDWHEEL_DATABASE_URL`, through a `core.state.StateStore`), in its table `promotions`,
one row per promotion, which a cluster's workers share without a shared file system.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypedDict

import pandas as pd

from core import SeedwheelError
from core.state import StateStore
from core.tables import atomic_write
from training.gate_eval import FailureReport
from training.stats import Comparison, PairedDifference

REGISTRY_FORMAT = 1
LOCK_NAME = "promotion_registry"  # the run-level lock's name in the database (core.state)
# The registry's table in the database: one row per promotion, `seq` 1, 2, ... in the order they were made.
SCHEMA = """
CREATE TABLE IF NOT EXISTS promotions (
    seq INTEGER PRIMARY KEY,
    model TEXT NOT NULL,
    promoted_at TEXT NOT NULL,
    run_id TEXT,
    baseline TEXT,
    numbers TEXT NOT NULL
);
"""
# How a family's regression is judged: by its mean difference, or only by its whole confidence interval.
FamilyRule = Literal["mean", "ci"]


class PromotionPolicyError(SeedwheelError, ValueError):
    """A promotion policy with impossible values; the message gives the value and the fix."""


class PromotionRegistryError(SeedwheelError, ValueError):
    """A promotion registry file that cannot be read; the message names the file and the fix."""


@dataclass(frozen=True)
class PromotionPolicy:
    """The thresholds of the promotion gate (see the module docstring for the rules).

    Args:
        min_improvement: the overall paired difference's CI lower bound must exceed this (in pass@1 points,
            e.g. 0.02 asks for at least +2 points with confidence). In [0, 1).
        max_family_regression: tolerance for a family getting worse, >= 0 (0.05 = five points).
        family_rule: `mean` (block when a family's mean difference < -tolerance; stricter, the default) or
            `ci` (block only when its CI upper bound < -tolerance, i.e. a regression shown with confidence).
        min_tasks: paired tasks the comparison needs before anything is promoted.
        min_family_tasks: families with fewer tasks are reported but never block.

    Example:
        >>> PromotionPolicy(min_improvement=0.02).max_family_regression
        0.05
    """

    min_improvement: float = 0.0
    max_family_regression: float = 0.05
    family_rule: FamilyRule = "mean"
    min_tasks: int = 20
    min_family_tasks: int = 5

    def __post_init__(self) -> None:
        if not (math.isfinite(self.min_improvement) and 0.0 <= self.min_improvement < 1.0):
            raise PromotionPolicyError(
                f"min_improvement ({self.min_improvement}) must be in [0, 1): it is a pass@1 difference; "
                "0 asks only that the interval exclude no change"
            )
        if not (math.isfinite(self.max_family_regression) and 0.0 <= self.max_family_regression < 1.0):
            raise PromotionPolicyError(
                f"max_family_regression ({self.max_family_regression}) must be in [0, 1), e.g. 0.05 for five points"
            )
        if self.family_rule not in ("mean", "ci"):
            raise PromotionPolicyError(f"family_rule ({self.family_rule!r}) must be 'mean' or 'ci'")
        for name in ("min_tasks", "min_family_tasks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PromotionPolicyError(f"{name} ({value!r}) must be a positive integer")


@dataclass(frozen=True)
class PromotionDecision:
    """Whether to promote, why (one readable line per rule checked), and the numbers behind it."""

    promote: bool
    reasons: list[str]
    numbers: dict[str, float | int]

    @property
    def verdict(self) -> str:
        """The decision in two words: `promoted` or `kept baseline`."""
        return "promoted" if self.promote else "kept baseline"


class PromotionRecord(TypedDict):
    """The gate's record of one decision (the `promotion` table's row)."""

    decision: str  # `PromotionDecision.verdict`
    candidate: str
    baseline: str
    reasons: list[str]
    numbers: dict[str, float | int]
    failure_eval: FailureReport  # reported apart, not a gate rule


def _family_regressed(paired: PairedDifference, policy: PromotionPolicy) -> bool:
    if policy.family_rule == "ci":
        return paired.difference.high < -policy.max_family_regression
    return paired.difference.value < -policy.max_family_regression


def decide(
    comparison: Comparison,
    policy: PromotionPolicy | None = None,
    *,
    split_epochs: Mapping[str, int | None] | None = None,
    models: Mapping[str, str] | None = None,
) -> PromotionDecision:
    """Apply the promotion rules to a paired comparison.

    Args:
        comparison: candidate vs baseline (`training.stats.compare`).
        policy: the thresholds; the defaults when None.
        split_epochs: `{"baseline": epoch, "candidate": epoch}`, the split epoch each was trained under (None:
            not a trained checkpoint, e.g. the base model); rule 4.
        models: `{"baseline": model, "candidate": model}`; a candidate that is the baseline itself (a run that
            trained nothing new, every step reused) is never promoted, and the reasons say so first.

    Returns:
        A `PromotionDecision`. `reasons` has one line per rule, passing ones too, e.g.
        `overall +0.12 [0.05, 0.19] > 0.00: better` or
        `family sql regressed -0.20 [-0.35, -0.05] beyond tolerance 0.05`; `numbers` is the comparison's flat
        metadata plus the policy.

    Example:
        >>> from training.stats import compare
        >>> verdicts = {f"t{i}": [True] for i in range(30)}
        >>> families = dict.fromkeys(verdicts, "sql")
        >>> decide(compare(verdicts, dict.fromkeys(verdicts, [False]), families)).promote
        True
    """
    policy = policy or PromotionPolicy()
    reasons: list[str] = []
    blocked = False
    if models is not None and models["candidate"] == models["baseline"]:
        blocked = True
        reasons.append(
            f"the candidate is the baseline itself ({models['candidate']}): this run trained nothing new, its "
            "training data and recipe being those of the run that made the baseline, so every step was reused"
        )

    if comparison.tasks < policy.min_tasks:
        blocked = True
        reasons.append(f"only {comparison.tasks} paired tasks < min_tasks {policy.min_tasks}: too few to judge")
    else:
        reasons.append(f"{comparison.tasks} paired tasks >= min_tasks {policy.min_tasks}: enough")

    overall = comparison.overall.difference
    if overall.low > policy.min_improvement:
        reasons.append(f"overall {overall.signed()} > {policy.min_improvement:.2f}: better")
    else:
        blocked = True
        reasons.append(
            f"overall {overall.signed()}: lower bound {overall.low:.2f} does not exceed "
            f"{policy.min_improvement:.2f}, not shown to be better"
        )

    tolerance = policy.max_family_regression
    for family, paired in comparison.families.items():
        diff = paired.difference
        if not _family_regressed(paired, policy):
            reasons.append(f"family {family} {diff.signed()} within tolerance {tolerance:.2f}")
        elif paired.tasks < policy.min_family_tasks:
            reasons.append(
                f"family {family} {diff.signed()} below tolerance {tolerance:.2f} but only {paired.tasks} tasks "
                f"< min_family_tasks {policy.min_family_tasks}: not blocking"
            )
        else:
            blocked = True
            reasons.append(f"family {family} regressed {diff.signed()} beyond tolerance {tolerance:.2f}")

    epochs = dict(split_epochs or {})
    baseline_epoch, candidate_epoch = epochs.get("baseline"), epochs.get("candidate")
    if None not in (baseline_epoch, candidate_epoch) and baseline_epoch != candidate_epoch:
        blocked = True
        reasons.append(
            f"baseline trained under split epoch {baseline_epoch}, candidate under {candidate_epoch}: a re-split "
            "lies between them, their eval sets differ, so they are not compared "
            "(docs/curation.md, 'Splits across nights')"
        )

    numbers: dict[str, float | int] = dict(comparison.as_metadata())
    numbers.update(
        {
            "policy/min_improvement": policy.min_improvement,
            "policy/max_family_regression": policy.max_family_regression,
            "policy/min_tasks": policy.min_tasks,
            "policy/min_family_tasks": policy.min_family_tasks,
            "confidence": comparison.confidence,
            "resamples": comparison.resamples,
        }
    )
    return PromotionDecision(promote=not blocked, reasons=reasons, numbers=numbers)


def decision_line(promoted: bool, candidate: str, baseline: str) -> str:
    """The gate's decision in words: which model serves now, and which one it was weighed against.

    Example:
        >>> decision_line(False, "grpo/run7", "sft/run6")
        'kept the baseline sft/run6: the candidate grpo/run7 did not pass the gate'
        >>> decision_line(True, "grpo/run8", "sft/run6")
        'promoted the candidate grpo/run8: it replaces the baseline sft/run6'
    """
    if promoted:
        return f"promoted the candidate {candidate}: it replaces the baseline {baseline}"
    return f"kept the baseline {baseline}: the candidate {candidate} did not pass the gate"


def promotion_record(
    decision: PromotionDecision, models: Mapping[str, str], failures: FailureReport
) -> PromotionRecord:
    """The record of `decision` on `models` (role -> model), with the failure report beside it.

    Example:
        >>> decision = PromotionDecision(promote=False, reasons=["too few"], numbers={})
        >>> failures = {"tasks": 0, "fixed": [], "broken": [], "summary": "none"}
        >>> promotion_record(decision, {"candidate": "grpo/run7", "baseline": "base"}, failures)["decision"]
        'kept baseline'
    """
    return {
        "decision": decision.verdict,
        "candidate": models["candidate"],
        "baseline": models["baseline"],
        "reasons": decision.reasons,
        "numbers": decision.numbers,
        "failure_eval": failures,
    }


def compared_models(checkpoint: pd.DataFrame, registry: PromotionRegistry) -> dict[str, str]:
    """The two models the gate weighs, by role: the candidate, the checkpoint a training step made, and the
    baseline, the promoted model (`registry`) or, before any promotion, the base model the candidate started from.

    Args:
        checkpoint: the training step's table (`grpo_checkpoint`): its first row's `checkpoint` and `base_model`.
        registry: the promotion record.
    """
    return {
        "baseline": registry.baseline(str(checkpoint.loc[0, "base_model"])),
        "candidate": str(checkpoint.loc[0, "checkpoint"]),
    }


@dataclass(frozen=True)
class PromotedModel:
    """One promotion: which checkpoint, when (UTC, ISO 8601), by which run, what it replaced, its eval numbers."""

    model: str
    promoted_at: str
    run_id: str | None = None
    baseline: str | None = None
    numbers: dict[str, Any] = field(default_factory=dict)


class PromotionRegistry:
    """The promoted checkpoint and the history of promotions: one small JSON file, or a table in the database.

    File format: `{"format": 1, "current": {model, promoted_at, run_id, baseline, numbers} | null,
    "history": [...]}`, oldest promotion first (the last entry is `current`). Writes are atomic (a temporary
    file renamed into place), so a killed run leaves the previous record intact. In the database, the table
    `promotions` holds the history, one row per promotion (`numbers` as the same JSON), and each promotion is one
    transaction. Either way a promotion reads, appends and writes under the run-level lock `promotion_registry`
    (`core.state`), so promotions made at once all land in one chain.

    Args:
        path: the JSON file when there is no database; it need not exist yet.
        store: where shared records live and how runs take turns (`core.state.StateStore`); with a database, its
            table holds the record instead of `path`. None: the file, as `StateStore()`.

    Raises:
        core.database.DatabaseUnavailable: the store's database cannot be reached.

    Example:
        >>> registry = PromotionRegistry(tmp / "promoted.json")  # doctest: +SKIP
        >>> registry.baseline("Qwen/Qwen2.5-0.5B-Instruct")  # doctest: +SKIP
        'Qwen/Qwen2.5-0.5B-Instruct'
        >>> registry.promote("ckpt/run-7", run_id="run-7", numbers={"difference": 0.12})  # doctest: +SKIP
        >>> registry.baseline("Qwen/Qwen2.5-0.5B-Instruct")  # doctest: +SKIP
        'ckpt/run-7'
    """

    def __init__(self, path: str | os.PathLike[str], store: StateStore | None = None) -> None:
        self.path = Path(path)
        self.store = store or StateStore()
        self._storage: _RegistryFile | _RegistryTable = (
            _RegistryTable(self.store) if self.store.in_database else _RegistryFile(self.path)
        )

    @staticmethod
    def _entry(raw: Mapping[str, Any]) -> PromotedModel:
        return PromotedModel(
            model=raw["model"],
            promoted_at=raw["promoted_at"],
            run_id=raw.get("run_id"),
            baseline=raw.get("baseline"),
            numbers=dict(raw.get("numbers") or {}),
        )

    def current(self) -> PromotedModel | None:
        """The promoted checkpoint, or None when nothing was promoted yet (the base model is the baseline)."""
        raw = self._storage.read()["current"]
        return None if raw is None else self._entry(raw)

    def history(self) -> list[PromotedModel]:
        """Every promotion, oldest first."""
        return [self._entry(raw) for raw in self._storage.read()["history"]]

    def baseline(self, base_model: str) -> str:
        """What the next candidate is compared with: the promoted checkpoint, else `base_model`."""
        current = self.current()
        return base_model if current is None else current.model

    def promote(
        self,
        model: str | os.PathLike[str],
        *,
        run_id: str | None = None,
        numbers: Mapping[str, Any] | None = None,
        when: datetime | None = None,
    ) -> PromotedModel:
        """Record `model` as the promoted checkpoint (the previous one stays in the history).

        Args:
            model: the checkpoint's path or id, as the next run should load it.
            run_id: the run that trained or evaluated it (e.g. the Dagster run id).
            numbers: the evaluation numbers that justified it (e.g. `PromotionDecision.numbers`).
            when: the promotion time; now (UTC) when None.

        Returns:
            The new `PromotedModel` entry.
        """
        # Read, append, write under the lock: two runs promoting at once both land in the history.
        with self.store.lock(LOCK_NAME, self.path.with_name(f".{self.path.name}.lock")):
            data = self._storage.read()
            previous = data["current"]
            entry = PromotedModel(
                model=str(model),
                promoted_at=(when or datetime.now(UTC)).isoformat(),
                run_id=run_id,
                baseline=None if previous is None else previous["model"],
                numbers=dict(numbers or {}),
            )
            self._storage.append(asdict(entry), data["history"])
        return entry


class _RegistryFile:
    """The registry as one JSON file, replaced whole on each promotion."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, Any]:
        if not self.path.exists():
            return {"format": REGISTRY_FORMAT, "current": None, "history": []}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PromotionRegistryError(
                f"{self.path}: cannot read the promotion record ({exc}); restore it from backup or delete it to "
                "start again from the base model"
            ) from exc
        if not isinstance(data, dict) or data.get("format") != REGISTRY_FORMAT or "history" not in data:
            raise PromotionRegistryError(
                f"{self.path}: not a promotion record of format {REGISTRY_FORMAT}; point the registry at its own file"
            )
        return data

    def append(self, record: dict[str, Any], history: list[dict[str, Any]]) -> None:
        """Write the record with `record` promoted after `history` (the promotions before it)."""
        data = {"format": REGISTRY_FORMAT, "current": record, "history": [*history, record]}
        with atomic_write(self.path, "w") as handle:
            # allow_nan=False: NaN is not JSON; a NaN in the numbers is a bug to surface here, not in a reader.
            handle.write(json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n")


class _RegistryTable:
    """The registry as the table `promotions` (`SCHEMA`) in the store's database, one row per promotion."""

    what = "the promotion registry"

    def __init__(self, store: StateStore) -> None:
        self.store = store
        store.create_tables(SCHEMA, self.what)

    def read(self) -> dict[str, Any]:
        """The same shape as the file's record: `{"format", "current", "history"}`."""
        with self.store.transaction(self.what) as cursor:
            cursor.execute("SELECT model, promoted_at, run_id, baseline, numbers FROM promotions ORDER BY seq")
            history = [
                {"model": m, "promoted_at": at, "run_id": run, "baseline": base, "numbers": json.loads(numbers)}
                for m, at, run, base, numbers in cursor.fetchall()
            ]
        return {"format": REGISTRY_FORMAT, "current": history[-1] if history else None, "history": history}

    def append(self, record: dict[str, Any], history: list[dict[str, Any]]) -> None:
        """Insert `record` as the promotion after `history`, in one transaction (the key refuses a second row in
        the same place, should a writer ever skip the lock)."""
        # allow_nan=False, as in the file: NaN is not JSON.
        numbers = json.dumps(record["numbers"], sort_keys=True, allow_nan=False)
        with self.store.transaction(self.what) as cursor:
            cursor.execute(
                "INSERT INTO promotions (seq, model, promoted_at, run_id, baseline, numbers) "
                "VALUES (%s, %s, %s, %s, %s, %s)",
                (
                    len(history) + 1,
                    record["model"],
                    record["promoted_at"],
                    record["run_id"],
                    record["baseline"],
                    numbers,
                ),
            )
