"""DPO on verified preference pairs (`training.preferences`) with TRL's `DPOTrainer`.

A small hand-off, not a pipeline stage: it trains from a model directory (or hub id) on `split="train"` pairs
and writes `<output_dir>/final`. The reference model is the starting model: TRL loads a second copy from the same
path, which is why `model_path` is a path and not a model object. Rows marked `split="eval"` are refused: they
come from eval tasks (see `training.preferences`). Runtime settings are `training.grpo.runtime_defaults` (on CPU
`use_cpu=True`, `bf16=False`); `overrides` go over everything (any `trl.DPOConfig` field).

A pair's side may be an episode's messages (assistant turns, tool results); TRL reads each message's role and
content, the view the policy played with (`training.episodes.chat_messages`): the calls are in the assistant's
content as the model wrote them, and a template that also rendered `tool_calls` would train on them twice. The
loss counts only the tokens the assistant wrote (`training.episodes.assistant_tokens`): a tool result is the
environment's, so its log-probability is not the policy's choice, and counting it would move the policy towards
predicting the results of winning episodes. This is the mask GRPO's episode rollouts give (`env_mask`) and SFT
trains with; a single-turn side's mask is TRL's own.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.checkpoints import metrics_callback, save_final
from training.episodes import assistant_tokens, chat_messages
from training.preferences import EvalLeakError, PreferenceDataError
from training.tracking import TrackedRun, TrackingConfig, attach_tensorboard, report_to, training_run


@dataclass(frozen=True)
class DPOResult:
    """What a DPO run produced.

    Attributes:
        checkpoint_dir: `<output_dir>/final`, the trained model and tokenizer.
        steps: optimizer steps taken.
        train_rows: pairs trained on.
        metrics: every logged metrics dict, in order (`loss`, `rewards/margins`, `rewards/accuracies`, ...).
        train_seconds: wall time of `trainer.train()`.
        tracked: the MLflow run and TensorBoard folder it reported to (`training.tracking`); None: not tracked.
    """

    checkpoint_dir: Path
    steps: int
    train_rows: int
    metrics: list[dict[str, Any]]
    train_seconds: float
    tracked: TrackedRun | None = None


def run_dpo(
    pairs: Sequence[Mapping[str, Any]],
    model_path: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    max_steps: int = 100,
    learning_rate: float = 5e-7,
    beta: float = 0.1,
    batch_size: int = 8,
    max_length: int = 1024,
    seed: int = 0,
    on_metrics: Callable[[dict[str, Any]], None] | None = None,
    overrides: Mapping[str, Any] | None = None,
    tracking: TrackingConfig | None = None,
) -> DPOResult:
    """Train with TRL's DPO loss on preference pairs, against the starting model as reference.

    Args:
        pairs: rows with `prompt`, `chosen` and `rejected` (TRL's conversational preference format), e.g.
            `training.preferences.build_preference_pairs(...).pairs` or the exported `preferences_train` file;
            other columns are ignored, and so are a message's keys other than `role` and `content`.
        model_path: a model directory or hub id: the policy to train and, loaded again, the reference.
        output_dir: the run folder; the model lands in `<output_dir>/final`.
        max_steps: optimizer steps.
        learning_rate: peak learning rate (DPO on real models: ~5e-7..5e-6; a tiny random model needs ~1e-2).
        beta: the DPO temperature: how far the policy may move from the reference.
        batch_size: pairs per device per step.
        max_length: longest tokenized prompt + completion; TRL truncates the rest and drops a pair whose prompt
            alone fills it.
        seed: seed for data order and dropout.
        on_metrics: called with each logged metrics dict as training goes.
        overrides: any `trl.DPOConfig` fields, applied last.
        tracking: report to MLflow and TensorBoard (`training.tracking.training_run`; the run is named by the
            `run_name` override, else by the output folder); None: `report_to=[]`.

    Returns:
        A `DPOResult`.

    Raises:
        EvalLeakError: a pair is marked `split="eval"`.
        PreferenceDataError: no pairs, or a bad number or override.

    Example:
        >>> pairs = build_preference_pairs(rollouts, train_tasks, split="train", source="demo").pairs  # doctest: +SKIP
        >>> run_dpo(pairs, sft_dir, "runs/dpo", max_steps=200).checkpoint_dir  # doctest: +SKIP
        PosixPath('runs/dpo/final')
    """
    leaked = [row.get("task_id") for row in pairs if row.get("split") == "eval"]
    if leaked:
        raise EvalLeakError(
            f"{len(leaked)} eval-split pair(s), e.g. task {leaked[0]}: pairs from eval tasks are for evaluating a "
            "preference model, never for training; train on the split='train' pairs (preferences_train)"
        )
    if not pairs:
        raise PreferenceDataError("no preference pairs to train on; see preference_pairs' task outcomes for why")
    if max_steps < 1 or batch_size < 1 or not (math.isfinite(learning_rate) and learning_rate > 0):
        raise PreferenceDataError(
            f"max_steps ({max_steps}) and batch_size ({batch_size}) must be >= 1 and learning_rate "
            f"({learning_rate}) > 0"
        )

    from transformers import AutoTokenizer
    from trl import DPOConfig

    from training.grpo import runtime_defaults

    output = Path(output_dir)
    settings: dict[str, Any] = {
        **runtime_defaults(prefer_vllm=False),
        "output_dir": str(output),
        "max_steps": max_steps,
        "learning_rate": learning_rate,
        "beta": beta,
        "per_device_train_batch_size": batch_size,
        "max_length": max_length,
        "seed": seed,
        "logging_steps": 1,
        "save_strategy": "no",
    }
    settings.update(overrides or {})
    try:
        config = DPOConfig(**settings)
    except TypeError as exc:
        raise PreferenceDataError(f"overrides: {exc}; use trl.DPOConfig field names") from None
    model_name = os.fspath(model_path)
    tokenizer = AutoTokenizer.from_pretrained(model_name)
    tokenizer.pad_token = config.pad_token or tokenizer.pad_token or tokenizer.eos_token  # as TRL picks it
    # Only the three columns TRL reads (the verdict columns may hold nulls that Arrow cannot type), each message as
    # the policy reads it: an episode's `tool_calls` repeat its content's calls, and are null on other messages.
    rows: list[dict[str, Any]] = [
        {key: chat_messages(row[key]) for key in ("prompt", "chosen", "rejected")} for row in pairs
    ]
    for row in rows:
        for side in ("chosen", "rejected"):
            row[f"{side}_mask"] = assistant_tokens(tokenizer, row["prompt"], row[side])[1]
    config.remove_unused_columns = False  # the masks reach the collator
    callback = metrics_callback(on_metrics)
    with training_run(tracking, output, stage="dpo", name=config.run_name or output.name) as tracked:
        config.report_to = report_to(config.report_to, tracked)
        trainer, seconds = _train(model_name, config, rows, tokenizer, callback, tracked)
    return DPOResult(
        checkpoint_dir=save_final(trainer, tokenizer, output, use_lora=False),
        steps=trainer.state.global_step,
        train_rows=len(rows),
        metrics=list(callback.history),
        train_seconds=seconds,
        tracked=tracked,
    )


def _train(
    model_name: str, config: Any, rows: list[dict[str, Any]], tokenizer: Any, callback: Any, tracked: TrackedRun | None
) -> tuple[Any, float]:
    """Build the DPO trainer on `rows` and train; returns it and the training's wall time."""
    from datasets import Dataset
    from trl import DPOTrainer
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    trainer = DPOTrainer(
        model=model_name,
        args=config,
        data_collator=AssistantTokensCollator(
            DataCollatorForPreference(
                pad_token_id=tokenizer.pad_token_id,
                max_length=config.max_length,
                truncation_mode=config.truncation_mode,
                # DPOConfig resolves "auto" to a number or None
                pad_to_multiple_of=None if config.pad_to_multiple_of is None else int(config.pad_to_multiple_of),
            )
        ),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[callback],
    )
    # TRL's default collator comes with these; the model saved at the end should agree with its tokenizer.
    model: Any = trainer.model
    model.config.pad_token_id = model.generation_config.pad_token_id = tokenizer.pad_token_id
    attach_tensorboard(trainer, tracked)
    started = time.perf_counter()
    trainer.train()
    return trainer, time.perf_counter() - started


@dataclass(frozen=True)
class AssistantTokensCollator:
    """TRL's preference collator (`base`), with each side's completion mask cut to its `chosen_mask` /
    `rejected_mask` (`training.episodes.assistant_tokens`, over the prompt and the side), truncated as `base`
    truncates the tokens."""

    base: Any  # trl.trainer.dpo_trainer.DataCollatorForPreference

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        batch = self.base(examples)
        sides = [(example, "chosen") for example in examples] + [(example, "rejected") for example in examples]
        for row, (example, side) in enumerate(sides):
            mask = example[f"{side}_mask"]
            tokens = len(example["prompt_ids"]) + len(example[f"{side}_ids"])
            if len(mask) != tokens:
                raise PreferenceDataError(
                    f"{side} side of a pair: the assistant mask covers {len(mask)} tokens, TRL tokenized {tokens}; "
                    "the chat template renders the same conversation differently from call to call"
                )
            if self.base.max_length is not None:
                keep_start = self.base.truncation_mode == "keep_start"
                mask = mask[: self.base.max_length] if keep_start else mask[-self.base.max_length :]
            batch["completion_mask"][row, : len(mask)] *= torch.tensor(mask, dtype=batch["completion_mask"].dtype)
        return batch
