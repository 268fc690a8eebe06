"""Evaluation assets: the candidate checkpoint against the baseline on held-out tasks, and the promotion gate.

The baseline is the promoted model (the promotion record's current entry), or the base model before any
promotion. Both are sampled on the same eval tasks with the same seed and scored by the same verifiers that
were the training reward (`episode` tasks played turn by turn in their environments, the others in one turn:
`training.episodes.play_and_score`); the gate reads the paired comparison (`training.promotion`).
"""

import dagster as dg
import pandas as pd

from assets import groups
from assets.metadata import markdown_table, preview
from assets.plots import bar_chart
from curation.manifests import find_manifest
from pipeline.resources import CHECKPOINTS_FOLDER, PromotionGate, SeedRepository, StorageRoot
from training.episodes import play_and_score
from training.eval_table import failure_report, paired_comparison
from training.evaluation import is_episode
from training.promotion import decide, decision_line
from training.stats import Comparison, EvalReport, evaluate

ROLES = ("baseline", "candidate")
# `end_reason` and `turns` (the messages) are an episode's; None for a single-turn task's completion.
EVAL_COLUMNS = (
    "role", "model", "task_id", "family", "failure_eval", "sample", "passed", "score", "reason", "completion",
    "end_reason", "turns",
)  # fmt: skip


@dg.asset(group_name=groups.EVALUATION)
def checkpoint_eval(
    context: dg.AssetExecutionContext,
    eval_tasks: pd.DataFrame,
    failure_eval: pd.DataFrame,
    grpo_checkpoint: pd.DataFrame,
    seeds: SeedRepository,
    gate: PromotionGate,
    storage: StorageRoot,
) -> dg.MaterializeResult[pd.DataFrame]:
    """Baseline and candidate sampled on the eval tasks and scored by their verifiers: one row per completion (an
    episode task's: one per episode, played turn by turn).

    Every held-out production failure is evaluated, also when `max_tasks` samples the rest.
    """
    tasks = gate.eval_tasks(eval_tasks, failure_eval)
    failure_ids = set(failure_eval["task_id"])
    if not tasks:
        raise ValueError("eval_tasks is empty: nothing to evaluate the checkpoint on; check the split's eval_fraction")
    models = {
        "baseline": gate.registry(storage.state()).baseline(str(grpo_checkpoint.loc[0, "base_model"])),
        "candidate": str(grpo_checkpoint.loc[0, "checkpoint"]),
    }
    episode_tasks = sum(is_episode(task) for task in tasks)
    frames, reports = [], {}
    for role, model in models.items():
        context.log.info(
            f"{role} {model}: {gate.samples} samples on each of {len(tasks)} eval tasks ({episode_tasks} episodes)"
        )
        sampled = play_and_score(
            storage.model_dir(model),
            tasks,
            k=gate.samples,
            max_new_tokens=gate.max_new_tokens,
            temperature=gate.temperature,
            seed=gate.seed,
            batch_size=gate.batch_size,
            max_turns=gate.episode_max_turns,
            context=seeds.verify_context(),
        )
        reports[role] = evaluate(sampled.passed, sampled.families, ks=sorted({1, gate.samples}), seed=gate.seed)
        frames.append(pd.DataFrame(sampled.rows).assign(role=role, model=model))
    rows = pd.concat(frames, ignore_index=True)
    rows = rows.assign(failure_eval=rows["task_id"].isin(failure_ids))[list(EVAL_COLUMNS)]
    comparison = paired_comparison(rows, gate.seed)
    return dg.MaterializeResult(
        value=rows,
        metadata={
            "tasks": len(tasks),
            "failure_eval_tasks": len(failure_ids & {t["task_id"] for t in tasks}),
            # Played turn by turn in their environments (at most `episode_max_turns` turns; None: each task's own).
            "episode_tasks": episode_tasks,
            "episode_max_turns": gate.episode_max_turns,
            "samples_per_task": gate.samples,
            "baseline_model": models["baseline"],
            "candidate_model": models["candidate"],
            **{f"{role}/{k}": v for role, report in reports.items() for k, v in _overall(report).items()},
            "difference": comparison.overall.difference.value,
            "difference_low": comparison.overall.difference.low,
            "difference_high": comparison.overall.difference.high,
            "by_family": _family_table(reports, comparison),
            "pass_at_1": bar_chart(
                {role: {f: m["pass@1"].value for f, m in reports[role].families.items()} for role in ROLES},
                title="pass@1 per family",
                xlabel="family",
                ylabel="pass@1",
            ),
            "candidate_failures": preview(
                rows[(rows["role"] == "candidate") & ~rows["passed"].astype(bool)], ("task_id", "family", "reason")
            ),
        },
    )


@dg.asset(group_name=groups.EVALUATION)
def promotion(
    context: dg.AssetExecutionContext, checkpoint_eval: pd.DataFrame, gate: PromotionGate, storage: StorageRoot
) -> dg.MaterializeResult[pd.DataFrame]:
    """The gate: promote the candidate only when it is better overall with confidence, no family regresses, and
    both models were trained under the same split epoch."""
    models = checkpoint_eval.groupby("role")["model"].first()
    comparison = paired_comparison(checkpoint_eval, gate.seed)
    with storage.folder(CHECKPOINTS_FOLDER) as folder:  # the manifests, not the weights
        manifests = {role: find_manifest(folder, models[role]) for role in ROLES}
    epochs = {role: None if m is None else m.split_epoch for role, m in manifests.items()}
    decision = decide(comparison, gate.policy(), split_epochs=epochs)
    registry = gate.registry(storage.state())
    if decision.promote:
        registry.promote(models["candidate"], run_id=context.run.run_id, numbers=decision.numbers)
    failures = failure_report(checkpoint_eval)
    verdict = "promoted" if decision.promote else "kept baseline"
    context.log.info(f"promotion: {decision_line(decision.promote, models['candidate'], models['baseline'])}")
    for reason in [*decision.reasons, failures["summary"]]:
        context.log.info(f"promotion: {reason}")
    record = {
        "decision": verdict,
        "candidate": models["candidate"],
        "baseline": models["baseline"],
        "reasons": decision.reasons,
        "numbers": decision.numbers,
        "failure_eval": failures,
    }
    return dg.MaterializeResult(
        value=pd.DataFrame([record]),
        metadata={
            "decision": verdict,
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
            "split_epochs": dg.MetadataValue.json(epochs),
            "promoted_model": registry.baseline(models["baseline"]),
            "registry": dg.MetadataValue.path(str(registry.path)),
        },
    )


def _overall(report: EvalReport) -> dict[str, float]:
    return {metric: estimate.value for metric, estimate in report.overall.items()}


def _family_table(reports: dict[str, EvalReport], comparison: Comparison) -> dg.MetadataValue:
    """pass@1 with its interval per model, and the paired difference, overall and per family."""
    parts = [("overall", comparison.overall, {r: reports[r].overall for r in ROLES})]
    parts += [(f, paired, {r: reports[r].families[f] for r in ROLES}) for f, paired in comparison.families.items()]
    rows = [
        {
            "family": family,
            "tasks": paired.tasks,
            **{f"{role} pass@1": str(metrics[role]["pass@1"]) for role in ROLES},
            "difference": paired.difference.signed(),
        }
        for family, paired, metrics in parts
    ]
    columns = ["family", "tasks", *(f"{role} pass@1" for role in ROLES), "difference"]
    return dg.MetadataValue.md(markdown_table(rows, columns))
