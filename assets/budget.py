"""Budget assets: what the GRPO run will cost before it starts (`training.budget`), and how that plan compared
with what the run then measured."""

import dagster as dg
import pandas as pd

from assets import groups
from assets.metadata import markdown_table
from pipeline.resources import PromotionGate, TrainingPolicy
from training.budget import (
    GateSettings,
    MeasuredRun,
    ModelShape,
    RunSettings,
    calibrate,
    default_device,
    load_throughputs,
    measure_workload,
    plan_budget,
    throughput_for,
)
from validators.tables import records_from_frame
from validators.tasks import TASK_FIELDS

PLAN_COLUMNS = ("quantity", "value", "how")
# How far a plan may miss the run's wall time before its calibration is flagged.
CALIBRATION_TOLERANCE = 2.0


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
        gate=GateSettings(
            eval_tasks=len(gate.eval_tasks(eval_tasks, failure_eval)),
            samples=gate.samples,
            min_improvement=policy.min_improvement,
            min_tasks=policy.min_tasks,
        ),
        model=model,
    )
    for line in budget.advice:
        context.log.warning(f"training budget: {line}")
    numbers = budget.as_metadata()
    row = {**numbers, "model": model, "device": device, "grpo": dict(training.grpo), "advice": budget.advice}
    return dg.MaterializeResult(
        value=pd.DataFrame([row]),
        metadata={
            **numbers,
            "device": device,
            "plan": dg.MetadataValue.md(markdown_table(budget.table(), PLAN_COLUMNS)),
            "advice_count": len(budget.advice),
            "advice": dg.MetadataValue.md("\n".join(f"- {line}" for line in budget.advice) or "nothing to flag"),
            "assumed": dg.MetadataValue.md("\n".join(f"- {line}" for line in budget.assumed)),
        },
    )


@dg.asset(group_name=groups.TRAINING)
def budget_calibration(
    context: dg.AssetExecutionContext, training_budget: pd.DataFrame, grpo_checkpoint: pd.DataFrame
) -> dg.MaterializeResult[pd.DataFrame]:
    """The plan against what the GRPO run measured: predicted / measured wall time and tokens."""
    planned = training_budget.iloc[0].to_dict()
    run = grpo_checkpoint.iloc[0].to_dict()
    event = context.instance.get_latest_materialization_event(dg.AssetKey("grpo_checkpoint"))
    recorded = event.asset_materialization.metadata if event and event.asset_materialization else {}
    resumed = getattr(recorded.get("resumed_from"), "value", "") or ""
    problems = []
    if RunSettings.from_grpo(run["config"]["grpo"]) != RunSettings.from_grpo(planned["grpo"]):
        problems.append("the run's GRPO settings differ from the plan's")
    if len(run["task_ids"]) != planned["prompts"]:
        problems.append(f"the run trained {len(run['task_ids'])} tasks, the plan counted {planned['prompts']}")
    if resumed:
        problems.append(f"the run resumed from {resumed}: its wall time covers part of it")
    # The run's steps, seconds and TRL's token counts (`grpo_checkpoint`'s `measured`); its row's alone otherwise.
    logged = getattr(recorded.get("measured"), "value", None)
    measured = MeasuredRun(**logged) if logged else MeasuredRun(int(run["steps"]), float(run["train_seconds"]))
    ratios = {} if problems else calibrate(planned, measured)
    wall = ratios.get("wall_time_ratio")
    within = wall is not None and 1 / CALIBRATION_TOLERANCE <= wall <= CALIBRATION_TOLERANCE
    if problems:
        context.log.warning(f"budget calibration: not comparable: {'; '.join(problems)}")
    elif not within:
        context.log.warning(f"budget calibration: predicted / measured wall time {wall:.2f}, beyond 2x")
    row = {"comparable": not problems, "within_tolerance": within, **ratios, "problems": problems}
    return dg.MaterializeResult(
        value=pd.DataFrame([row]),
        metadata={
            **ratios,
            "comparable": not problems,
            "within_tolerance": within,
            "measured_train_seconds": measured.train_seconds,
            # The steps alone (TRL's step_time), which the plan predicts; the rest is loading and checkpoint saves.
            "measured_step_seconds": measured.step_seconds if measured.step_seconds is not None else "not logged",
            "predicted_seconds_for_measured_steps": planned["predicted_wall_seconds"]
            / planned["steps"]
            * measured.steps,
            "measured_steps": measured.steps,
            "problems": dg.MetadataValue.md("\n".join(f"- {p}" for p in problems) or "none"),
        },
    )
