"""The GRPO run behind the `grpo_checkpoint` asset: TRL's `GRPOTrainer` on an exported split, rewarded by verifiers.

Nothing here forks the trainer. seedwheel plugs into TRL 1.16 at its three documented seams:

- **config**: `SeedwheelGRPOConfig` is a dataclass subclass of `trl.GRPOConfig`. Every TRL field (`loss_type`
  "dapo"/"dr_grpo"/"grpo", `epsilon_high`, `importance_sampling_level="sequence"` for GSPO, `beta`,
  `num_generations`, `use_vllm`/`vllm_mode`, `save_steps`, ...) passes through untouched; seedwheel adds the train
  file, reward weights per verifier, a prompt-length cap and LoRA settings, and checks the combination once in
  `__post_init__` with messages that give the numbers and the fix.
- **rewards**: `validators.rewards.build_reward_funcs` turns `reward_weights_by_verifier` into one
  `VerifierReward` per verifier (metric `rewards/<name>/mean`) and TRL's `reward_weights`.
- **callbacks**: a `TrainerCallback` forwards every `on_log` metrics dict to `on_metrics` as it happens (the
  Pipes child streams them to Dagster).

`import training.grpo` stays cheap (no torch/transformers/trl): the Dagster code location imports its package on
every step. The config class therefore subclasses `trl.GRPOConfig` on first use: `SeedwheelGRPOConfig` is
resolved by the module's `__getattr__` (PEP 562) through `grpo_config_class()`, which builds the class once and
registers it under this module's name, so `from training.grpo import SeedwheelGRPOConfig`, `isinstance` and
pickling (the trainer pickles its args into every checkpoint as `training_args.bin`) all work as for a class
defined at top level.

Resuming: `run_grpo` resumes from the newest *complete* `checkpoint-N` in `output_dir` (transformers writes
`trainer_state.json` last, so a checkpoint without it was cut off by a kill and is skipped with a warning), which
is `trainer.train(resume_from_checkpoint=True)` minus that failure mode. The final model and tokenizer go to
`<output_dir>/final`, written beside it and renamed into place, so a `final` folder is always complete. These
helpers live in `training.checkpoints`, shared with the SFT warm-up (`training.sft`).

Measured on 2 shared CPU cores (Qwen2-style tiny model, hidden 32, batch 4, 2 generations, 8 new tokens):
~0.1-0.3 s per step after a ~1 s first step; importing torch + transformers + trl costs ~10-15 s per process.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from core import SeedwheelError
from training.checkpoints import (
    PEFT_HINT,
    MetricsSink,
    MissingPeftError,
    last_complete_checkpoint,
    metrics_callback,
    peft_available,
    peft_lora_config,
    save_final,
    train_resuming,
)
from training.tracking import TrackedRun, TrackingConfig, attach_tensorboard, report_to, training_run
from validators.registry import REGISTRY, UnknownVerifierError
from validators.rewards import VERIFIER_COLUMN, RewardConfigError, build_reward_funcs
from validators.verifiers.episode import Episode

if TYPE_CHECKING:
    from datasets import Dataset
    from transformers import PreTrainedTokenizerBase
    from trl import GRPOConfig

    from training.grpo_episodes import EpisodeRollouts

logger = logging.getLogger(__name__)

PROMPT_COLUMN = "prompt"
VLLM_MODES = ("colocate", "server")
GPU_EXTRA_HINT = "pip install 'seedwheel[gpu]'  (the `gpu` extra: vllm>=0.22,<0.32)"


class GRPOConfigError(SeedwheelError, ValueError):
    """A GRPO configuration that cannot run; the message gives the numbers and the fix."""


class GRPODataError(SeedwheelError, ValueError):
    """A train file that cannot feed GRPO: missing, without the needed columns, or empty after filtering."""


def cpu_defaults() -> dict[str, Any]:
    """`GRPOConfig` settings for training on CPU with TRL 1.16 / transformers 5.2x.

    Returns:
        `use_cpu=True` (otherwise the default bf16 fails without a GPU), `bf16=False`,
        `activation_checkpointing=False` (transformers 5.2x's name; TRL's base config turns its deprecated alias
        `gradient_checkpointing` on by default, which only costs time on tiny CPU models) and `report_to=[]`.

    Example:
        >>> cfg = SeedwheelGRPOConfig(output_dir="out", train_file="train.parquet", **cpu_defaults())  # doctest: +SKIP
    """
    return {"use_cpu": True, "bf16": False, "activation_checkpointing": False, "report_to": []}


def vllm_available() -> bool:
    """Whether `vllm` is importable (found without importing it: importing vllm is slow)."""
    return importlib.util.find_spec("vllm") is not None


def runtime_defaults(*, prefer_vllm: bool = True, vllm_mode: str = "colocate") -> dict[str, Any]:
    """Settings for the machine this runs on: `cpu_defaults()` without a CUDA GPU, else bf16 and, when installed, vLLM.

    Args:
        prefer_vllm: generate with vLLM when a GPU and the `vllm` package are present.
        vllm_mode: `"colocate"` (vLLM shares the training GPU, no server to run) or `"server"` (a separate
            `trl vllm-serve` process; give `vllm_server_base_url` or host/port in the config).

    Returns:
        A dict of `GRPOConfig` keyword arguments; explicit config values should be applied over it.

    Raises:
        GRPOConfigError: `vllm_mode` is not one of `colocate`, `server`.

    Example:
        >>> runtime_defaults()  # on a machine without a GPU  # doctest: +SKIP
        {'use_cpu': True, 'bf16': False, 'activation_checkpointing': False, 'report_to': []}
    """
    if vllm_mode not in VLLM_MODES:
        raise GRPOConfigError(f"vllm_mode must be one of {', '.join(VLLM_MODES)}, got {vllm_mode!r}")
    import torch

    if not torch.cuda.is_available():
        return cpu_defaults()
    defaults: dict[str, Any] = {"bf16": torch.cuda.is_bf16_supported(), "report_to": []}
    if prefer_vllm and vllm_available():
        defaults.update(use_vllm=True, vllm_mode=vllm_mode)
    elif prefer_vllm:
        logger.info("A GPU but no vllm: generating with transformers. For vLLM generation: %s", GPU_EXTRA_HINT)
    return defaults


def _world_size() -> int:
    # Read before TrainingArguments sets up the distributed state (it is what torchrun/accelerate export).
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def _generation_batch_problem(config: Any) -> str | None:
    """TRL's generation-batch rule, restated in terms of prompts and completions, or None when it holds."""
    groups = config.num_generations
    world = _world_size()
    per_step = config.per_device_train_batch_size * world
    if config.generation_batch_size is not None and config.steps_per_generation is not None:
        return None  # TRL rejects this combination itself, with a clear message
    if config.generation_batch_size is not None:
        batch = config.generation_batch_size
        how = f"generation_batch_size={batch}"
    else:
        steps = config.steps_per_generation or config.gradient_accumulation_steps
        batch = per_step * steps
        how = (
            f"per_device_train_batch_size={config.per_device_train_batch_size} x {world} process(es) x "
            f"{'steps_per_generation' if config.steps_per_generation else 'gradient_accumulation_steps'}={steps}"
        )
    if batch % groups == 0:
        return None
    bigger = math.ceil(config.per_device_train_batch_size / groups) * groups
    divisors = [n for n in range(2, groups + 1) if batch % n == 0]
    fix = f"per_device_train_batch_size={bigger}" if config.generation_batch_size is None else "a multiple"
    if divisors:
        fix += f" or num_generations={divisors[-1]}"
    return (
        f"each generation round samples {batch} completions ({how}), which do not split into whole groups of "
        f"num_generations={groups} completions per prompt ({batch} / {groups} = {batch / groups:.2f} prompts). "
        f"GRPO compares completions within a prompt's group, so the round must hold whole groups. Use {fix}."
    )


