"""Evaluation assets: the candidate checkpoint against the baseline on held-out tasks, and the promotion gate.

The baseline is the promoted model (the promotion record's current entry), or the base model before any
promotion. Both are sampled on the same eval tasks with the same seed and scored by the same verifiers that
were the training reward (`episode` tasks played turn by turn in their environments, the others in one turn:
`training.episodes.play_and_score`); the gate reads the paired comparison (`training.promotion`).
"""

from typing import Any

import dagster as dg
import pandas as pd

from assets import groups
from assets.metadata import markdown_table, preview, tracking_metadata
from assets.plots import bar_chart
from curation.manifests import split_epochs
from resources import CHECKPOINTS_FOLDER, ExperimentTracking, PromotionGate, SeedRepository, StorageRoot
from training.evaluation import EvalTaskCounts, eval_task_counts
from training.gate_eval import (
    FAMILY_COLUMNS,
    EvalTable,
    FailureReport,
    eval_table,
    failure_report,
    paired_comparison,
    role_models,
    sample_roles,
)
from training.promotion import PromotionDecision, compared_models, decide, decision_line, promotion_record
from training.stats import Comparison
from training.tracking import log_evaluation, log_gate


@dg.asset(group_name=groups.EVALUATION)
def checkpoint_eval(
    context: dg.AssetExecutionContext,
    eval_tasks: pd.DataFrame,
    failure_eval: pd.DataFrame,
    grpo_checkpoint: pd.DataFrame,
    seeds: SeedRepository,
    gate: PromotionGate,
    storage: StorageRoot,
    tracking: ExperimentTracking,
) -> dg.MaterializeResult[pd.DataFrame]:
    """Baseline and candidate sampled on the eval tasks and scored by their verifiers: one row per completion (an
    episode task's: one per episode, played turn by turn).

    Every held-out production failure is evaluated, also when `max_tasks` samples the rest.
    """
    tasks = gate.eval_tasks(eval_tasks, failure_eval)
    if not tasks:
        raise ValueError("eval_tasks is empty: nothing to evaluate the checkpoint on; check the split's eval_fraction")
    failure_ids = set(failure_eval["task_id"])
    counts = eval_task_counts(tasks, failure_ids)
    models = compared_models(grpo_checkpoint, gate.registry(storage.state()))
    plan = f"{gate.samples} samples on each of {len(tasks)} eval tasks ({counts['episode_tasks']} episodes)"
    context.log.info(f"baseline {models['baseline']}, candidate {models['candidate']}: {plan}")
    verify = seeds.verify_context()
    sampled = sample_roles(models, lambda model: gate.play(storage.model_dir(model), tasks, verify), context.log.info)
    table = eval_table(sampled, models, failure_ids, samples=gate.samples, seed=gate.seed)
    # Into the MLflow run that trained the candidate (found by its checkpoint), beside its training curves.
    run = log_evaluation(tracking.config(), models["candidate"], models["baseline"], table)
    metadata = {**_eval_metadata(table, counts, models, gate), **tracking_metadata(run)}
    return dg.MaterializeResult(value=table.rows, metadata=metadata)


@dg.asset(group_name=groups.EVALUATION)
def promotion(
    context: dg.AssetExecutionContext,
    checkpoint_eval: pd.DataFrame,
    gate: PromotionGate,
    storage: StorageRoot,
    tracking: ExperimentTracking,
) -> dg.MaterializeResult[pd.DataFrame]:
    """The gate: promote the candidate only when it is better overall with confidence, no family regresses, and
    both models were trained under the same split epoch."""
    comparison = paired_comparison(checkpoint_eval, gate.seed)
    models = role_models(checkpoint_eval)
    with storage.folder(CHECKPOINTS_FOLDER) as folder:  # the manifests, not the weights
        epochs = split_epochs(folder, models)
    decision = decide(comparison, gate.policy(), split_epochs=epochs, models=models)
    registry = gate.registry(storage.state())
    if decision.promote:
        registry.promote(models["candidate"], run_id=context.run.run_id, numbers=decision.numbers)
    failures = failure_report(checkpoint_eval)
    context.log.info(f"promotion: {decision_line(decision.promote, models['candidate'], models['baseline'])}")
    for reason in [*decision.reasons, failures["summary"]]:
        context.log.info(f"promotion: {reason}")
    record = promotion_record(decision, models, failures)
    run = log_gate(tracking.config(), decision, comparison, record)  # the candidate's MLflow run
    metadata = {
        **_promotion_metadata(decision, comparison, models, failures),
        "split_epochs": dg.MetadataValue.json(epochs),
        "promoted_model": registry.baseline(models["baseline"]),
        "registry": dg.MetadataValue.path(str(registry.path)),
        **tracking_metadata(run),
    }
    return dg.MaterializeResult(value=pd.DataFrame([record]), metadata=metadata)


def _promotion_metadata(
    decision: PromotionDecision, comparison: Comparison, models: dict[str, str], failures: FailureReport
) -> dict[str, Any]:
    """The metadata of `promotion`: the decision, the overall difference with its interval, and why."""
    return {
        "decision": decision.verdict,
        "promoted": decision.promote,
        "candidate": models["candidate"],
        "baseline": models["baseline"],
        "difference": comparison.overall.difference.value,
        "difference_low": comparison.overall.difference.low,
        "difference_high": comparison.overall.difference.high,
        "reasons": dg.MetadataValue.md("\n".join(f"- {reason}" for reason in decision.reasons)),
        # Reported apart, not a gate rule: which held-out production failures the candidate now solves.
        "failure_eval": failures["summary"],
        "failures_fixed": dg.MetadataValue.json(failures["fixed"]),
        "failures_broken": dg.MetadataValue.json(failures["broken"]),
    }


def _eval_metadata(
    table: EvalTable, counts: EvalTaskCounts, models: dict[str, str], gate: PromotionGate
) -> dict[str, Any]:
    """The metadata of `checkpoint_eval`: what was evaluated, both models' pass@k, and where they differ."""
    difference = table.comparison.overall.difference
    return {
        **counts,
        "episode_max_turns": gate.episode_max_turns,  # None: each episode task's own turn limit
        "samples_per_task": gate.samples,
        "baseline_model": models["baseline"],
        "candidate_model": models["candidate"],
        **table.overall(),
        "difference": difference.value,
        "difference_low": difference.low,
        "difference_high": difference.high,
        "by_family": dg.MetadataValue.md(markdown_table(table.by_family(), FAMILY_COLUMNS)),
        "pass_at_1": bar_chart(table.pass_at_1(), title="pass@1 per family", xlabel="family", ylabel="pass@1"),
        "candidate_failures": preview(table.candidate_failures(), ("task_id", "family", "reason")),
    }
