"""What the TRL training runs (`training.grpo`, `training.sft`) share: checkpoints, the final folder, metrics, LoRA.

- **Resuming**: a pipeline run folder is named by `run_digest` of its inputs, so a rerun after a kill finds the same
  folder; `last_complete_checkpoint(output_dir)` is the newest `checkpoint-N` that transformers finished
  writing (it writes `trainer_state.json` last, so a folder without it was cut off by a kill and is skipped with a
  warning). `train_resuming(trainer, checkpoint)` resumes from it; a checkpoint already at `max_steps` (a run killed
  between its last save and its final folder) is loaded, not trained on, since transformers would run one step past
  the limit.
- **The final folder**: `save_final` writes the model and tokenizer to `<output_dir>/.final.partial` and renames
  it to `<output_dir>/final`, so a `final` folder is always complete; LoRA adapters are merged first, so the folder
  loads with `AutoModelForCausalLM` like any other model directory. The run being done, its checkpoints then shed
  their optimizer and scheduler state (`shed_optimizer_state`): AdamW's moments are twice the weights' size, kept
  only to resume a run cut off mid-way, and a finished run kept them at 3.6 GB per run of a 135M model.
- **How many checkpoints**: `KEEP_CHECKPOINTS` (transformers' `save_total_limit`) is one: transformers deletes an
  older checkpoint only after the newer one is complete, so a save cut off by a kill still leaves one to resume.
- **Metrics**: `metrics_callback(sink)` is a `TrainerCallback` that forwards every `on_log` dict (plus `step` and
  `tokens_per_second`) to a sink as training goes, e.g. a Dagster Pipes message.
- **LoRA**: `peft_lora_config(...)` builds a `peft.LoraConfig`, or raises `MissingPeftError` naming the install.

Like `training.grpo`, importing this module costs nothing: torch/transformers/peft are imported inside functions.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import math
import os
import re
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from core import SeedwheelError
from validators.tasks import canonical_json

logger = logging.getLogger(__name__)

FINAL_DIRNAME = "final"
PEFT_HINT = "pip install peft"
LORA_EXTRA_HINT = "pip install 'seedwheel[lora]'"
# transformers writes this file last into a checkpoint folder: its presence marks a complete checkpoint.
TRAINER_STATE_FILE = "trainer_state.json"
# What `shed_optimizer_state` deletes from a finished run's checkpoints (transformers' file names).
OPTIMIZER_STATE_FILES = ("optimizer.pt", "scheduler.pt")
KEEP_CHECKPOINTS = 1
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")

MetricsSink = Callable[[dict[str, Any]], None]


class MissingPeftError(SeedwheelError, ImportError):
    """LoRA was asked for but the `peft` package is not installed; the message names the install command."""


def peft_available() -> bool:
    """Whether `peft` is importable (found without importing it)."""
    return importlib.util.find_spec("peft") is not None


def run_digest(model: str, task_ids: Sequence[str], config: dict[str, Any]) -> str:
    """A name for a training run folder: the same inputs give the same folder, so a rerun resumes there.

    Args:
        model: the model the run starts from.
        task_ids: the tasks it trains on, in any order.
        config: every setting that changes what it trains (a new key or value names another folder).

    Returns:
        16 hex digits of the SHA-256 of the three, canonically encoded.

    Example:
        >>> run_digest("m", ["b", "a"], {"lr": 1}) == run_digest("m", ["a", "b"], {"lr": 1})
        True
    """
    payload = canonical_json({"model": model, "tasks": sorted(task_ids), "config": config})
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def last_complete_checkpoint(output_dir: str | os.PathLike[str]) -> Path | None:
    """The highest-numbered `checkpoint-N` folder in `output_dir` that holds a `trainer_state.json`.

    transformers writes the trainer state last, so a folder without it was cut off mid-save (a killed run) and
    cannot be resumed from; such folders are skipped with a warning.

    Args:
        output_dir: the training output folder (may not exist yet).

    Returns:
        The checkpoint folder, or None when there is none.

    Example:
        >>> last_complete_checkpoint("runs/grpo")  # doctest: +SKIP
        PosixPath('runs/grpo/checkpoint-200')
    """
    root = Path(output_dir)
    if not root.is_dir():
        return None
    numbered = sorted(
        ((int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _CHECKPOINT_RE.match(p.name))),
        reverse=True,
    )
    for _, path in numbered:
        if (path / TRAINER_STATE_FILE).is_file():
            return path
        logger.warning(
            "Skipping %s: no %s, so its save was cut off; resuming from an earlier one.", path, TRAINER_STATE_FILE
        )
    return None


def train_resuming(trainer: Any, checkpoint: Path | None) -> None:
    """`trainer.train()`, resumed from `checkpoint` (from `last_complete_checkpoint`) when there is one.

    transformers checks `max_steps` only after an optimizer step, so resuming from a checkpoint already at
    `max_steps` would train one step more than asked; such a checkpoint's weights and state are loaded instead.

    Example:
        >>> train_resuming(trainer, last_complete_checkpoint("runs/grpo"))  # doctest: +SKIP
        >>> trainer.state.global_step  # doctest: +SKIP
        100
    """
    if checkpoint is None:
        trainer.train()
        return
    from transformers import TrainerState

    state = TrainerState.load_from_json(str(checkpoint / TRAINER_STATE_FILE))
    if 0 < trainer.args.max_steps <= state.global_step:
        logger.info("%s is at max_steps=%d already: loading it, no training", checkpoint, trainer.args.max_steps)
        trainer._load_from_checkpoint(str(checkpoint))
        trainer.state = state
        return
    if not (checkpoint / OPTIMIZER_STATE_FILES[0]).is_file():
        logger.warning(
            "%s belongs to a finished run and has no optimizer state (shed_optimizer_state): training on from it "
            "with a new optimizer and learning-rate schedule",
            checkpoint,
        )
    trainer.train(resume_from_checkpoint=str(checkpoint))


def save_final(trainer: Any, tokenizer: Any, output_dir: str | os.PathLike[str], use_lora: bool) -> Path:
    """Write the trained model and tokenizer beside `<output_dir>/final`, then rename into place.

    Args:
        trainer: a finished `transformers.Trainer` (or TRL subclass).
        tokenizer: the tokenizer to save beside the weights.
        output_dir: the run's output folder.
        use_lora: the model is a peft model; its adapters are merged so the folder is a plain model directory.

    Returns:
        `<output_dir>/final`, complete (a killed save leaves at most `.final.partial` beside it).

    Example:
        >>> save_final(trainer, tokenizer, "runs/sft", use_lora=False)  # doctest: +SKIP
        PosixPath('runs/sft/final')
    """
    output_dir = Path(output_dir)
    final = output_dir / FINAL_DIRNAME
    staging = output_dir / f".{FINAL_DIRNAME}.partial"
    main = trainer.is_world_process_zero()
    if main and staging.exists():
        shutil.rmtree(staging)
    if use_lora:
        # Merged, so the folder loads with AutoModelForCausalLM like any other checkpoint.
        merged = trainer.accelerator.unwrap_model(trainer.model).merge_and_unload()
        if main:
            merged.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
    else:
        trainer.save_model(str(staging))  # all processes: sharded setups gather weights here
        if main:
            tokenizer.save_pretrained(staging)
    if main:
        old = output_dir / f".{FINAL_DIRNAME}.old"
        if old.exists():
            shutil.rmtree(old)
        if final.exists():
            final.rename(old)
        staging.rename(final)
        shutil.rmtree(old, ignore_errors=True)
        shed_optimizer_state(output_dir)
    return final


def shed_optimizer_state(output_dir: str | os.PathLike[str]) -> int:
    """Delete the optimizer and scheduler state from the `checkpoint-N` folders of a finished run.

    A checkpoint keeps its weights and trainer state, so a rerun of the finished run loads it and trains nothing
    (`train_resuming`); only raising `max_steps` afterwards trains on, with a new optimizer.

    Args:
        output_dir: the run's output folder, holding its `final` folder.

    Returns:
        The bytes freed.

    Example:
        >>> shed_optimizer_state("runs/sft")  # doctest: +SKIP
        1077949306
    """
    freed = 0
    for checkpoint in Path(output_dir).iterdir():
        if not (checkpoint.is_dir() and _CHECKPOINT_RE.match(checkpoint.name)):
            continue
        for name in OPTIMIZER_STATE_FILES:
            state = checkpoint / name
            if state.is_file():
                freed += state.stat().st_size
                state.unlink()
    return freed


def _plain(value: Any) -> Any:
    # Metrics go to JSON (Pipes messages, summaries): tensors/numpy scalars to floats, NaN to None.
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def metrics_callback(sink: MetricsSink | None = None) -> Any:
    """A `transformers.TrainerCallback` that records every `on_log` dict and forwards it to `sink`.

    Each record is the trainer's logs (GRPO: `reward`, `reward_std`, `rewards/<name>/mean|std`, `kl`, ...; SFT:
    `loss`, `mean_token_accuracy`, ...; both: `grad_norm`, `learning_rate`, `entropy`, `num_tokens`; the last one
    holds `train_runtime`) plus `step` and, from the growth of `num_tokens` between logs, `tokens_per_second`.
    NaN becomes None. A sink that raises is logged, not fatal: losing a progress message must not cost a run.

    Args:
        sink: called with a copy of each record, on the main process only.

    Returns:
        The callback; its `history` attribute is the list of records.

    Example:
        >>> callback = metrics_callback(print)  # doctest: +SKIP
        >>> GRPOTrainer(..., callbacks=[callback])  # doctest: +SKIP
    """
    from transformers import TrainerCallback

    class MetricsForwarder(TrainerCallback):
        def __init__(self) -> None:
            self.history: list[dict[str, Any]] = []
            self._last_tokens: tuple[float, float] | None = None

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any) -> None:
            if not logs or not state.is_world_process_zero:
                return
            record = {"step": state.global_step, **{key: _plain(value) for key, value in logs.items()}}
            now = time.perf_counter()
            tokens = record.get("num_tokens")
            if isinstance(tokens, int | float):
                if self._last_tokens is not None and now > self._last_tokens[0] and tokens >= self._last_tokens[1]:
                    record["tokens_per_second"] = (tokens - self._last_tokens[1]) / (now - self._last_tokens[0])
                self._last_tokens = (now, tokens)
            self.history.append(record)
            if sink is not None:
                try:
                    sink(dict(record))
                except Exception:  # a progress channel must not kill training
                    logger.exception("on_metrics sink failed at step %s; training goes on", state.global_step)

    return MetricsForwarder()


def peft_lora_config(
    *, r: int, alpha: float, dropout: float, target_modules: Sequence[str] | str = "all-linear"
) -> Any:
    """A `peft.LoraConfig` for a causal LM.

    Args:
        r: LoRA rank.
        alpha: LoRA scaling numerator (often 2 x r).
        dropout: dropout on the LoRA path.
        target_modules: module names, or `"all-linear"`.

    Returns:
        The `LoraConfig` (task type `CAUSAL_LM`).

    Raises:
        MissingPeftError: peft is not installed (the message names `pip install peft`).

    Example:
        >>> peft_lora_config(r=16, alpha=32, dropout=0.05)  # doctest: +SKIP
    """
    try:
        from peft import LoraConfig
    except ImportError:
        raise MissingPeftError(
            f"LoRA needs the peft package: {PEFT_HINT} (or the `lora` extra: {LORA_EXTRA_HINT})"
        ) from None
    return LoraConfig(
        r=r,
        lora_alpha=alpha,  # type: ignore[arg-type,unused-ignore]  # peft annotates int; a float alpha works
        lora_dropout=dropout,
        target_modules=target_modules if isinstance(target_modules, str) else list(target_modules),
        task_type="CAUSAL_LM",
    )