def _seedwheel_problems(config: Any) -> list[str]:
    problems: list[str] = []
    if config.num_generations is None or config.num_generations < 2:
        problems.append(
            f"num_generations={config.num_generations}: GRPO needs at least 2 completions per prompt to compute an "
            "advantage (reward minus the group mean). Use num_generations >= 2 (4-16 is usual)."
        )
    else:
        problem = _generation_batch_problem(config)
        if problem:
            problems.append(problem)
    if config.max_prompt_tokens is not None and config.max_prompt_tokens < 1:
        problems.append(f"max_prompt_tokens={config.max_prompt_tokens} must be >= 1, or None to keep every prompt.")
    if config.max_episode_turns is not None and config.max_episode_turns < 1:
        problems.append(f"max_episode_turns={config.max_episode_turns} must be >= 1, or None for each task's own.")
    if config.max_completion_length is not None and config.max_completion_length < 1:
        problems.append(f"max_completion_length={config.max_completion_length} must be >= 1.")
    if config.remove_unused_columns:
        problems.append(
            f"remove_unused_columns=True would drop the '{VERIFIER_COLUMN}' column the verifier rewards read. "
            "Leave it False (GRPOConfig's default)."
        )
    if config.use_vllm:
        if config.vllm_mode not in VLLM_MODES:
            problems.append(f"vllm_mode={config.vllm_mode!r}: use one of {', '.join(VLLM_MODES)}.")
        if config.use_cpu:
            problems.append("use_vllm=True with use_cpu=True: vLLM generation needs a GPU. Drop one of them.")
        if not vllm_available():
            problems.append(f"use_vllm=True but the vllm package is not installed. Install it with {GPU_EXTRA_HINT}.")
    if config.use_lora:
        if not peft_available():
            problems.append(f"use_lora=True but the peft package is not installed. Install it with `{PEFT_HINT}`.")
        if config.lora_r < 1:
            problems.append(f"lora_r={config.lora_r} must be >= 1 (8-64 is usual).")
        if config.lora_alpha <= 0:
            problems.append(f"lora_alpha={config.lora_alpha} must be > 0 (often 2 x lora_r).")
        if not 0 <= config.lora_dropout < 1:
            problems.append(f"lora_dropout={config.lora_dropout} must be in [0, 1).")
    return problems


