"""What a GRPO run will cost, before it starts: tokens, FLOPs, wall time, memory, learning signal, and advice.

`plan_budget(workload, settings, shape, throughput)` turns what is measured on the data (`Workload`: prompt
lengths with the policy's tokenizer, the difficulty profile's sample lengths and pass rates) and what the run is
configured to do (`RunSettings`, read from the GRPO config with `trl.GRPOConfig`'s own defaults) into a `Budget`:

- **rollouts per step** (TRL's semantics: `per_device_train_batch_size` counts completions; each optimizer step
  trains `per_device_train_batch_size x gradient_accumulation_steps x GPUs` completions, and a generated batch is
  reused `num_iterations` times), **steps** (`max_steps`, else `num_train_epochs` over the prompts) and **epochs**;
- **tokens**: prompt tokens as measured, completion tokens as the samples' mean length (clipped to
  `max_completion_length`), or the whole budget when nothing was sampled;
- **FLOPs**: 2N per prefilled or generated token, 6N per trained token (4N with LoRA: no weight gradients for
  the frozen weights), plus 2N per trained token for each extra forward pass (a reference model when
  `beta > 0`, old log-probabilities when `num_iterations > 1`); N is the parameter count;
- **wall time and GPU hours** from `training/throughputs.csv` (generation and training tokens/s per device by
  model size, each row with its source and date); a size between rows is scaled from the nearest row by
  parameter count (compute-bound: tokens/s ~ 1/N), and GPUs are assumed to scale linearly (data parallel);
- **memory per device**: weights, gradients and two fp32 Adam moments (8 bytes per parameter) for full
  fine-tuning, the frozen weights plus the adapters' share for LoRA, and the rollouts' KV cache (2 x layers x
  key/value width x bytes per value x completions in a generation batch x (longest prompt + completion budget));
  activations and checkpoint saves are not counted;
- **signal**: a group of G completions of a task with pass rate p teaches nothing when all pass or all fail, so
  the expected share of groups with signal is the mean of 1 - p^G - (1 - p)^G over the profiled tasks;
- **the gate's reach**: the smallest pass@1 difference the promotion gate can show on the eval tasks
  (`detectable_difference`).

`Budget.advice` names what makes the run expensive or wasteful, with numbers. `calibrate(budget, measured)`
compares a plan with what the run then measured (`measured_run` reads the trainer's own log); `calibrate_plan`
does so only when the run is the one planned (same GRPO settings and task count, not resumed), and says whether
the plan was within `CALIBRATION_TOLERANCE`.

Example:
    >>> shape = ModelShape.approximate(8_000_000_000)
    >>> settings = RunSettings(num_generations=8, per_device_train_batch_size=8, max_steps=100)
    >>> workload = Workload(prompt_tokens=[200] * 64)
    >>> budget = plan_budget(workload, settings, shape, throughput_for(load_throughputs(), "h100", shape.parameters))
    >>> budget.rollouts_per_step, budget.steps
    (8, 100)
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist, fmean
from typing import TYPE_CHECKING, Any

from core import SeedwheelError
from training.grpo import prompt_token_counts
from training.stats import DEFAULT_CONFIDENCE

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from training.promotion import PromotionPolicy

THROUGHPUTS_FILE = Path(__file__).with_name("throughputs.csv")
CPU_DEVICE = "cpu-2core"
GPU_DEVICE = "h100"  # what a plan assumes for a run that is not pinned to the CPU
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
ADAM_BYTES = 8  # two fp32 moments per trained parameter
GIB = 2**30
MEMORY_KEYS = ("full", "lora", "full_sharded")  # the metadata names of `Budget.memory`'s plans, in order
# The approximate shape of a model known only by its size: N ~ 12 x layers x hidden^2 with hidden = 128 x layers.
ASPECT = 128
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmbt]?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}
# The GRPO config fields a plan reads (their defaults come from trl.GRPOConfig / SeedwheelGRPOConfig).
RUN_FIELDS = (
    "num_generations", "per_device_train_batch_size", "gradient_accumulation_steps", "num_iterations", "max_steps",
    "num_train_epochs", "max_completion_length", "max_prompt_tokens", "beta", "use_lora", "lora_r",
)  # fmt: skip
_KINDS = {"num_train_epochs": float, "beta": float, "use_lora": bool}  # the other RUN_FIELDS are integers
# How far a plan may miss the run's wall time, either way, before its calibration is flagged.
CALIBRATION_TOLERANCE = 2.0


class BudgetError(SeedwheelError, ValueError):
    """A plan that cannot be made: an unknown device, a model size that does not parse, a model without a shape."""


@dataclass(frozen=True)
class Throughput:
    """One row of `training/throughputs.csv`: how fast a device generates and trains a model of a size.

    Attributes:
        device: the name `--gpu` takes (`h100`, `a100`, `cpu-2core`).
        model: the model the figures were measured on.
        parameters: its parameter count.
        generation_tokens_per_s: completion tokens per second per device (vLLM on GPUs, `generate` on CPU).
        training_tokens_per_s: trained tokens (forward + backward + optimizer step) per second per device.
        dtype: the precision of weights and gradients (`bf16`, `fp32`).
        memory_gib: the device's memory.
        source: where the figures come from.
        as_of: when they were taken.
    """

    device: str
    model: str
    parameters: int
    generation_tokens_per_s: float
    training_tokens_per_s: float
    dtype: str
    memory_gib: float
    source: str
    as_of: str


def load_throughputs(path: str | os.PathLike[str] = THROUGHPUTS_FILE) -> list[Throughput]:
    """The throughput table.

    Raises:
        BudgetError: the file is missing, or a row lacks a column or has a value of the wrong kind (named).
    """
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as exc:
        raise BudgetError(f"cannot read the throughput table {path}: {exc.strerror or exc}") from None
    table = []
    for line, row in enumerate(rows, start=2):
        try:
            table.append(
                Throughput(
                    device=row["device"].strip().lower(),
                    model=row["model"],
                    parameters=int(row["parameters"]),
                    generation_tokens_per_s=float(row["generation_tokens_per_s"]),
                    training_tokens_per_s=float(row["training_tokens_per_s"]),
                    dtype=row["dtype"],
                    memory_gib=float(row["memory_gib"]),
                    source=row["source"],
                    as_of=row["as_of"],
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            columns = ", ".join(f.name for f in dataclasses.fields(Throughput))
            raise BudgetError(f"{path} line {line}: {exc!r}; every row needs {columns}") from None
        if table[-1].dtype not in DTYPE_BYTES:
            raise BudgetError(f"{path} line {line}: dtype {row['dtype']!r}; use one of {', '.join(DTYPE_BYTES)}")
    return table


@dataclass(frozen=True)
class DeviceRate:
    """The rates a plan uses for one device and model size, and where they come from."""

    row: Throughput
    generation_tokens_per_s: float
    training_tokens_per_s: float
    note: str


def throughput_for(table: Sequence[Throughput], device: str, parameters: int) -> DeviceRate:
    """The rates of `device` for a model of `parameters`: the row of the nearest size, scaled by size.

    Raises:
        BudgetError: `device` is not in the table (the message lists the known ones).

    Example:
        >>> rate = throughput_for(load_throughputs(), "h100", 16_060_522_496)
        >>> round(rate.training_tokens_per_s)
        3079
    """
    rows = [row for row in table if row.device == device.strip().lower()]
    if not rows:
        known = ", ".join(sorted({row.device for row in table}))
        raise BudgetError(f"unknown GPU {device!r}: the throughput table knows {known} (training/throughputs.csv)")
    row = min(rows, key=lambda r: abs(math.log(r.parameters / parameters)))
    scale = row.parameters / parameters
    note = f"{row.device} rates of {row.model} ({row.source}, {row.as_of})"
    if not math.isclose(scale, 1.0, rel_tol=0.01):
        note += f", scaled by parameter count {_count(row.parameters)} -> {_count(parameters)}"
    return DeviceRate(row, row.generation_tokens_per_s * scale, row.training_tokens_per_s * scale, note)


def parse_model_size(text: str) -> int:
    """A parameter count from `135M`, `0.5B`, `8B`, `70b` or a plain number.

    Raises:
        BudgetError: anything else, with examples of the format.

    Example:
        >>> parse_model_size("0.5B"), parse_model_size("135M")
        (500000000, 135000000)
    """
    match = _SIZE.match(text or "")
    if not match or float(match.group(1)) <= 0:
        raise BudgetError(
            f"--model-size {text!r}: give a parameter count as a number with an optional K/M/B/T suffix, "
            "e.g. 135M, 0.5B, 8B or 70B"
        )
    return round(float(match.group(1)) * _UNITS[match.group(2).lower()])


@dataclass(frozen=True)
class ModelShape:
    """What the memory and FLOP figures need to know about a model.

    Attributes:
        parameters: N.
        layers, hidden_size, intermediate_size: the transformer's shape.
        kv_dim: the key/value width per layer (key/value heads x head size).
        gated_mlp: three MLP matrices (Llama/Qwen style) rather than two.
        source: where the shape comes from (a config file, or the approximation used).
    """

    parameters: int
    layers: int
    hidden_size: int
    kv_dim: int
    intermediate_size: int
    gated_mlp: bool
    source: str

    @classmethod
    def approximate(cls, parameters: int) -> ModelShape:
        """A model known only by its size: N ~ 12 x layers x hidden^2, hidden = 128 x layers, full multi-head
        attention (no grouped-query attention: an upper bound on the KV cache) and an MLP of 4 x hidden.

        Example:
            >>> shape = ModelShape.approximate(8_000_000_000)
            >>> shape.layers, shape.hidden_size
            (34, 4352)
        """
        layers = max(1, round((parameters / (12 * ASPECT**2)) ** (1 / 3)))
        hidden = ASPECT * layers
        return cls(
            parameters=parameters,
            layers=layers,
            hidden_size=hidden,
            kv_dim=hidden,
            intermediate_size=4 * hidden,
            gated_mlp=False,
            source=f"approximated from {_count(parameters)} parameters: {layers} layers of width {hidden} "
            f"(N ~ 12 x layers x width^2, width = {ASPECT} x layers), no grouped-query attention",
        )

    @classmethod
    def from_config(cls, config: Mapping[str, Any], source: str) -> ModelShape:
        """The shape of a Llama/Qwen-style decoder from its `config.json` values; N counted from the shapes.

        Raises:
            BudgetError: a field the count needs is missing (named, with the `--model-size` alternative).
        """
        try:
            hidden = int(config["hidden_size"])
            layers = int(config["num_hidden_layers"])
            heads = int(config["num_attention_heads"])
            intermediate = int(config["intermediate_size"])
            vocab = int(config["vocab_size"])
        except (KeyError, TypeError, ValueError) as exc:
            raise BudgetError(
                f"{source}: the model config lacks {exc} (a Llama/Qwen-style decoder's shape is needed); "
                "pass --model-size instead"
            ) from None
        head_dim = int(config.get("head_dim") or hidden // heads)
        kv_dim = int(config.get("num_key_value_heads") or heads) * head_dim
        attention = hidden * heads * head_dim * 2 + hidden * kv_dim * 2
        per_layer = attention + 3 * hidden * intermediate + 2 * hidden
        embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", True) else 2)
        return cls(
            parameters=layers * per_layer + embeddings + hidden,
            layers=layers,
            hidden_size=hidden,
            kv_dim=kv_dim,
            intermediate_size=intermediate,
            gated_mlp=True,
            source=source,
        )

    @classmethod
    def from_model(cls, model: str | os.PathLike[str]) -> ModelShape:
        """The shape of a model directory or hub id, from its config (`transformers.AutoConfig`)."""
        from transformers import AutoConfig

        name = os.fspath(model)
        try:
            config = AutoConfig.from_pretrained(name)
        except (OSError, ValueError) as exc:
            raise BudgetError(f"cannot read the config of {name}: {exc}; pass --model-size instead") from None
        return cls.from_config(config.to_dict(), f"config of {name}")

    def lora_parameters(self, rank: int) -> int:
        """Adapter parameters for LoRA of `rank` on every linear layer (`all-linear`): rank x (in + out) each."""
        attention = 2 * (self.hidden_size + self.hidden_size) + 2 * (self.hidden_size + self.kv_dim)
        mlp = (3 if self.gated_mlp else 2) * (self.hidden_size + self.intermediate_size)
        return rank * self.layers * (attention + mlp)


@dataclass(frozen=True)
class RunSettings:
    """The GRPO settings a plan reads; `from_grpo` fills what a config leaves out with TRL's own defaults."""

    num_generations: int = 8
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    num_iterations: int = 1
    max_steps: int = -1
    num_train_epochs: float = 3.0
    max_completion_length: int = 512
    max_prompt_tokens: int | None = 512
    beta: float = 0.0
    use_lora: bool = False
    lora_r: int = 16

    @classmethod
    def from_grpo(cls, grpo: Mapping[str, Any]) -> RunSettings:
        """The settings of a `TrainingPolicy.grpo` mapping, the rest from `SeedwheelGRPOConfig`'s defaults.

        Imports trl (the defaults' one home). Raises `BudgetError` naming a value of the wrong kind.
        """
        from training.grpo import grpo_config_class

        defaults = {f.name: f.default for f in dataclasses.fields(grpo_config_class()) if f.name in RUN_FIELDS}
        values = {name: grpo.get(name, defaults[name]) for name in RUN_FIELDS}
        try:
            return cls(
                **{name: None if v is None else _KINDS.get(name, int)(v) for name, v in values.items()}  # type: ignore[arg-type]
            )
        except (TypeError, ValueError) as exc:
            raise BudgetError(f"GRPO settings {values}: {exc}") from None


