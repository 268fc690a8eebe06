"""Budget assets: what the GRPO run will cost before it starts (`training.budget`), and how that plan compared
with what the run then measured."""

from typing import Any

import dagster as dg
import pandas as pd

from assets import groups
from assets.metadata import markdown_table
from core.tables import records_from_frame
from resources import PromotionGate, TrainingPolicy
from training.budget import (
    SKIPPED,
    Budget,
    GateSettings,
    ModelShape,
    RunSettings,
    calibrate_plan,
    default_device,
    load_throughputs,
    measure_workload,
    plan_budget,
    plan_row,
    throughput_for,
)
from training.difficulty import empty_grpo_set_reason, grpo_set
from validators.tasks import TASK_FIELDS

PLAN_COLUMNS = ("quantity", "value", "how")


class BudgetConfig(dg.Config):
    """Which device the plan prices the run on."""

    device: str = ""  # a device of training/throughputs.csv; empty: cpu-2core for a CPU run, else h100
    gpus: int = 1


@dg.asset(group_name=groups.TRAINING)
def training_budget(
    context: dg.AssetExecutionContext,
    config: BudgetConfig,
    train_tasks: pd.DataFrame,
    eval_tasks: pd.DataFrame,
    failure_eval: pd.DataFrame,
    difficulty_profile: pd.DataFrame,
    training: TrainingPolicy,
    gate: PromotionGate,
) -> dg.MaterializeResult[pd.DataFrame]:
    """The GRPO run's plan before it trains: tokens, FLOPs, wall time, memory per GPU, signal, with advice."""
    from transformers import AutoTokenizer

    if grpo_set(train_tasks, difficulty_profile).empty:  # grpo_checkpoint passes its policy on: nothing to price
        return _nothing_to_plan(context, empty_grpo_set_reason(train_tasks, difficulty_profile))
    model = training.model()  # GRPO starts from its SFT checkpoint: the same tokenizer and shape
    workload = measure_workload(
        records_from_frame(train_tasks[list(TASK_FIELDS)]),
        records_from_frame(difficulty_profile),
        AutoTokenizer.from_pretrained(model),
        training.grpo.get("chat_template_kwargs"),
    )
    shape = ModelShape.from_model(model)
    device = config.device or default_device(training.runtime)
    policy = gate.policy()
    budget = plan_budget(
        workload,
        RunSettings.from_grpo(training.grpo),
        shape,
        throughput_for(load_throughputs(), device, shape.parameters),
        gpus=config.gpus,
        gate=GateSettings.from_policy(policy, len(gate.eval_tasks(eval_tasks, failure_eval)), gate.samples),
        model=model,
    )
    for line in budget.advice:
        context.log.warning(f"training budget: {line}")
    return dg.MaterializeResult(
        value=pd.DataFrame([plan_row(budget, model=model, device=device, grpo=training.grpo)]),
        metadata=_budget_metadata(budget, device),
    )


def _nothing_to_plan(context: dg.AssetExecutionContext, reason: str) -> dg.MaterializeResult[pd.DataFrame]:
    """`training_budget` when no GRPO run will train: a row and metadata that say why (`budget_calibration` then
    has nothing to compare)."""
    context.log.warning(f"training budget: no GRPO run to plan: {reason}")
    return dg.MaterializeResult(value=pd.DataFrame([{SKIPPED: reason}]), metadata={SKIPPED: reason})


def _budget_metadata(budget: Budget, device: str) -> dict[str, Any]:
    """`training_budget`'s metadata: the plan's numbers (charted across materializations), the device it priced,
    the plan as a table, its advice and its assumptions."""
    return {
        **budget.as_metadata(),
        "device": device,
        "plan": dg.MetadataValue.md(markdown_table(budget.table(), PLAN_COLUMNS)),
        "advice_count": len(budget.advice),
        "advice": dg.MetadataValue.md("\n".join(f"- {line}" for line in budget.advice) or "nothing to flag"),
        "assumed": dg.MetadataValue.md("\n".join(f"- {line}" for line in budget.assumed)),
    }


@dg.asset(group_name=groups.TRAINING)
def budget_calibration(
    context: dg.AssetExecutionContext, training_budget: pd.DataFrame, grpo_checkpoint: pd.DataFrame
) -> dg.MaterializeResult[pd.DataFrame]:
    """The plan against what the GRPO run measured: predicted / measured wall time and tokens."""
    planned, run = training_budget.iloc[0].to_dict(), grpo_checkpoint.iloc[0].to_dict()
    if isinstance(planned.get(SKIPPED), str):  # no GRPO run was planned, none ran
        return dg.MaterializeResult(
            value=pd.DataFrame([{"comparable": False, SKIPPED: planned[SKIPPED]}]),
            metadata={"comparable": False, SKIPPED: planned[SKIPPED]},
        )
    event = context.instance.get_latest_materialization_event(dg.AssetKey("grpo_checkpoint"))
    recorded = event.asset_materialization.metadata if event and event.asset_materialization else {}
    calibration = calibrate_plan(
        planned,
        run,
        # The run's steps, seconds and TRL's token counts (`grpo_checkpoint`'s `measured`); its row's alone otherwise.
        logged=getattr(recorded.get("measured"), "value", None),
        resumed=getattr(recorded.get("resumed_from"), "value", "") or "",
    )
    ratios, measured, problems = calibration.ratios, calibration.measured, calibration.problems
    if problems:
        context.log.warning(f"budget calibration: not comparable: {'; '.join(problems)}")
    elif not calibration.within_tolerance:
        context.log.warning(
            f"budget calibration: predicted / measured wall time {ratios['wall_time_ratio']:.2f}, beyond 2x"
        )
    return dg.MaterializeResult(
        value=pd.DataFrame([calibration.as_row()]),
        metadata={
            **ratios,
            "comparable": calibration.comparable,
            "within_tolerance": calibration.within_tolerance,
            "measured_train_seconds": measured.train_seconds,
            # The steps alone (TRL's step_time), which the plan predicts; the rest is loading and checkpoint saves.
            "measured_step_seconds": measured.step_seconds if measured.step_seconds is not None else "not logged",
            "predicted_seconds_for_measured_steps": calibration.predicted_seconds_for_measured_steps,
            "measured_steps": measured.steps,
            "problems": dg.MetadataValue.md("\n".join(f"- {p}" for p in problems) or "none"),
        },
    )