@dataclass
class SeedwheelGRPOFields:
    """The fields a seedwheel run adds to `trl.GRPOConfig`, declared once, without importing trl.

    `SeedwheelGRPOConfig` (built by `grpo_config_class`) subclasses `trl.GRPOConfig` and this; its docstring
    describes the fields.
    """

    train_file: str | None = field(default=None, metadata={"help": "The exported training split (Parquet)."})
    reward_weights_by_verifier: dict[str, float] = field(
        default_factory=lambda: {"*": 1.0},
        metadata={"help": "Verifier name -> reward weight; '*' scores every row with its own verifier."},
    )
    max_prompt_tokens: int | None = field(
        default=512, metadata={"help": "Drop prompts longer than this many tokens (chat template applied)."}
    )
    max_episode_turns: int | None = field(
        default=None,
        metadata={"help": "Lower every episode task's turn limit to this (its reward replays with the same)."},
    )
    use_lora: bool = field(default=False, metadata={"help": "Train LoRA adapters (needs peft)."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: float = field(default=32.0, metadata={"help": "LoRA alpha."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    lora_target_modules: list[str] | str = field(
        default="all-linear", metadata={"help": "LoRA target modules, or 'all-linear'."}
    )


if TYPE_CHECKING:

    class SeedwheelGRPOConfig(GRPOConfig, SeedwheelGRPOFields):
        """What `grpo_config_class()` builds (at run time through the module's `__getattr__`), for the type checker."""


@functools.cache
def grpo_config_class() -> type[SeedwheelGRPOConfig]:
    """The `SeedwheelGRPOConfig` class (a `trl.GRPOConfig` subclass), built on first call; imports trl.

    Returns:
        The class; the same object on every call, also reachable as `training.grpo.SeedwheelGRPOConfig`.

    Example:
        >>> Config = grpo_config_class()
        >>> Config(output_dir="out", train_file="train.parquet", num_generations=4, **cpu_defaults()).loss_type
        'dapo'
    """
    from trl import GRPOConfig

    @dataclass
    class _SeedwheelGRPOConfig(GRPOConfig, SeedwheelGRPOFields):
        """`trl.GRPOConfig` plus what a seedwheel run needs; every TRL field passes through unchanged.

        Args:
            train_file: the exported training split (`training.export.export_split`'s Parquet).
            reward_weights_by_verifier: verifier name -> weight, mapped through
                `validators.rewards.build_reward_funcs`; `"*"` scores every row with its own verifier. Sets TRL's
                `reward_weights` (leave that unset).
            max_prompt_tokens: prompts longer than this (chat template applied) are dropped before training, with
                a logged count; TRL 1.16 removed `max_prompt_length`. None keeps every prompt.
            max_episode_turns: lowers every `episode` task's turn limit for its rollouts and its reward's replay
                (`training.grpo_episodes`); None keeps each task's own.
            use_lora: train LoRA adapters (needs `peft`); the final model is saved merged.
            lora_r: LoRA rank.
            lora_alpha: LoRA scaling numerator.
            lora_dropout: dropout on the LoRA path.
            lora_target_modules: module names, or `"all-linear"`.

        Example:
            >>> SeedwheelGRPOConfig(output_dir="out", train_file="train.parquet", num_generations=4,
            ...     importance_sampling_level="sequence", loss_type="grpo", **cpu_defaults())  # GSPO  # doctest: +SKIP
        """

        def __post_init__(self) -> None:
            if isinstance(self.train_file, os.PathLike):
                self.train_file = os.fspath(self.train_file)  # the trainer serialises its args to JSON
            try:
                _, weights = build_reward_funcs(self.reward_weights_by_verifier)
            except RewardConfigError as exc:
                raise GRPOConfigError(f"reward_weights_by_verifier: {exc}") from None
            if self.reward_weights is not None and [float(w) for w in self.reward_weights] != weights:
                raise GRPOConfigError(
                    f"reward_weights={self.reward_weights} disagrees with reward_weights_by_verifier="
                    f"{self.reward_weights_by_verifier}; set weights only in reward_weights_by_verifier."
                )
            self.reward_weights = weights
            problems = _seedwheel_problems(self)
            if problems:
                raise GRPOConfigError("GRPO config: " + " | ".join(problems))
            super().__post_init__()

    _SeedwheelGRPOConfig.__module__ = __name__
    _SeedwheelGRPOConfig.__name__ = _SeedwheelGRPOConfig.__qualname__ = "SeedwheelGRPOConfig"
    # The class the TYPE_CHECKING declaration above describes: GRPOConfig + SeedwheelGRPOFields.
    return cast("type[SeedwheelGRPOConfig]", _SeedwheelGRPOConfig)


def __getattr__(name: str) -> Any:
    # PEP 562: `SeedwheelGRPOConfig` exists only once trl is imported, on first access (and for unpickling).
    if name == "SeedwheelGRPOConfig":
        return grpo_config_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class GRPOResult:
    """What a GRPO run produced.

    Attributes:
        checkpoint_dir: `<output_dir>/final`, the trained model and tokenizer (a plain model directory).
        metrics_history: every logged metrics dict, in order, each with its `step`.
        steps: the trainer's global step at the end (including steps done before a resume).
        resumed_from: the checkpoint this run resumed from, or None for a fresh start.
        verifier_versions: verifier name -> versions the training rows were scored with.
        train_rows: rows trained on (after the prompt-length filter).
        filtered_task_ids: task ids of the rows dropped for prompts longer than `max_prompt_tokens` (the
            checkpoint's manifest leaves them out).
        train_seconds: wall time of `trainer.train()`.
        episode_end_reasons: how the episodes played for training ended (`training.grpo_episodes`); empty
            when the split holds no episode task.
        episode_tool_calls: tool calls those episodes made.
        tracked: the MLflow run and TensorBoard folder it reported to (`training.tracking`); None: not tracked.
    """

    checkpoint_dir: Path
    metrics_history: list[dict[str, Any]]
    steps: int
    resumed_from: Path | None
    verifier_versions: dict[str, list[int]]
    train_rows: int
    filtered_task_ids: list[str]
    train_seconds: float = 0.0
    episode_end_reasons: dict[str, int] = field(default_factory=dict)
    episode_tool_calls: int = 0
    tracked: TrackedRun | None = None

    @property
    def filtered_rows(self) -> int:
        """Rows dropped for prompts longer than `max_prompt_tokens`."""
        return len(self.filtered_task_ids)

    def last_metric(self, key: str) -> Any:
        """The last logged non-None value of `key` (e.g. `"reward"`), or None."""
        for record in reversed(self.metrics_history):
            if record.get(key) is not None:
                return record[key]
        return None

    def summary(self) -> dict[str, Any]:
        """A JSON-ready digest: paths, counts, the last reward mean and per-reward means."""
        rewards = sorted(
            {k for r in self.metrics_history for k in r if k.startswith("rewards/") and k.endswith("/mean")}
        )
        return {
            "checkpoint_dir": str(self.checkpoint_dir),
            "steps": self.steps,
            "resumed_from": str(self.resumed_from) if self.resumed_from else None,
            "final_reward_mean": self.last_metric("reward"),
            "reward_means": {key: self.last_metric(key) for key in rewards},
            "train_rows": self.train_rows,
            "filtered_rows": self.filtered_rows,
            "filtered_task_ids": self.filtered_task_ids,
            "verifier_versions": self.verifier_versions,
            "train_seconds": round(self.train_seconds, 3),
            "episode_end_reasons": self.episode_end_reasons,
            "episode_tool_calls": self.episode_tool_calls,
            "tracked": self.tracked.summary() if self.tracked else None,
        }


def reward_spread(metrics: Sequence[Mapping[str, Any]]) -> float | None:
    """The share of GRPO groups whose completions' rewards differ, averaged over logged steps; None if none logged.

    A group whose completions all paid the same (TRL's `frac_reward_zero_std`) has zero advantage and teaches
    nothing, so this is the run's learning signal: 0 means no gradient flowed from the rewards.

    Example:
        >>> reward_spread([{"frac_reward_zero_std": 0.0}, {"frac_reward_zero_std": 0.5}, {"loss": 1.0}])
        0.75
    """
    spreads = [1.0 - float(m["frac_reward_zero_std"]) for m in metrics if m.get("frac_reward_zero_std") is not None]
    return sum(spreads) / len(spreads) if spreads else None


def load_train_split(train_file: str | os.PathLike[str]) -> Dataset:
    """The exported split as a `datasets.Dataset`, read with `load_dataset("parquet")` and held in memory.

    Args:
        train_file: the Parquet written by `training.export.export_split`.

    Returns:
        The dataset; its `prompt` column holds chat messages and `verifier` the spec as JSON text.

    Raises:
        GRPODataError: the file is missing, or lacks the `prompt` or `verifier` column.

    Example:
        >>> load_train_split("export/train.parquet").column_names  # doctest: +SKIP
        ['task_id', 'family', 'prompt', 'verifier', 'reference', 'seed_id']
    """
    import tempfile

    from datasets import load_dataset

    path = Path(train_file)
    if not path.is_file():
        raise GRPODataError(f"train file {path} does not exist; export a split with training.export.export_split")
    # A throwaway cache: `keep_in_memory` leaves nothing pointing into it, so the user's HF cache stays untouched.
    with tempfile.TemporaryDirectory(prefix="seedwheel-grpo-data-") as cache:
        dataset = load_dataset("parquet", data_files=str(path), split="train", cache_dir=cache, keep_in_memory=True)
    missing = [c for c in (PROMPT_COLUMN, VERIFIER_COLUMN) if c not in dataset.column_names]
    if missing:
        raise GRPODataError(
            f"train file {path} lacks column(s) {', '.join(missing)} (has {', '.join(dataset.column_names)}); "
            "write it with training.export.export_split"
        )
    return dataset


def prompt_token_counts(
    prompts: Sequence[Any], tokenizer: PreTrainedTokenizerBase, chat_template_kwargs: Mapping[str, Any] | None = None
) -> list[int]:
    """Prompt lengths in tokens as the trainer sees them: chat template with the generation prompt applied.

    Args:
        prompts: message lists (conversational) or strings.
        tokenizer: the policy's tokenizer.
        chat_template_kwargs: extra template variables, as in `GRPOConfig.chat_template_kwargs`.

    Returns:
        One count per prompt.

    Example:
        >>> prompt_token_counts([[{"role": "user", "content": "2+2?"}]], tokenizer)  # doctest: +SKIP
        [31]
    """
    counts = []
    for prompt in prompts:
        if isinstance(prompt, str):
            text = prompt
        else:
            rendered = tokenizer.apply_chat_template(
                list(prompt), tokenize=False, add_generation_prompt=True, **dict(chat_template_kwargs or {})
            )
            assert isinstance(rendered, str)  # tokenize=False: the template's text, not token ids
            text = rendered
        counts.append(len(tokenizer(text, add_special_tokens=False)["input_ids"]))
    return counts


def filter_long_prompts(
    dataset: Dataset,
    tokenizer: PreTrainedTokenizerBase,
    max_prompt_tokens: int | None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> tuple[Dataset, list[str]]:
    """Drop rows whose prompt is longer than `max_prompt_tokens`, logging how many and which.

    TRL 1.16 no longer truncates prompts (`max_prompt_length` was removed); a truncated prompt would also lose
    the question, so dropping is the honest choice.

    Args:
        dataset: rows with a `prompt` column.
        tokenizer: the policy's tokenizer.
        max_prompt_tokens: the cap; None keeps every row.
        chat_template_kwargs: as in `GRPOConfig.chat_template_kwargs`.

    Returns:
        `(kept_dataset, dropped_task_ids)` (row numbers as text when the rows have no `task_id`).

    Example:
        >>> kept, dropped = filter_long_prompts(dataset, tokenizer, 256)  # doctest: +SKIP
    """
    if max_prompt_tokens is None:
        return dataset, []
    counts = prompt_token_counts(dataset[PROMPT_COLUMN], tokenizer, chat_template_kwargs)
    keep = [i for i, n in enumerate(counts) if n <= max_prompt_tokens]
    ids = dataset["task_id"] if "task_id" in dataset.column_names else list(range(len(counts)))
    long_ids = [str(ids[i]) for i, n in enumerate(counts) if n > max_prompt_tokens]
    if long_ids:
        logger.warning(
            "Dropped %d of %d prompts longer than max_prompt_tokens=%d (longest %d tokens); tasks: %s%s",
            len(long_ids),
            len(counts),
            max_prompt_tokens,
            max(counts),
            ", ".join(long_ids[:10]),
            " ..." if len(long_ids) > 10 else "",
        )
        dataset = dataset.select(keep)
    return dataset, long_ids


def verifier_versions(specs: Sequence[Any]) -> dict[str, list[int]]:
    """Verifier name -> the versions that will score these rows (a spec without a version gets the latest).

    Args:
        specs: the `verifier` column: dicts or JSON text.

    Returns:
        Sorted versions per name; names the registry does not know are left out (and logged).

    Example:
        >>> verifier_versions(['{"name": "numeric_answer", "version": 1, "params": {"answer": 4}}'])
        {'numeric_answer': [1]}
    """
    found: dict[str, set[int]] = {}
    unknown: set[str] = set()
    for spec in specs:
        try:
            spec = json.loads(spec) if isinstance(spec, str) else spec
            name = spec["name"]
            version = spec.get("version") or REGISTRY.get(name).version
        except UnknownVerifierError:
            unknown.add(str(spec.get("name")))
            continue
        except (TypeError, KeyError, AttributeError, json.JSONDecodeError):
            unknown.add("(unreadable spec)")
            continue
        found.setdefault(name, set()).add(int(version))
    if unknown:
        logger.warning("Rows with unknown verifiers (their rewards will be None): %s", ", ".join(sorted(unknown)))
    return {name: sorted(versions) for name, versions in sorted(found.items())}


def lora_config(config: Any) -> Any:
    """A `peft.LoraConfig` from the config's LoRA fields, or None when `use_lora` is off.

    Raises:
        GRPOConfigError: `use_lora` is on and peft is not installed.
    """
    if not config.use_lora:
        return None
    try:
        return peft_lora_config(
            r=config.lora_r,
            alpha=config.lora_alpha,
            dropout=config.lora_dropout,
            target_modules=config.lora_target_modules,
        )
    except MissingPeftError as exc:
        raise GRPOConfigError(f"use_lora=True: {exc}") from None


def run_grpo(
    model_path: str | os.PathLike[str],
    config: GRPOConfig,
    *,
    on_metrics: MetricsSink | None = None,
    tracking: TrackingConfig | None = None,
) -> GRPOResult:
    """Train with GRPO on `config.train_file`, rewarded by the verifier registry; resume when checkpoints exist.

    Args:
        model_path: a model directory (e.g. `training.tiny_model.build_tiny_model`) or a hub id. A path, not a
            model object, so that `beta > 0` can load the reference model from it.
        config: a `SeedwheelGRPOConfig` (`output_dir` and `train_file` set).
        on_metrics: called with each logged metrics dict as training goes (see `metrics_callback`).
        tracking: report to MLflow and TensorBoard (`training.tracking.training_run`; the run is named by
            `config.run_name`, else by the output folder); None: `config.report_to` as given.

    Returns:
        A `GRPOResult`; the model and tokenizer are in `result.checkpoint_dir` (`<output_dir>/final`).

    Raises:
        GRPOConfigError: `config` is not a `SeedwheelGRPOConfig` or has no `train_file`.
        GRPODataError: the train file is missing, lacks columns, or no row survives the prompt-length filter.

    Example:
        >>> from training.grpo import SeedwheelGRPOConfig
        >>> config = SeedwheelGRPOConfig(output_dir="runs/grpo", train_file="export/train.parquet",
        ...     reward_weights_by_verifier={"numeric_answer": 1.0}, per_device_train_batch_size=8,
        ...     num_generations=4, max_completion_length=64, max_steps=100, save_steps=50, **cpu_defaults())
        >>> result = run_grpo(model_dir, config, on_metrics=lambda m: print(m.get("reward")))  # doctest: +SKIP
        >>> result.checkpoint_dir  # doctest: +SKIP
        PosixPath('runs/grpo/final')
    """
    config_cls = grpo_config_class()
    if not isinstance(config, config_cls):
        raise GRPOConfigError(
            f"run_grpo needs a SeedwheelGRPOConfig, got {type(config).__name__}; build it with "
            "training.grpo.SeedwheelGRPOConfig(...) (a trl.GRPOConfig subclass)"
        )
    if not config.train_file:
        raise GRPOConfigError("config.train_file is not set; point it at the exported train Parquet")

    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    model_name = os.fspath(model_path)
    # TrainingArguments.__post_init__ sets a default output_dir and parses a JSON chat_template_kwargs string.
    assert config.output_dir is not None and not isinstance(config.chat_template_kwargs, str)
    output_dir = Path(config.output_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_name)
    dataset = load_train_split(config.train_file)
    total = len(dataset)
    dataset, filtered = filter_long_prompts(dataset, tokenizer, config.max_prompt_tokens, config.chat_template_kwargs)
    if len(dataset) == 0:
        raise GRPODataError(
            f"no training rows left: all {total} prompts in {config.train_file} are longer than max_prompt_tokens="
            f"{config.max_prompt_tokens} tokens (or the file is empty). Raise max_prompt_tokens or shorten prompts."
        )
    # TRL's sampler draws whole generation rounds of distinct prompts and drops a short last one: with fewer
    # prompts than a round takes, every round is short and it runs 0 steps without a word.
    generation_batch, groups = config.generation_batch_size, config.num_generations
    assert generation_batch is not None and groups is not None  # GRPOConfig.__post_init__ sets both
    round_prompts = generation_batch // groups
    if len(dataset) < round_prompts:
        raise GRPODataError(
            f"{len(dataset)} training prompt(s) in {config.train_file} fill no generation round, which takes "
            f"{round_prompts} prompts ({generation_batch} completions in groups of num_generations={groups}), so TRL "
            f"would run 0 steps. Give more tasks, or lower per_device_train_batch_size to {len(dataset) * groups}."
        )
    dataset = cap_episode_turns(dataset, config.max_episode_turns)
    rollouts = _rollouts(dataset, bool(config.use_vllm))
    versions = verifier_versions(dataset[VERIFIER_COLUMN])
    reward_funcs, weights = build_reward_funcs(config.reward_weights_by_verifier)
    # Normally equal already (set in __post_init__); differs only if the mapping was edited after construction.
    config.reward_weights = weights
    resume = last_complete_checkpoint(output_dir)
    if resume is not None:
        logger.info("Resuming GRPO from %s", resume)
    callback = metrics_callback(on_metrics)
    with training_run(tracking, output_dir, stage="grpo", name=config.run_name or output_dir.name) as tracked:
        config.report_to = report_to(config.report_to, tracked)
        trainer = GRPOTrainer(
            model=model_name,
            reward_funcs=list(reward_funcs),  # as TRL's list of reward callables (a list's item type is fixed)
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[callback],
            peft_config=lora_config(config),
            rollout_func=rollouts,
        )
        attach_tensorboard(trainer, tracked)
        logger.info(
            "GRPO: %d rows (%d filtered), rewards %s, weights %s, max_steps=%s",
            len(dataset),
            len(filtered),
            [f.__name__ for f in reward_funcs],
            weights,
            config.max_steps,
        )
        started = time.perf_counter()
        train_resuming(trainer, resume)
        seconds = time.perf_counter() - started
    final = save_final(trainer, tokenizer, output_dir, config.use_lora)
    steps = trainer.state.global_step
    logger.info("GRPO done: %d steps in %.1f s; model in %s", steps, seconds, final)
    return GRPOResult(
        checkpoint_dir=final,
        metrics_history=list(callback.history),
        steps=steps,
        resumed_from=resume,
        verifier_versions=versions,
        train_rows=len(dataset),
        filtered_task_ids=filtered,
        train_seconds=seconds,
        episode_end_reasons=dict(rollouts.end_reasons) if rollouts else {},
        episode_tool_calls=rollouts.tool_calls if rollouts else 0,
        tracked=tracked,
    )


def cap_episode_turns(dataset: Dataset, max_turns: int | None) -> Dataset:
    """The split with every `episode` task's turn limit lowered to `max_turns` (None: unchanged).

    The rollout and the reward's replay both read the lowered limit from the `verifier` column, so an episode
    cut at the cap is judged as the cap ended it.

    Example:
        >>> cap_episode_turns(dataset, 4)[VERIFIER_COLUMN][0]  # doctest: +SKIP
        '{"name": "episode", "params": {"environment": "shop", ..., "limits": {"max_turns": 4}}}'
    """
    if max_turns is None:
        return dataset
    from training.episodes import capped

    specs = []
    for raw in dataset[VERIFIER_COLUMN]:
        spec = json.loads(raw) if isinstance(raw, str) else raw
        if spec.get("name") == Episode.name:
            spec = capped({"verifier": spec}, max_turns)["verifier"]
        specs.append(json.dumps(spec) if isinstance(raw, str) else spec)
    return dataset.remove_columns(VERIFIER_COLUMN).add_column(VERIFIER_COLUMN, specs)


def _rollouts(dataset: Dataset, use_vllm: bool) -> EpisodeRollouts | None:
    """TRL's rollout function: `episode` tasks play in their environments, and on the transformers backend every
    turn is sampled through the engine (`training.grpo_episodes.LiveEngineTurns`). None leaves a split without episodes
    to TRL's own vLLM generation."""
    from training.grpo_episodes import EpisodeRollouts, LiveEngineTurns, trainer_turns

    rollouts = EpisodeRollouts(dataset.to_list(), sample_turns=trainer_turns if use_vllm else LiveEngineTurns())
    if rollouts.tasks:
        logger.info("GRPO plays %d episode tasks in their environments (training.grpo_episodes)", len(rollouts.tasks))
    elif use_vllm:
        return None
    return rollouts