@dataclass(frozen=True)
class GateSettings:
    """What the promotion gate will see: eval tasks, samples per task, and its rules (`PromotionPolicy`)."""

    eval_tasks: int
    samples: int
    min_improvement: float = 0.0
    min_tasks: int = 20
    confidence: float = DEFAULT_CONFIDENCE

    @classmethod
    def from_policy(cls, policy: PromotionPolicy, eval_tasks: int, samples: int) -> GateSettings:
        """What a gate with `policy` sees on `eval_tasks` tasks of `samples` completions each; the confidence is
        the default (`PromotionPolicy` has none of its own).

        Example:
            >>> from training.promotion import PromotionPolicy
            >>> GateSettings.from_policy(PromotionPolicy(min_improvement=0.02, min_tasks=30), 40, 4).min_tasks
            30
        """
        return cls(eval_tasks, samples, policy.min_improvement, policy.min_tasks)


@dataclass(frozen=True)
class AdviceLimits:
    """When the plan calls a run wasteful.

    Attributes:
        min_signal_fraction: flag a run whose expected share of groups with signal is below this.
        max_budget_over_length: flag a completion budget more than this many times the samples' mean length.
        target_difference: the pass@1 gain the gate should be able to show (it says how many eval tasks that needs).
        power: the chance the gate shows a true difference of `detectable_difference`.
    """

    min_signal_fraction: float = 0.5
    max_budget_over_length: float = 4.0
    target_difference: float = 0.05
    power: float = 0.8


