"""`seedwheel plan`: the plan of the next GRPO run from the stored splits and the profile's training config, or a
what-if from flags alone, without starting a Dagster run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from core.tables import read_table, records_from_frame
from pipeline.profiles import profile_resources
from pipeline.settings import Settings
from training.budget import (
    Budget,
    BudgetError,
    GateSettings,
    ModelShape,
    RunSettings,
    Workload,
    default_device,
    load_throughputs,
    measure_workload,
    parse_model_size,
    plan_budget,
    throughput_for,
)
from validators.tasks import TASK_FIELDS

# What a what-if assumes when no train split is stored (each said in the plan's assumptions).
DEFAULT_PROMPTS = 1000
DEFAULT_PROMPT_TOKENS = 256


@dataclass(frozen=True)
class PlanReport:
    """A plan, and the last run's calibration when one is stored."""

    budget: Budget
    calibration: dict[str, Any] | None


def plan_from_settings(
    settings: Settings,
    *,
    model_size: str | None = None,
    device: str | None = None,
    gpus: int = 1,
    prompts: int | None = None,
    prompt_tokens: int | None = None,
    eval_tasks: int | None = None,
    grpo: Mapping[str, Any] | None = None,
) -> PlanReport:
    """Plan the next GRPO run of `settings`' profile from the tables stored under its root, or from the flags.

    Args:
        settings: the profile (its training config and gate) and the storage root.
        model_size: price a model of this size (`8B`) instead of the configured one (approximate shape).
        device: a device of `training/throughputs.csv`; None: the profile's kind (`default_device`).
        gpus: devices training together.
        prompts, prompt_tokens: the GRPO set's size and mean prompt length when no train split is stored.
        eval_tasks: eval tasks the gate sees when no eval split is stored (None: the gate is left out).
        grpo: GRPO settings over the profile's (`TrainingPolicy.grpo`).

    Raises:
        BudgetError: a flag that does not parse or names nothing known (the message names it).
    """
    resources = profile_resources(settings)
    training, gate = resources.training, resources.gate
    config = {**training.grpo, **(grpo or {})}
    size = parse_model_size(model_size) if model_size is not None else None
    home = settings.home
    if not isinstance(home, Path):
        raise BudgetError(
            f"--home {home}: seedwheel plan reads a local storage root; plan a remote one's run from flags"
        )
    assumed = [f"GRPO settings: profile {settings.profile}'s, with {dict(grpo or {})} over them"]
    train_path, profile_path = home / "train_tasks.parquet", home / "difficulty_profile.parquet"
    model = ""
    if train_path.exists():
        model = training.model()
        from transformers import AutoTokenizer

        measured = measure_workload(
            records_from_frame(read_table(train_path)[list(TASK_FIELDS)]),
            records_from_frame(read_table(profile_path)) if profile_path.exists() else None,
            AutoTokenizer.from_pretrained(model),
            config.get("chat_template_kwargs"),
        )
        workload = replace(measured, assumed=[f"prompts measured in {train_path}", *measured.assumed])
    else:
        count, length = prompts or DEFAULT_PROMPTS, prompt_tokens or DEFAULT_PROMPT_TOKENS
        workload = Workload(
            prompt_tokens=[length] * count,
            assumed=[
                f"no train split at {train_path}: {count} prompts of {length} tokens (--prompts, --prompt-tokens), "
                "completions the whole max_completion_length, no pass rates"
            ],
        )
    if size is None:
        model = model or training.model()
        shape = ModelShape.from_model(model)
    else:
        shape = ModelShape.approximate(size)
        model = f"a {model_size} model"
    name = device or default_device(training.runtime)
    if device is None:
        assumed.append(f"device: {name} (the {training.runtime!r} runtime's kind; --gpu to change)")
    eval_path, failure_path = home / "eval_tasks.parquet", home / "failure_eval.parquet"
    if eval_path.exists() and failure_path.exists():
        eval_tasks = len(gate.eval_tasks(read_table(eval_path), read_table(failure_path)))
    elif eval_tasks is None:
        assumed.append(f"no eval split at {eval_path}: the gate's reach is left out (--eval-tasks to add it)")
    policy = gate.policy()
    budget = plan_budget(
        replace(workload, assumed=[*assumed, *workload.assumed]),
        RunSettings.from_grpo(config),
        shape,
        throughput_for(load_throughputs(), name, shape.parameters),
        gpus=gpus,
        gate=None if eval_tasks is None else GateSettings.from_policy(policy, eval_tasks, gate.samples),
        model=model,
    )
    calibration_path = home / "budget_calibration.parquet"
    calibration = read_table(calibration_path).iloc[0].to_dict() if calibration_path.exists() else None
    return PlanReport(budget, calibration)
