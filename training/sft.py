"""SFT warm-up before GRPO: TRL's `SFTTrainer` on the tasks' known-good references, loss on the answer only.

A random or weak policy rarely samples a completion its verifier accepts, and GRPO learns nothing from a group
whose rewards are all equal. A short supervised warm-up on the references (every valid task has one that passes
its own verifier) teaches the output format and some of the skill, so that GRPO starts with reward variance.

- **Data**: `sft_examples(tasks)` turns task records into prompt-completion examples: the task's messages, and
  the reference as the assistant's answer; tasks without a reference are skipped and counted. An `episode` task's
  completion is its reference played turn by turn in a fresh environment (`training.episodes.reference_turns`:
  one call per turn, its result as a `tool` message, then the answer), the conversation its prompt asks for; its
  reference as one text would teach writing every call before seeing any result. `run_sft` tokenizes each
  example with the chat template and gives TRL the ids with a completion mask that keeps only what the assistant
  wrote (`training.episodes.assistant_tokens`): the prompt and the tool results are never imitated, with any
  chat template (no `{% generation %}` markers needed). An example longer than `max_length` tokens is cut to its
  first `max_length`; one whose answer starts after that has nothing left to learn from, and is dropped and
  counted (`too_long_rows`). The loss projects the answer's positions alone through the output layer
  (`training.answer_loss`). The batch is padding-free (`trl.SFTConfig.padding_free`): its examples are laid end
  to end in one row, each attending to itself alone (the attention mask comes from the position ids), so no
  step computes padding. Measured on the quickstart's warm-up (16 steps of 8, 2 CPU cores): the same losses step
  for step as padded batches, and the same time (333 s against 340 s).
- **Settings**: `SFTSettings` holds the run's numbers (steps, learning rate, batch size, length, LoRA or not) and
  checks them once; it is their one home (`resources.TrainingPolicy` mirrors its defaults).
- **Runtime**: `training.grpo.runtime_defaults(prefer_vllm=False)`: on CPU `use_cpu=True`, `bf16=False`, no
  activation checkpointing; on a GPU bf16 where supported. `overrides` go over everything (any `trl.SFTConfig`
  field).
- **Checkpoints** (shared with GRPO through `training.checkpoints`): `run_sft` resumes from the newest complete
  `checkpoint-N` in `output_dir` and writes the model and tokenizer to `<output_dir>/final` atomically; LoRA
  adapters (peft, optional: `pip install peft`) are merged into it, so `final` is a plain model directory for
  `training.grpo.run_grpo`, `training.evaluation.sample_and_score` or `seedwheel serve`.
- **In the pipeline** (`sft_checkpoint`): `warm_up_tasks` picks the `sft_families`' tasks, `warm_up_digest` names
  the run folder (a rerun resumes there) and `imitated_tasks` are the tasks its manifest records.

Measured on 2 shared CPU cores (tiny Qwen2-style model, hidden 32, batch 4, ~40-token rows): ~0.05-0.1 s a step.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import SeedwheelError
from training.checkpoints import (
    KEEP_CHECKPOINTS,
    MissingPeftError,
    last_complete_checkpoint,
    metrics_callback,
    peft_lora_config,
    run_digest,
    save_final,
    train_resuming,
)
from training.episodes import assistant_tokens, chat_messages, reference_turns
from training.evaluation import is_episode
from training.tracking import TrackedRun, TrackingConfig, attach_tensorboard, report_to, training_run
from validators.registry import VerifyContext

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

# Checkpoints per run when `save_steps` is not given: often enough that a killed run loses little, few enough that
# saving (weights + optimizer state) stays a small share of the time.
CHECKPOINTS_PER_RUN = 5
# How `sft_examples` builds its examples, part of the name of `sft_checkpoint`'s run folder: examples built another
# way train another model, so a folder of the old way is never resumed as this one. 2: episodes as played, turn by
# turn, and the loss on the assistant's tokens alone.
EXAMPLES_VERSION = 2


class SFTConfigError(SeedwheelError, ValueError):
    """SFT settings that cannot run (a bad number, an unknown override, LoRA without peft); says the fix."""


class SFTDataError(SeedwheelError, ValueError):
    """Tasks that cannot feed SFT: none has a reference, or a task is malformed (the message names it)."""


@dataclass(frozen=True)
class SFTSettings:
    """What an SFT run trains with; checks itself on construction.

    The defaults are the pipeline's (a warm-up for a real model); `dataclasses.asdict` of it is the config the
    pipeline names an SFT run folder by, so a field added here renames every run folder.

    Attributes:
        max_steps: optimizer steps in total, counting steps done before a resume.
        learning_rate: peak learning rate (linear decay, as `trl.SFTConfig`'s default schedule).
        batch_size: examples per device per step.
        max_length: longest tokenized example (prompt + reference); longer ones are cut to it (`run_sft`).
        use_lora: train LoRA adapters (needs `peft`: `pip install peft`); `final` holds the merged model.

    Raises:
        SFTConfigError: a number that cannot run, with the usual range.

    Example:
        >>> SFTSettings(max_steps=100, learning_rate=1e-3).batch_size
        8
        >>> SFTSettings(max_steps=0)
        Traceback (most recent call last):
        ...
        training.sft.SFTConfigError: SFT settings: max_steps=0 must be >= 1 (50-500 is usual for a warm-up)
    """

    max_steps: int = 200
    learning_rate: float = 2e-5
    batch_size: int = 8
    max_length: int = 2048
    use_lora: bool = False

    def __post_init__(self) -> None:
        problems = []
        if self.max_steps < 1:
            problems.append(f"max_steps={self.max_steps} must be >= 1 (50-500 is usual for a warm-up)")
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            problems.append(
                f"learning_rate={self.learning_rate} must be > 0 (1e-5..5e-4 for real models, ~1e-3 tiny ones)"
            )
        if self.batch_size < 1:
            problems.append(f"batch_size={self.batch_size} must be >= 1")
        if self.max_length < 16:
            problems.append(
                f"max_length={self.max_length} must be >= 16 tokens (prompt + reference; 2048 is the default)"
            )
        if problems:
            raise SFTConfigError("SFT settings: " + " | ".join(problems))


@dataclass(frozen=True)
class SFTResult:
    """What an SFT run produced.

    Attributes:
        checkpoint_dir: `<output_dir>/final`, the trained model and tokenizer (a complete plain model directory).
        steps: the trainer's global step at the end (including steps done before a resume).
        train_rows: examples trained on (tasks with a reference whose answer starts within `max_length`).
        skipped_rows: tasks left out for having no reference.
        too_long_rows: tasks left out because their prompt alone fills `max_length` tokens.
        metrics: every logged metrics dict, in order, each with its `step` (`loss`, `grad_norm`,
            `mean_token_accuracy`, `num_tokens`, `tokens_per_second`, ...; the last one has `train_runtime`).
        train_seconds: wall time of `trainer.train()`.
        resumed_from: the checkpoint this run resumed from, or None for a fresh start.
        tracked: the MLflow run and TensorBoard folder it reported to (`training.tracking`); None: not tracked.
    """

    checkpoint_dir: Path
    steps: int
    train_rows: int
    skipped_rows: int
    too_long_rows: int
    metrics: list[dict[str, Any]]
    train_seconds: float
    resumed_from: str | None
    tracked: TrackedRun | None = None

    def _values(self, key: str) -> list[Any]:
        return [record[key] for record in self.metrics if record.get(key) is not None]

    def summary(self) -> dict[str, Any]:
        """A JSON-ready digest: paths, counts, first and last loss, token accuracy and throughput.

        Example:
            >>> run_sft(model_dir, tasks, "runs/sft").summary()["final_loss"]  # doctest: +SKIP
            0.81
        """
        losses = self._values("loss")
        accuracy = self._values("mean_token_accuracy")
        tokens = self._values("num_tokens")
        return {
            "checkpoint_dir": str(self.checkpoint_dir),
            "steps": self.steps,
            "train_rows": self.train_rows,
            "skipped_rows": self.skipped_rows,
            "too_long_rows": self.too_long_rows,
            "first_loss": losses[0] if losses else None,
            "final_loss": losses[-1] if losses else None,
            "final_mean_token_accuracy": accuracy[-1] if accuracy else None,
            "num_tokens": tokens[-1] if tokens else None,
            "tokens_per_second": tokens[-1] / self.train_seconds if tokens and self.train_seconds > 0 else None,
            "train_seconds": round(self.train_seconds, 3),
            "resumed_from": self.resumed_from,
            "tracked": self.tracked.summary() if self.tracked else None,
        }


def _prompt_messages(task: Mapping[str, Any]) -> list[dict[str, str]]:
    prompt = task.get("prompt")
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if (
        isinstance(prompt, Sequence)
        and prompt
        and all(isinstance(m, Mapping) and isinstance(m.get("content"), str) and m.get("role") for m in prompt)
    ):
        # Only role and content: every row then has the same columns, which Arrow (datasets) needs.
        return [{"role": str(m["role"]), "content": m["content"]} for m in prompt]
    raise SFTDataError(
        f"task {task.get('task_id', '?')}: prompt must be a string or chat messages [{{role, content}}], "
        f"got {type(prompt).__name__}; fix the task record (validators.tasks checks it)"
    )


def sft_examples(
    tasks: Iterable[Mapping[str, Any]], context: VerifyContext | None = None
) -> tuple[list[dict[str, Any]], int]:
    """Prompt-completion SFT examples from task records: the prompt messages, and the reference as the answer.

    Args:
        tasks: task records with `prompt` (chat messages or a string) and `reference` (a completion that passes
            the task's verifier, or None).
        context: where the environments of `episode` tasks find their fixtures (the shop's database); None:
            `VerifyContext()`.

    Returns:
        `(examples, skipped)`: one `{"prompt": [...], "completion": [...]}` per task with a non-empty string
        reference, in order (the completion is one assistant message, or an episode's turns with their tool
        results), and how many tasks were skipped for having none.

    Raises:
        SFTDataError: a task with a reference has a malformed prompt.

    Example:
        >>> task = {"prompt": [{"role": "user", "content": "2+2?"}], "reference": "#### 4"}
        >>> examples, skipped = sft_examples([task, {"prompt": "1+1?", "reference": None}])
        >>> examples[0]["completion"], skipped
        ([{'role': 'assistant', 'content': '#### 4'}], 1)
    """
    tasks = list(tasks)
    referenced = [task for task in tasks if isinstance(task.get("reference"), str) and task["reference"].strip()]
    prompts = [_prompt_messages(task) for task in referenced]  # a malformed one fails before any episode is played
    played = iter(reference_turns([task for task in referenced if is_episode(task)], context or VerifyContext()))
    examples = [
        {
            "prompt": prompt,
            "completion": chat_messages(next(played))
            if is_episode(task)
            else [{"role": "assistant", "content": task["reference"]}],
        }
        for task, prompt in zip(referenced, prompts, strict=True)
    ]
    return examples, len(tasks) - len(referenced)


def warm_up_tasks(tasks: Iterable[Mapping[str, Any]], families: Collection[str] | None) -> list[Mapping[str, Any]]:
    """The tasks a pipeline warm-up trains on: those of `families` (every family's when None), in order.

    A short warm-up is better spent on the formats the policy can learn in it than spread thin over all of them;
    an empty list means none of `families` is in the split (the pipeline then starts GRPO from the base model).

    Example:
        >>> tasks = [{"task_id": "a", "family": "sql"}, {"task_id": "b", "family": "tool_call"}]
        >>> [t["task_id"] for t in warm_up_tasks(tasks, ["tool_call"])], len(warm_up_tasks(tasks, None))
        (['b'], 2)
    """
    return [task for task in tasks if families is None or task["family"] in families]


def warm_up_digest(model: str, tasks: Sequence[Mapping[str, Any]], settings: SFTSettings) -> str:
    """The digest that names a pipeline warm-up's run folder and manifest (`training.checkpoints.run_digest`).

    It covers the model, the tasks, every `SFTSettings` field and how the examples are built: a field added to
    `SFTSettings`, or a new `EXAMPLES_VERSION`, renames them, so a folder trained another way is never resumed.
    """
    return run_digest(model, [t["task_id"] for t in tasks], {**asdict(settings), "examples": EXAMPLES_VERSION})


def imitated_tasks(tasks: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The tasks a warm-up imitates, those with a reference (`sft_examples` skips the others): its manifest's.

    Example:
        >>> [t["task_id"] for t in imitated_tasks([{"task_id": "a", "reference": "#### 4"}, {"task_id": "b"}])]
        ['a']
    """
    return [task for task in tasks if task.get("reference")]


def tokenized_rows(
    tokenizer: PreTrainedTokenizerBase, examples: Iterable[Mapping[str, Any]], max_length: int
) -> list[dict[str, list[int]]]:
    """The examples as TRL trains on them: token ids and the mask of what the assistant wrote, cut to `max_length`
    tokens; an example whose answer starts after that has nothing left to learn from and is left out."""
    rows = []
    for example in examples:
        ids, mask = assistant_tokens(tokenizer, example["prompt"], example["completion"])
        if any(mask[:max_length]):
            rows.append({"input_ids": ids[:max_length], "completion_mask": mask[:max_length]})
    return rows


def run_sft(
    model_path: str | os.PathLike[str],
    tasks: Sequence[Mapping[str, Any]],
    output_dir: str | os.PathLike[str],
    *,
    settings: SFTSettings | None = None,
    seed: int = 0,
    on_metrics: Callable[[dict[str, Any]], None] | None = None,
    overrides: Mapping[str, Any] | None = None,
    save_steps: int | None = None,
    context: VerifyContext | None = None,
    lora_r: int = 16,
    lora_alpha: float = 32.0,
    lora_dropout: float = 0.05,
    lora_target_modules: Sequence[str] | str = "all-linear",
    tracking: TrackingConfig | None = None,
) -> SFTResult:
    """Supervised fine-tuning on the tasks' references (loss on the answer only); resume when checkpoints exist.

    Args:
        model_path: a model directory (e.g. `training.tiny_model.build_tiny_model`) or a hub id.
        tasks: task records; those without a reference are skipped and counted.
        output_dir: the run folder: `checkpoint-N` folders and, at the end, `final`.
        settings: steps, learning rate, batch size, length and LoRA or not; None: `SFTSettings()`.
        seed: seed for initialisation of adapters, data order and dropout.
        on_metrics: called with each logged metrics dict as training goes (see `training.checkpoints`).
        overrides: any `trl.SFTConfig` fields, applied last (e.g. `{"logging_steps": 5, "warmup_steps": 10}`).
        save_steps: checkpoint every this many steps; None saves about 5 times per run (and at the end).
        context: where `episode` tasks' environments find their fixtures (see `sft_examples`).
        lora_r: LoRA rank.
        lora_alpha: LoRA alpha.
        lora_dropout: LoRA dropout.
        lora_target_modules: LoRA target modules, or `"all-linear"`.
        tracking: report to MLflow and TensorBoard (`training.tracking.training_run`; the run is named by the
            `run_name` override, else by the output folder); None: `report_to=[]`.

    Returns:
        An `SFTResult`; the model and tokenizer are in `result.checkpoint_dir` (`<output_dir>/final`).

    Raises:
        SFTDataError: no task has a reference, or a task's prompt is malformed.
        SFTConfigError: an override `trl.SFTConfig` does not know, or LoRA without peft.

    Example:
        >>> settings = SFTSettings(max_steps=100, learning_rate=1e-3)
        >>> result = run_sft(model_dir, train_tasks, "runs/sft", settings=settings)  # doctest: +SKIP
        >>> result.summary()["final_loss"], result.checkpoint_dir  # doctest: +SKIP
        (0.42, PosixPath('runs/sft/final'))
    """
    settings = settings or SFTSettings()
    examples, skipped = sft_examples(tasks, context)
    if not examples:
        raise SFTDataError(
            f"none of the {skipped} tasks has a reference, so there is nothing to imitate. SFT needs tasks whose "
            "`reference` is a known-good completion (validated tasks have one); add references to the seeds or "
            "skip the warm-up and train with GRPO alone."
        )
    lora = None
    if settings.use_lora:
        try:
            lora = peft_lora_config(
                r=lora_r, alpha=lora_alpha, dropout=lora_dropout, target_modules=lora_target_modules
            )
        except MissingPeftError as exc:
            raise SFTConfigError(f"use_lora=True: {exc}") from None

    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import SFTConfig

    from training.answer_loss import AnswerLossSFTTrainer
    from training.grpo import runtime_defaults

    output = Path(output_dir)
    trainer_args: dict[str, Any] = {
        **runtime_defaults(prefer_vllm=False),
        "output_dir": str(output),
        "max_steps": settings.max_steps,
        "learning_rate": settings.learning_rate,
        "per_device_train_batch_size": settings.batch_size,
        # Cut to max_length below: TRL leaves a padding-free batch uncut, and refuses one with a max_length.
        "max_length": None,
        "padding_free": True,
        "seed": seed,
        "completion_only_loss": True,
        "logging_steps": 1,
        "save_steps": save_steps or max(1, settings.max_steps // CHECKPOINTS_PER_RUN),
        "save_total_limit": KEEP_CHECKPOINTS,
    }
    trainer_args.update(overrides or {})
    try:
        config = SFTConfig(**trainer_args)
    except TypeError as exc:
        raise SFTConfigError(f"overrides: {exc}; use trl.SFTConfig field names") from None

    model_name = os.fspath(model_path)
    tokenizer = AutoTokenizer.from_pretrained(model_name)
    # Tokenized here, with the mask TRL's completion_only_loss applies: only what the assistant wrote is learnt.
    rows = tokenized_rows(tokenizer, examples, settings.max_length)
    too_long = len(examples) - len(rows)
    if not rows:
        raise SFTDataError(
            f"every one of the {len(examples)} examples has a prompt of max_length={settings.max_length} tokens or "
            "more, so no answer token is left to learn from; raise max_length (sft_max_length in the pipeline)"
        )
    dataset = Dataset.from_list(rows)
    resume = last_complete_checkpoint(output)
    if resume is not None:
        logger.info("Resuming SFT from %s", resume)
    callback = metrics_callback(on_metrics)
    with training_run(tracking, output, stage="sft", name=config.run_name or output.name) as tracked:
        config.report_to = report_to(config.report_to, tracked)
        trainer = AnswerLossSFTTrainer(
            model=model_name,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[callback],
            peft_config=lora,
        )
        attach_tensorboard(trainer, tracked)
        logger.info(
            "SFT: %d examples (%d tasks without reference and %d with a prompt over max_length skipped), %s",
            len(rows),
            skipped,
            too_long,
            settings,
        )
        started = time.perf_counter()
        train_resuming(trainer, resume)
        seconds = time.perf_counter() - started
    final = save_final(trainer, tokenizer, output, settings.use_lora)
    steps = trainer.state.global_step
    logger.info("SFT done: %d steps in %.1f s; model in %s", steps, seconds, final)
    return SFTResult(
        checkpoint_dir=final,
        steps=steps,
        train_rows=len(rows),
        skipped_rows=skipped,
        too_long_rows=too_long,
        metrics=list(callback.history),
        train_seconds=seconds,
        resumed_from=str(resume) if resume else None,
        tracked=tracked,
    )