@dataclass(frozen=True)
class Workload:
    """What the data says about the run, measured (nothing here is guessed unless `assumed` says so).

    Attributes:
        prompt_tokens: each GRPO prompt's length with the policy's tokenizer and chat template.
        completion_lengths: the difficulty profile's sample lengths in tokens (empty: none sampled).
        pass_rates: the profile's pass rate of each profiled task in the GRPO set.
        unprofiled: tasks in the GRPO set without a pass rate.
        labels: the profile's label counts over every training task (`never_solved`, ...).
        assumed: what was assumed instead of measured, for the report.
    """

    prompt_tokens: list[int]
    completion_lengths: list[int] = field(default_factory=list)
    pass_rates: list[float] = field(default_factory=list)
    unprofiled: int = 0
    labels: dict[str, int] = field(default_factory=dict)
    assumed: list[str] = field(default_factory=list)


def measure_workload(
    tasks: Sequence[Mapping[str, Any]],
    profile: Sequence[Mapping[str, Any]] | None,
    tokenizer: PreTrainedTokenizerBase,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> Workload:
    """Measure a GRPO run's data with the policy's tokenizer.

    Args:
        tasks: the training tasks (`task_id`, `prompt` as chat messages).
        profile: `difficulty_profile` rows (`task_id`, `solved`, `samples`, `label`, `in_grpo_set`, `rollouts`),
            or None when there is none: then every task is in the GRPO set and nothing was sampled.
        tokenizer: the policy's tokenizer.
        chat_template_kwargs: as in `GRPOConfig.chat_template_kwargs`.

    Returns:
        The prompts of the GRPO set (the profile's `in_grpo_set` tasks, as `grpo_checkpoint` picks them), the
        sample lengths of those tasks' rollouts (every profiled task's when they have none), their pass rates.

    Raises:
        BudgetError: no task is in the GRPO set.
    """
    assumed = []
    rows = {row["task_id"]: row for row in profile or []}
    if profile is None:
        chosen = list(tasks)
        assumed.append("no difficulty profile: every training task is in the GRPO set, no pass rates known")
    else:
        chosen = [task for task in tasks if bool(rows.get(task["task_id"], {}).get("in_grpo_set"))]
    if not chosen:
        raise BudgetError(f"no training task is in the GRPO set ({len(tasks)} tasks, {len(rows)} profiled)")
    picked = [rows[task["task_id"]] for task in chosen if task["task_id"] in rows]
    sampled = [row for row in picked if row.get("rollouts")] or [row for row in rows.values() if row.get("rollouts")]
    texts = [rollout["completion"] for row in sampled for rollout in row["rollouts"]]
    if profile is not None and not texts:
        assumed.append("no profile samples: completions assumed to use the whole max_completion_length")
    lengths = [len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts]
    rates = [row["solved"] / row["samples"] for row in picked if row.get("samples")]
    return Workload(
        prompt_tokens=prompt_token_counts([task["prompt"] for task in chosen], tokenizer, chat_template_kwargs),
        completion_lengths=lengths,
        pass_rates=rates,
        unprofiled=len(chosen) - len(rates),
        labels=dict(Counter(str(row.get("label")) for row in rows.values())),
        assumed=assumed,
    )


def signal_probability(pass_rate: float, generations: int) -> float:
    """The chance that a group of `generations` completions of a task with this pass rate has reward spread.

    Example:
        >>> signal_probability(0.5, 4)
        0.875
    """
    return 1.0 - pass_rate**generations - (1.0 - pass_rate) ** generations


def detectable_difference(gate: GateSettings, power: float) -> float:
    """The smallest true pass@1 gain the gate shows with chance `power`, from its paired bootstrap's width.

    The gate promotes when the paired bootstrap's lower bound clears `min_improvement`; that interval's half
    width is about z x sd / sqrt(n) for n tasks. The per-task difference of two pass rates from s samples each
    has variance 2 p (1 - p) / s, largest at p = 0.5 (assumed: an upper bound; differences between tasks that
    vary add to it).

    Example:
        >>> round(detectable_difference(GateSettings(eval_tasks=20, samples=4), 0.5), 3)
        0.155
    """
    return gate.min_improvement + _spread(gate, power) / math.sqrt(gate.eval_tasks)


def eval_tasks_needed(gate: GateSettings, power: float, target: float) -> int:
    """Eval tasks the gate needs to show a gain of `target` with chance `power` (inverse of `detectable_difference`).

    Example:
        >>> eval_tasks_needed(GateSettings(eval_tasks=20, samples=4), 0.5, 0.155)
        20
    """
    if target <= gate.min_improvement:
        raise BudgetError(f"target difference {target} must exceed the gate's min_improvement {gate.min_improvement}")
    return math.ceil((_spread(gate, power) / (target - gate.min_improvement)) ** 2 - 1e-9)


def _spread(gate: GateSettings, power: float) -> float:
    """(z of the interval + z of the power) x the worst-case sd of one task's paired difference (p = 0.5)."""
    z = NormalDist().inv_cdf(1 - (1 - gate.confidence) / 2) + NormalDist().inv_cdf(power)
    return z * math.sqrt(2 * 0.25 / gate.samples)


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes per device for one way of training, and whether it fits."""

    mode: str
    weights: float
    gradients: float
    optimizer: float
    kv_cache: float
    capacity: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.kv_cache

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity


@dataclass(frozen=True)
class Budget:
    """One GRPO run's plan; `table()` and `as_metadata()` report it, `advice` says what to change."""

    model: str
    device: str
    gpus: int
    parameters: int
    prompts: int
    prompts_over_limit: int
    longest_prompt: int
    mean_prompt_tokens: float
    mean_completion_tokens: float
    completion_budget: int
    rollouts_per_step: int
    completions_per_step: int
    steps: int
    epochs: float
    prompt_tokens: float
    completion_tokens: float
    trained_tokens: float
    generation_flops: float
    training_flops: float
    generation_seconds: float
    training_seconds: float
    signal_fraction: float | None
    detectable_difference: float | None
    eval_tasks: int | None
    eval_tasks_for_target: int | None
    memory: list[MemoryPlan]
    assumed: list[str]
    advice: list[str]
    rate_note: str

    @property
    def wall_seconds(self) -> float:
        return self.generation_seconds + self.training_seconds

    @property
    def gpu_hours(self) -> float:
        return self.wall_seconds * self.gpus / 3600

    def table(self) -> list[dict[str, str]]:
        """The plan as rows of `quantity`, `value` and `how`, for a Markdown table or a terminal."""
        rows = [
            ("model", f"{self.model} ({_count(self.parameters)} parameters)", "N"),
            ("device", f"{self.gpus} x {self.device}", self.rate_note),
            ("prompts", f"{self.prompts} ({self.prompts_over_limit} over the length limit, dropped)", "GRPO set"),
            (
                "prompt tokens",
                f"{self.mean_prompt_tokens:.1f} mean, {self.longest_prompt} longest",
                "policy's tokenizer, or as assumed",
            ),
            (
                "completion tokens",
                f"{self.mean_completion_tokens:.1f} expected of {self.completion_budget} budget",
                "profile samples' mean, clipped to the budget",
            ),
            (
                "rollouts per step",
                f"{self.rollouts_per_step} generated, {self.completions_per_step} trained",
                "batch x accumulation x GPUs / num_iterations",
            ),
            ("steps / epochs", f"{self.steps} / {self.epochs:.2f}", "max_steps, else num_train_epochs"),
            (
                "tokens",
                f"{_count(self.prompt_tokens)} prompt, {_count(self.completion_tokens)} generated, "
                f"{_count(self.trained_tokens)} trained",
                "whole run",
            ),
            (
                "FLOPs",
                f"{self.generation_flops:.3g} generation, {self.training_flops:.3g} training",
                "2N per generated or prefilled token, 6N per trained token (4N LoRA)",
            ),
            (
                "wall time",
                f"{_duration(self.wall_seconds)} ({_duration(self.generation_seconds)} generating, "
                f"{_duration(self.training_seconds)} training); {self.gpu_hours:.3g} GPU hours",
                "tokens / throughput table",
            ),
        ]
        for memory in self.memory:
            rows.append(
                (
                    f"memory, {memory.mode}",
                    f"{memory.total / GIB:.1f} GiB of {memory.capacity / GIB:.0f} "
                    f"({'fits' if memory.fits else 'does NOT fit'})",
                    f"weights {memory.weights / GIB:.1f} + gradients {memory.gradients / GIB:.1f} + Adam "
                    f"{memory.optimizer / GIB:.1f} + KV cache {memory.kv_cache / GIB:.2f} GiB per device",
                )
            )
        if self.signal_fraction is not None:
            rows.append(("groups with signal", f"{self.signal_fraction:.0%}", "mean of 1 - p^G - (1-p)^G"))
        if self.detectable_difference is not None:
            rows.append(
                (
                    "gate's detectable difference",
                    f"{self.detectable_difference:+.3f} pass@1 on {self.eval_tasks} eval tasks",
                    "paired bootstrap width, worst-case p = 0.5",
                )
            )
        return [{"quantity": q, "value": v, "how": h} for q, v, h in rows]

    def as_metadata(self) -> dict[str, float | int]:
        """The plan's numbers, flat, for asset metadata (and charts across materializations)."""
        numbers: dict[str, float | int | None] = {
            "parameters": self.parameters,
            "gpus": self.gpus,
            "prompts": self.prompts,
            "prompts_over_limit": self.prompts_over_limit,
            "mean_prompt_tokens": self.mean_prompt_tokens,
            "mean_completion_tokens": self.mean_completion_tokens,
            "rollouts_per_step": self.rollouts_per_step,
            "steps": self.steps,
            "epochs": self.epochs,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "trained_tokens": self.trained_tokens,
            "generation_flops": self.generation_flops,
            "training_flops": self.training_flops,
            "predicted_wall_seconds": self.wall_seconds,
            "gpu_hours": self.gpu_hours,
            "signal_fraction": self.signal_fraction,
            "detectable_difference": self.detectable_difference,
            **{f"memory_gib_{key}": m.total / GIB for key, m in zip(MEMORY_KEYS, self.memory, strict=False)},
        }
        return {key: value for key, value in numbers.items() if value is not None}


def plan_budget(
    workload: Workload,
    settings: RunSettings,
    shape: ModelShape,
    rate: DeviceRate,
    *,
    gpus: int = 1,
    gate: GateSettings | None = None,
    limits: AdviceLimits | None = None,
    model: str = "",
) -> Budget:
    """Plan one GRPO run (see the module docstring for every formula).

    Args:
        workload: the measured prompts, samples and pass rates.
        settings: the run's GRPO settings.
        shape: the policy's shape.
        rate: the device's rates for this size (`throughput_for`).
        gpus: devices training together (data parallel).
        gate: the promotion gate's view, for the detectable difference; None leaves it out.
        limits: when to advise.
        model: the policy's name, for the report.

    Raises:
        BudgetError: no prompt is left to train on, or a setting that makes no run (named).
    """
    limits = limits or AdviceLimits()
    if gpus < 1:
        raise BudgetError(f"--gpus {gpus}: give at least 1")
    group = settings.num_generations
    if group < 2 or settings.per_device_train_batch_size < 1 or settings.num_iterations < 1:
        raise BudgetError(f"num_generations {group} must be >= 2, batch size and num_iterations >= 1")
    limit = settings.max_prompt_tokens
    kept = [n for n in workload.prompt_tokens if limit is None or n <= limit]
    if not kept:
        raise BudgetError(
            f"no prompt to train on: {len(workload.prompt_tokens)} prompts, none within max_prompt_tokens={limit}"
        )
    prompt = fmean(kept)
    budget = settings.max_completion_length
    lengths = [min(n, budget) for n in workload.completion_lengths]
    completion = fmean(lengths) if lengths else float(budget)
    completions = settings.per_device_train_batch_size * settings.gradient_accumulation_steps * gpus
    rollouts = completions // settings.num_iterations
    steps_per_epoch = len(kept) * group * settings.num_iterations / completions
    steps = settings.max_steps if settings.max_steps > 0 else math.ceil(settings.num_train_epochs * steps_per_epoch)
    n = shape.parameters
    prefill, generated = steps * rollouts * prompt, steps * rollouts * completion
    trained = steps * completions * (prompt + completion)
    extra_forwards = (settings.beta > 0) + (settings.num_iterations > 1)
    train_flops = ((4 if settings.use_lora else 6) + 2 * extra_forwards) * n * trained
    generation_seconds = generated / (rate.generation_tokens_per_s * gpus)
    training_seconds = train_flops / (6 * n * rate.training_tokens_per_s * gpus)

    signal = fmean(signal_probability(p, group) for p in workload.pass_rates) if workload.pass_rates else None
    reach = needed = None
    if gate is not None and gate.eval_tasks > 0:
        reach = detectable_difference(gate, limits.power)
        needed = eval_tasks_needed(gate, limits.power, gate.min_improvement + limits.target_difference)
    memory = _memory(shape, rate.row, settings, gpus, longest=max(kept))
    budget_plan = Budget(
        model=model or f"a {_count(shape.parameters)} model",
        device=rate.row.device,
        gpus=gpus,
        parameters=n,
        prompts=len(kept),
        prompts_over_limit=len(workload.prompt_tokens) - len(kept),
        longest_prompt=max(workload.prompt_tokens),
        mean_prompt_tokens=prompt,
        mean_completion_tokens=completion,
        completion_budget=budget,
        rollouts_per_step=rollouts,
        completions_per_step=completions,
        steps=steps,
        epochs=steps / steps_per_epoch,
        prompt_tokens=prefill,
        completion_tokens=generated,
        trained_tokens=trained,
        generation_flops=2 * n * (prefill + generated),
        training_flops=train_flops,
        generation_seconds=generation_seconds,
        training_seconds=training_seconds,
        signal_fraction=signal,
        detectable_difference=reach,
        eval_tasks=gate.eval_tasks if gate else None,
        eval_tasks_for_target=needed,
        memory=memory,
        assumed=[*workload.assumed, f"model shape: {shape.source}"],
        advice=[],
        rate_note=rate.note,
    )
    return dataclasses.replace(budget_plan, advice=_advice(budget_plan, workload, settings, gate, limits))


def _memory(shape: ModelShape, row: Throughput, settings: RunSettings, gpus: int, longest: int) -> list[MemoryPlan]:
    width = DTYPE_BYTES[row.dtype]
    n = shape.parameters
    capacity = row.memory_gib * GIB
    # A generation batch per device holds batch x accumulation completions, each up to longest prompt + budget.
    sequences = settings.per_device_train_batch_size * settings.gradient_accumulation_steps
    kv = 2 * shape.layers * shape.kv_dim * width * sequences * (longest + settings.max_completion_length)
    lora = shape.lora_parameters(settings.lora_r)
    plans = [
        MemoryPlan("full fine-tuning", n * width, n * width, n * ADAM_BYTES, kv, capacity),
        MemoryPlan(f"LoRA r={settings.lora_r}", (n + lora) * width, lora * width, lora * ADAM_BYTES, kv, capacity),
    ]
    if gpus > 1:
        plans.append(
            MemoryPlan(
                f"full, sharded over {gpus}", n * width / gpus, n * width / gpus, n * ADAM_BYTES / gpus, kv, capacity
            )
        )
    return plans


def _advice(
    plan: Budget, workload: Workload, settings: RunSettings, gate: GateSettings | None, limits: AdviceLimits
) -> list[str]:
    advice = []
    profiled = sum(workload.labels.get(label, 0) for label in ("learnable", "never_solved", "always_solved"))
    flat = workload.labels.get("never_solved", 0) + workload.labels.get("always_solved", 0)
    if profiled and flat / profiled > 0.5:
        advice.append(
            f"{flat} of {profiled} profiled tasks ({flat / profiled:.0%}) were never or always solved: their groups "
            "carry no signal; add tasks within the policy's reach"
        )
    if plan.signal_fraction is not None and plan.signal_fraction < limits.min_signal_fraction:
        advice.append(
            f"only {plan.signal_fraction:.0%} of groups are expected to carry signal (pass rates near 0 or 1 with "
            f"num_generations={settings.num_generations}): {1 - plan.signal_fraction:.0%} of "
            f"{_duration(plan.wall_seconds)} buys no gradient; raise num_generations or train on learnable tasks"
        )
    if plan.prompts_over_limit:
        advice.append(
            f"{plan.prompts_over_limit} prompts are longer than max_prompt_tokens={settings.max_prompt_tokens} "
            f"(longest {plan.longest_prompt}) and will be dropped; raise the limit or shorten them"
        )
    if (
        workload.completion_lengths
        and plan.completion_budget > limits.max_budget_over_length * plan.mean_completion_tokens
    ):
        advice.append(
            f"max_completion_length={plan.completion_budget} is "
            f"{plan.completion_budget / plan.mean_completion_tokens:.1f}x "
            f"the samples' mean length ({plan.mean_completion_tokens:.0f} tokens): the KV cache and the longest "
            "rollouts pay for the budget; lower it"
        )
    if gate is not None and plan.detectable_difference is not None:
        if gate.eval_tasks < gate.min_tasks:
            advice.append(
                f"{gate.eval_tasks} eval tasks < the gate's min_tasks={gate.min_tasks}: the gate cannot promote "
                "whatever the run achieves; evaluate more tasks (PromotionGate.max_tasks, the eval split)"
            )
        if plan.detectable_difference > gate.min_improvement + limits.target_difference:
            advice.append(
                f"with {gate.eval_tasks} eval tasks x {gate.samples} samples the gate shows only gains of "
                f"{plan.detectable_difference:+.3f} pass@1 or more ({limits.power:.0%} power); showing "
                f"{limits.target_difference:+.3f} needs about {plan.eval_tasks_for_target} eval tasks"
            )
    for memory in plan.memory:
        if not memory.fits:
            advice.append(
                f"{memory.mode} needs {memory.total / GIB:.1f} GiB per device, more than the "
                f"{memory.capacity / GIB:.0f} GiB of a {plan.device}"
            )
    return advice


# The column of a plan's row (and of its calibration) that says why no GRPO run was planned: no task was in the
# GRPO set, so `grpo_checkpoint` passed its starting policy on untrained.
SKIPPED = "skipped_because"


def plan_row(budget: Budget, *, model: str, device: str, grpo: Mapping[str, Any]) -> dict[str, Any]:
    """A plan as one table row: its numbers (`Budget.as_metadata`), the model and device it priced, the GRPO
    settings it read and its advice; what `calibrate_plan` compares the run with.

    Args:
        budget: the plan.
        model: the policy the run starts from.
        device: the device named for the plan (as given: `Budget.device` is the throughput table's spelling).
        grpo: the GRPO settings the plan read (`TrainingPolicy.grpo`).
    """
    return {**budget.as_metadata(), "model": model, "device": device, "grpo": dict(grpo), "advice": budget.advice}


@dataclass(frozen=True)
class MeasuredRun:
    """What a finished GRPO run measured: its steps and wall time, and the trainer's step times and token counts
    when logged (`step_seconds`: TRL's `step_time` added up, the steps alone, without loading the model or saving
    checkpoints, which the plan does not count)."""

    steps: int
    train_seconds: float
    tokens: float | None = None
    mean_completion_tokens: float | None = None
    step_seconds: float | None = None


def measured_run(steps: int, train_seconds: float, log_history: Iterable[Mapping[str, Any]]) -> MeasuredRun:
    """A run's measurements: `steps` and `train_seconds` (the `grpo_checkpoint` row), plus the tokens TRL counted
    (`num_tokens`: prompts and completions generated) and the mean completion length, from the trainer's logged
    step metrics (what `training.grpo_job` streams back through Pipes), when it logged them.

    Example:
        >>> measured_run(2, 30.0, [{"num_tokens": 900.0, "completions/mean_length": 40.0, "step_time": 12.0},
        ...     {"num_tokens": 1800.0, "completions/mean_length": 44.0, "step_time": 13.0}])
        MeasuredRun(steps=2, train_seconds=30.0, tokens=1800.0, mean_completion_tokens=42.0, step_seconds=25.0)
    """
    history = list(log_history)
    tokens = max((entry["num_tokens"] for entry in history if entry.get("num_tokens") is not None), default=None)
    lengths = [entry["completions/mean_length"] for entry in history if "completions/mean_length" in entry]
    times = [entry["step_time"] for entry in history if entry.get("step_time") is not None]
    mean_length = fmean(lengths) if lengths else None
    return MeasuredRun(steps, train_seconds, tokens, mean_length, sum(times) if len(times) == steps else None)


def calibrate(planned: Mapping[str, float], measured: MeasuredRun) -> dict[str, float]:
    """Predicted / measured for what the run measured, the plan taken to the run's own step count.

    Args:
        planned: a plan's numbers (`Budget.as_metadata()`: `predicted_wall_seconds`, `steps`, `prompt_tokens`,
            `completion_tokens`, `mean_completion_tokens`).
        measured: the run's measurements (`measured_run`).

    Returns:
        `wall_time_ratio` (over the steps' own time when every step logged it, else the run's wall time), and
        `tokens_ratio` / `completion_length_ratio` when the run logged those.

    Example:
        >>> planned = {"predicted_wall_seconds": 20.0, "steps": 2, "prompt_tokens": 1200.0,
        ...     "completion_tokens": 800.0, "mean_completion_tokens": 50.0}
        >>> calibrate(planned, MeasuredRun(steps=2, train_seconds=25.0, tokens=2000.0, mean_completion_tokens=40.0))
        {'wall_time_ratio': 0.8, 'tokens_ratio': 1.0, 'completion_length_ratio': 1.25}
    """
    per_step = planned["predicted_wall_seconds"] / planned["steps"]
    ratios = {"wall_time_ratio": per_step * measured.steps / (measured.step_seconds or measured.train_seconds)}
    if measured.tokens:
        per_step_tokens = (planned["prompt_tokens"] + planned["completion_tokens"]) / planned["steps"]
        ratios["tokens_ratio"] = per_step_tokens * measured.steps / measured.tokens
    if measured.mean_completion_tokens:
        ratios["completion_length_ratio"] = planned["mean_completion_tokens"] / measured.mean_completion_tokens
    return ratios


@dataclass(frozen=True)
class PlanCalibration:
    """A plan against the run it planned: whether the two compare, and if so how far the plan was off.

    Attributes:
        problems: why the run is not the run the plan priced (other GRPO settings, another task count, a resumed
            run); empty when it is.
        measured: what the run measured.
        ratios: `calibrate`'s predicted / measured ratios; empty when the two do not compare.
        planned_wall_seconds, planned_steps: the plan's wall time and steps.
    """

    problems: list[str]
    measured: MeasuredRun
    ratios: dict[str, float]
    planned_wall_seconds: float
    planned_steps: int

    @property
    def comparable(self) -> bool:
        return not self.problems

    @property
    def within_tolerance(self) -> bool:
        """Whether predicted / measured wall time is within `CALIBRATION_TOLERANCE` either way (never when the plan
        and the run do not compare)."""
        wall = self.ratios.get("wall_time_ratio")
        return wall is not None and 1 / CALIBRATION_TOLERANCE <= wall <= CALIBRATION_TOLERANCE

    @property
    def predicted_seconds_for_measured_steps(self) -> float:
        """The plan's wall time taken to the run's own step count."""
        return self.planned_wall_seconds / self.planned_steps * self.measured.steps

    def as_row(self) -> dict[str, Any]:
        """The calibration as one table row: `comparable`, `within_tolerance`, the ratios, `problems`."""
        return {
            "comparable": self.comparable,
            "within_tolerance": self.within_tolerance,
            **self.ratios,
            "problems": self.problems,
        }


def calibrate_plan(
    planned: Mapping[str, Any],
    run: Mapping[str, Any],
    *,
    logged: Mapping[str, Any] | None = None,
    resumed: str = "",
) -> PlanCalibration:
    """Compare a plan with the run it planned, when the run is the one the plan priced.

    Args:
        planned: the plan's row (`plan_row`).
        run: the run's row (`grpo_checkpoint`: `config` with its `grpo` settings, `task_ids`, `steps`,
            `train_seconds`).
        logged: the run's measurements as the trainer logged them (`MeasuredRun`'s fields); None: the row's steps
            and wall time alone.
        resumed: the checkpoint the run resumed from, if it did: its wall time then covers part of the run.

    Returns:
        A `PlanCalibration`; its ratios are left empty when settings, task count or a resume make the two differ.

    Raises:
        BudgetError: the run's or the plan's GRPO settings hold a value of the wrong kind (`RunSettings.from_grpo`).
    """
    problems = []
    if RunSettings.from_grpo(run["config"]["grpo"]) != RunSettings.from_grpo(planned["grpo"]):
        problems.append("the run's GRPO settings differ from the plan's")
    if len(run["task_ids"]) != planned["prompts"]:
        problems.append(f"the run trained {len(run['task_ids'])} tasks, the plan counted {planned['prompts']}")
    if resumed:
        problems.append(f"the run resumed from {resumed}: its wall time covers part of it")
    measured = MeasuredRun(**logged) if logged else MeasuredRun(int(run["steps"]), float(run["train_seconds"]))
    ratios = {} if problems else calibrate(planned, measured)
    return PlanCalibration(problems, measured, ratios, planned["predicted_wall_seconds"], planned["steps"])


def default_device(runtime: str) -> str:
    """The device a plan assumes when none is named: this kind of CPU for a CPU run, else an H100."""
    return CPU_DEVICE if runtime == "cpu" else GPU_DEVICE


def _count(value: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if value >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.0f}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
