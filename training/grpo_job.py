"""The GRPO child process: `python -m training.grpo_job --config CONFIG.json`, with or without Dagster Pipes.

The `grpo_checkpoint` asset launches this out of process (`PipesSubprocessClient`, or `PipesK8sClient` for a GPU
pod). Under Pipes it streams every metrics dict back as a custom message (`{"kind": "grpo_metrics", ...}`) plus
a one-line `pipes.log.info`, forwards this process's warnings (a verifier that raised, filtered prompts) to the
Dagster log, and ends with `report_asset_materialization` of its `GRPOJobResult` (checkpoint path, steps, final
reward mean, filtered rows, verifier versions). Without Pipes (a person, a GPU launcher) it logs to stderr and
prints the same result as one JSON line last on stdout. The only Dagster dependency is `dagster_pipes` (small,
dependency-free), imported only when the process was launched by Pipes.

The parent and this process share the config type (`GRPOJobConfig`: the asset writes it into the run folder with
`write_job`, beside the exported split, and this process reads it with `from_file`) and the result type
(`GRPOJobResult`: `to_metadata()` here, `from_metadata()` in the asset), so a field renamed on one side fails
loudly on the other.

The config file (JSON; under Pipes the same object may come as the extra `grpo_job_config` instead of a file):

```json
{
  "model_path": "models/tiny-policy",
  "output_dir": "runs/grpo",
  "train_file": "export/train.parquet",
  "runtime": "auto",
  "grpo": {"reward_weights_by_verifier": {"numeric_answer": 1.0}, "num_generations": 4, "max_steps": 100}
}
```

`runtime` picks the machine defaults applied under `grpo`: `"auto"` (`runtime_defaults()`: CPU settings without
a GPU, vLLM on a GPU when installed), `"cpu"` (`cpu_defaults()`) or `"none"`. `grpo` takes any
`SeedwheelGRPOConfig` field (every `trl.GRPOConfig` field included); `tracking` (optional) takes
`training.tracking.TrackingConfig`'s fields (`mlflow_uri`, `tensorboard_dir`, `experiment`) and makes the run report
to MLflow and TensorBoard, its MLflow run named by `grpo.run_name`; `logging_steps` defaults to 1 here so each
step's metrics stream, and `save_total_limit` to `training.checkpoints.KEEP_CHECKPOINTS`. Exit codes: 0 done, 2 bad
config or data (message on stderr), 1 a training failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from core import SeedwheelError
from core.tables import atomic_write
from training.checkpoints import KEEP_CHECKPOINTS
from training.export import export_split
from training.grpo import GRPOResult, cpu_defaults, grpo_config_class, run_grpo, runtime_defaults
from training.tracking import TrackedRun, TrackingConfig, TrackingConfigError

if TYPE_CHECKING:
    import pandas as pd

# Named explicitly: under `python -m` this module is `__main__`, and the Pipes log handler sits on "training".
logger = logging.getLogger("training.grpo_job")

PIPES_EXTRA_KEY = "grpo_job_config"
METRICS_MESSAGE_KIND = "grpo_metrics"
# Which machine defaults go under `grpo` (see the module docstring).
Runtime = Literal["auto", "cpu", "none"]
RUNTIMES: tuple[Runtime, ...] = get_args(Runtime)
EXIT_OK, EXIT_TRAINING_FAILED, EXIT_BAD_CONFIG = 0, 1, 2
# Defaults of the job only (not of the config class): stream every step's metrics, keep one checkpoint.
JOB_GRPO_DEFAULTS: dict[str, Any] = {"logging_steps": 1, "save_total_limit": KEEP_CHECKPOINTS}
_REQUIRED = ("model_path", "output_dir", "train_file")  # a job config's keys without a default
# Log records from these packages reach Dagster under Pipes: rewards, filtering and training progress.
_FORWARDED_LOGGERS = ("training", "validators")
# Summary and metric keys worth a line in the Dagster log (the full dict goes as a custom message).
_LOG_LINE_KEYS = ("reward", "reward_std", "frac_reward_zero_std", "kl", "completions/mean_length", "loss")


class GRPOJobConfigError(SeedwheelError, ValueError):
    """A job config file that cannot be used: unreadable, missing keys, unknown keys or bad values."""


class GRPOJobResultError(SeedwheelError, ValueError):
    """A job's reported result the parent cannot read: a missing key or a value of the wrong type."""


@dataclass(frozen=True)
class GRPOJobConfig:
    """One GRPO job, as read from the JSON config.

    Args:
        model_path: the policy to start from (a model directory or a hub id).
        output_dir: checkpoints and `final/` go here; a rerun resumes from its last complete checkpoint.
        train_file: the exported train Parquet.
        runtime: `auto`, `cpu` or `none`: which machine defaults go under `grpo`.
        grpo: `SeedwheelGRPOConfig` fields.
        tracking: where the run reports (MLflow, TensorBoard: `training.tracking`); None: nowhere.

    Example:
        >>> GRPOJobConfig.from_mapping({"model_path": "m", "output_dir": "o", "train_file": "t.parquet"}).runtime
        'auto'
    """

    model_path: str
    output_dir: str
    train_file: str
    runtime: Runtime = "auto"
    grpo: dict[str, Any] = field(default_factory=dict)
    tracking: TrackingConfig | None = None

    def __post_init__(self) -> None:
        empty = [name for name in _REQUIRED if not getattr(self, name)]
        if empty:
            raise GRPOJobConfigError(f"{', '.join(empty)} must be given as non-empty text")
        if self.runtime not in RUNTIMES:
            raise GRPOJobConfigError(f"runtime must be one of {', '.join(RUNTIMES)}, got {self.runtime!r}")
        clashes = sorted(set(self.grpo) & set(_REQUIRED))
        if clashes:
            raise GRPOJobConfigError(f"give {', '.join(clashes)} at the top level, not inside 'grpo'")

    def to_mapping(self) -> dict[str, Any]:
        """The config as the JSON object `from_mapping` reads back."""
        return dataclasses.asdict(self)

    def relocated(self, model_path: str, where: Callable[[str], str]) -> GRPOJobConfig:
        """This job with `model_path` as its start and its output folder and train file at `where(path)`: the job
        as a manifest records it, once its run folder's working copy is kept at the storage root.

        Example:
            >>> job = GRPOJobConfig(model_path="/tmp/m", output_dir="/tmp/run/output", train_file="/tmp/run/t.parquet")
            >>> job.relocated("s3://b/sft", lambda path: path.replace("/tmp/run", "s3://b/run")).output_dir
            's3://b/run/output'
        """
        return dataclasses.replace(
            self, model_path=model_path, output_dir=where(self.output_dir), train_file=where(self.train_file)
        )

    def to_json(self) -> str:
        """The config file's text (sorted keys, one trailing newline), as `from_file` reads it back."""
        return json.dumps(self.to_mapping(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_mapping(cls, raw: Any, *, source: str = "config") -> GRPOJobConfig:
        """Check and convert a decoded JSON object.

        Args:
            raw: the decoded JSON.
            source: where it came from, for messages (a path or "Pipes extra").

        Returns:
            The job config.

        Raises:
            GRPOJobConfigError: not an object, missing or unknown keys, wrong types, an unknown runtime.
        """
        if not isinstance(raw, Mapping):
            raise GRPOJobConfigError(f"{source}: expected a JSON object, got {type(raw).__name__}")
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(raw) - set(names))
        if unknown:
            raise GRPOJobConfigError(
                f"{source}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(names)} "
                "(GRPO parameters go inside 'grpo')"
            )
        missing = [k for k in _REQUIRED if not isinstance(raw.get(k), str) or not raw.get(k)]
        if missing:
            raise GRPOJobConfigError(f"{source}: {', '.join(missing)} must be given as non-empty text")
        grpo = raw.get("grpo", {})
        if not isinstance(grpo, Mapping):
            raise GRPOJobConfigError(f"{source}: 'grpo' must be an object of GRPO parameters")
        tracking = raw.get("tracking")
        if tracking is not None and not isinstance(tracking, Mapping):
            raise GRPOJobConfigError(f"{source}: 'tracking' must be an object of TrackingConfig fields")
        try:  # the values are checked by the config itself
            return cls(
                model_path=raw["model_path"],
                output_dir=raw["output_dir"],
                train_file=raw["train_file"],
                runtime=raw.get("runtime", "auto"),
                grpo=dict(grpo),
                tracking=None if tracking is None else TrackingConfig(**tracking),
            )
        except (GRPOJobConfigError, TrackingConfigError) as exc:
            raise GRPOJobConfigError(f"{source}: {exc}") from None
        except TypeError as exc:  # an unknown key in 'tracking'
            raise GRPOJobConfigError(f"{source}: 'tracking': {exc}") from None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> GRPOJobConfig:
        """Read and check a JSON config file.

        Raises:
            GRPOJobConfigError: the file is missing, not JSON, or fails `from_mapping`.
        """
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise GRPOJobConfigError(f"cannot read config {path}: {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            raise GRPOJobConfigError(f"config {path} is not valid JSON: {exc}") from None
        return cls.from_mapping(raw, source=str(path))

    def grpo_config(self) -> Any:
        """The `SeedwheelGRPOConfig`: runtime defaults, then job defaults, then `grpo`, then the paths.

        Raises:
            GRPOJobConfigError: a `grpo` key that is not a config field (with the closest field names).
            GRPOConfigError / ValueError: the values do not make a valid config (from the config itself).
        """
        config_cls = grpo_config_class()
        allowed = {f.name for f in dataclasses.fields(config_cls) if f.init}
        unknown = sorted(set(self.grpo) - allowed)
        if unknown:
            hints = [
                f"{name} (did you mean {', '.join(close)}?)"
                if (close := difflib.get_close_matches(name, allowed))
                else name
                for name in unknown
            ]
            raise GRPOJobConfigError(f"unknown GRPO parameter(s): {'; '.join(hints)}")
        base = {"auto": runtime_defaults, "cpu": cpu_defaults, "none": dict}[self.runtime]()
        kwargs = {
            **base,
            **JOB_GRPO_DEFAULTS,
            **self.grpo,
            "output_dir": self.output_dir,
            "train_file": self.train_file,
        }
        return config_cls(**kwargs)


def job_grpo_settings(
    grpo: Mapping[str, Any], reward_weights: Mapping[str, float], max_episode_turns: int | None
) -> dict[str, Any]:
    """A pipeline job's `grpo`: the configured GRPO fields, with the reward weights by verifier and the episode turn
    cap the pipeline sets beside them (they name the run folder too).

    Example:
        >>> job_grpo_settings({"max_steps": 4}, {"*": 1.0}, None)
        {'max_steps': 4, 'reward_weights_by_verifier': {'*': 1.0}, 'max_episode_turns': None}
    """
    return {**grpo, "reward_weights_by_verifier": reward_weights, "max_episode_turns": max_episode_turns}


def write_job(
    tasks: pd.DataFrame | Iterable[Mapping[str, Any]],
    run_dir: Path,
    model_path: str,
    runtime: Runtime,
    grpo: Mapping[str, Any],
    tracking: TrackingConfig | None = None,
) -> tuple[GRPOJobConfig, Path]:
    """Write a job into its run folder: the tasks as `train.parquet` (and `.jsonl`), the config as `job.json`.

    Args:
        tasks: the GRPO set's task records (or a DataFrame of them).
        run_dir: the run folder; the job's checkpoints and `final` go to its `output` folder.
        model_path: the model directory to start from.
        runtime: which machine defaults go under `grpo`.
        grpo: `SeedwheelGRPOConfig` fields.
        tracking: where the run reports (`training.tracking`); None: nowhere.

    Returns:
        The job config and the path of its file (written atomically), for `python -m training.grpo_job --config`.
    """
    exported = export_split(tasks, run_dir, "train")
    job = GRPOJobConfig(
        model_path=model_path,
        output_dir=str(run_dir / "output"),
        train_file=str(exported.parquet),
        runtime=runtime,
        grpo=dict(grpo),
        tracking=tracking,
    )
    config_path = run_dir / "job.json"
    with atomic_write(config_path, "w") as handle:
        handle.write(job.to_json())
    return job, config_path


def step_metrics(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The job's custom messages that are a training step's metrics with a reward (the points of a reward curve).

    Example:
        >>> step_metrics([{"kind": "grpo_metrics", "step": 1, "reward": 0.5}, {"kind": "grpo_summary", "reward": 1}])
        [{'kind': 'grpo_metrics', 'step': 1, 'reward': 0.5}]
    """
    return [dict(m) for m in messages if m.get("kind") == METRICS_MESSAGE_KIND and "reward" in m]


def pipes_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether Dagster Pipes launched this process (its context env var is set), without importing anything.

    The subprocess and Kubernetes Pipes clients pass their parameters in `DAGSTER_PIPES_CONTEXT` /
    `DAGSTER_PIPES_MESSAGES`; `dagster_pipes.PipesEnvVarParamsLoader().is_dagster_pipes_process()` tests the same.
    """
    return "DAGSTER_PIPES_CONTEXT" in (os.environ if environ is None else environ)


class _PipesLogHandler(logging.Handler):
    """Forwards this process's log records to the Dagster log through `pipes.log`."""

    def __init__(self, pipes_logger: logging.Logger) -> None:
        super().__init__(level=logging.INFO)
        self._pipes_logger = pipes_logger

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._pipes_logger.log(record.levelno, "%s: %s", record.name, record.getMessage())
        except Exception:  # a closed channel must not turn a log call into a crash
            self.handleError(record)


def _metrics_line(metrics: Mapping[str, Any]) -> str:
    if "train_runtime" in metrics:  # the trainer's closing log: totals, no rewards
        totals = ("train_runtime", "train_loss", "train_steps_per_second")
        done = [f"{key}={metrics[key]:.4g}" for key in totals if isinstance(metrics.get(key), int | float)]
        return f"GRPO finished at step {metrics.get('step')}: " + " ".join(done)
    parts = [f"step {metrics.get('step')}"]
    parts += [f"{key}={metrics[key]:.4g}" for key in _LOG_LINE_KEYS if isinstance(metrics.get(key), int | float)]
    parts += [
        f"{key}={value:.4g}"
        for key, value in metrics.items()
        if key.startswith("rewards/") and key.endswith("/mean") and isinstance(value, int | float)
    ]
    return "GRPO " + " ".join(parts)


@dataclass(frozen=True)
class GRPOJobResult:
    """What a GRPO job reports to the process that launched it: one record type on both sides of the boundary.

    The child sends `to_metadata()` (under Pipes) or `summary()` (the last stdout line); the parent reads the
    metadata back with `from_metadata`, which names the key when the two sides disagree on a field, so a key
    renamed on one side fails the step instead of reading as nothing.

    Attributes:
        checkpoint_dir: `<output_dir>/final`, the trained model and tokenizer.
        steps: the trainer's global step at the end (including steps done before a resume).
        train_rows: rows trained on (after the prompt-length filter).
        filtered_task_ids: task ids of the rows dropped for prompts longer than `max_prompt_tokens`.
        verifier_versions: verifier name -> versions the training rows were scored with.
        reward_means: each reward function's last logged mean (`rewards/<name>/mean`).
        final_reward_mean: the last logged mean reward; None when no step logged one.
        resumed_from: the checkpoint the run resumed from; None for a fresh start.
        train_seconds: wall time of training.
        episode_end_reasons: how the episodes played for training ended; empty without episode tasks.
        episode_tool_calls: tool calls those episodes made.
        tracked: the MLflow run and TensorBoard folder the run reported to; None: not tracked.

    Example:
        >>> result = GRPOJobResult("runs/grpo/final", 2, 8, [], {"numeric_answer": [1]}, {}, 0.5, None, 3.2)
        >>> GRPOJobResult.from_metadata(result.to_metadata()) == result
        True
    """

    checkpoint_dir: str
    steps: int
    train_rows: int
    filtered_task_ids: list[str]
    verifier_versions: dict[str, list[int]]
    reward_means: dict[str, float | None]
    final_reward_mean: float | None
    resumed_from: str | None
    train_seconds: float
    episode_end_reasons: dict[str, int] = field(default_factory=dict)
    episode_tool_calls: int = 0
    tracked: TrackedRun | None = None

    @property
    def filtered_rows(self) -> int:
        """Rows dropped for prompts longer than `max_prompt_tokens`."""
        return len(self.filtered_task_ids)

    def trained_tasks(self, tasks: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """The tasks of the job's train file that it trained on: all but those filtered for their prompt's length."""
        filtered = set(self.filtered_task_ids)
        return [task for task in tasks if task["task_id"] not in filtered]

    @classmethod
    def from_run(cls, result: GRPOResult) -> GRPOJobResult:
        """The record of a finished in-process run (`training.grpo.run_grpo`)."""
        summary = {**result.summary(), "tracked": result.tracked}
        return cls(**{f.name: summary[f.name] for f in dataclasses.fields(cls)})

    def summary(self) -> dict[str, Any]:
        """Every field plus `filtered_rows`, JSON-ready: the last stdout line, and the `grpo_summary` message."""
        tracked = self.tracked.summary() if self.tracked else None
        return {**dataclasses.asdict(self), "tracked": tracked, "filtered_rows": self.filtered_rows}

    def to_metadata(self) -> dict[str, Any]:
        """Asset metadata in `dagster_pipes` form (typed where inference would guess wrong), for
        `pipes.report_asset_materialization(metadata=...)`."""
        reward = self.final_reward_mean
        return {
            "checkpoint_dir": {"raw_value": self.checkpoint_dir, "type": "path"},
            "steps": self.steps,
            "final_reward_mean": {"raw_value": reward, "type": "float" if reward is not None else "null"},
            "train_rows": self.train_rows,
            "filtered_rows": self.filtered_rows,
            "filtered_task_ids": {"raw_value": self.filtered_task_ids, "type": "json"},
            "verifier_versions": {"raw_value": self.verifier_versions, "type": "json"},
            "reward_means": {"raw_value": self.reward_means, "type": "json"},
            "resumed_from": {"raw_value": self.resumed_from or "", "type": "text"},
            "train_seconds": {"raw_value": self.train_seconds, "type": "float"},
            "episode_end_reasons": {"raw_value": self.episode_end_reasons, "type": "json"},
            "episode_tool_calls": self.episode_tool_calls,
            "tracked": {"raw_value": self.tracked.summary(), "type": "json"}
            if self.tracked
            else {"raw_value": None, "type": "null"},
        }

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> GRPOJobResult:
        """Read a result back from its materialization metadata.

        Args:
            metadata: plain values (as Dagster's `MetadataValue.value` gives them) or the `dagster_pipes` form
                `to_metadata` writes; keys that are not fields (`filtered_rows`) are ignored.

        Raises:
            GRPOJobResultError: a field's key is missing, or its value has the wrong type.
        """
        values = {key: _raw_value(value) for key, value in metadata.items()}
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in values]
        if missing:
            reported = ", ".join(sorted(values)) or "nothing"
            raise GRPOJobResultError(
                f"the GRPO job's result lacks {', '.join(missing)} (it reported: {reported})",
                hint="the job and the asset must run the same seedwheel code (GRPOJobResult.to_metadata writes what "
                "from_metadata reads)",
            )
        reward = _typed(values, "final_reward_mean", (int, float, type(None)), "a number or null")
        return cls(
            checkpoint_dir=_typed(values, "checkpoint_dir", str, "a path"),
            steps=_typed(values, "steps", int, "an integer"),
            train_rows=_typed(values, "train_rows", int, "an integer"),
            filtered_task_ids=list(_typed(values, "filtered_task_ids", list, "a list of task ids")),
            verifier_versions=dict(_typed(values, "verifier_versions", dict, "an object")),
            reward_means=dict(_typed(values, "reward_means", dict, "an object")),
            final_reward_mean=None if reward is None else float(reward),
            resumed_from=_typed(values, "resumed_from", (str, type(None)), "text") or None,
            train_seconds=float(_typed(values, "train_seconds", (int, float), "a number")),
            episode_end_reasons=dict(_typed(values, "episode_end_reasons", dict, "an object")),
            episode_tool_calls=_typed(values, "episode_tool_calls", int, "an integer"),
            tracked=_tracked(_typed(values, "tracked", (dict, type(None)), "an object or null")),
        )


def _raw_value(value: Any) -> Any:
    """A metadata value without its `dagster_pipes` wrapper (`{"raw_value": ..., "type": ...}`)."""
    if isinstance(value, Mapping) and set(value) == {"raw_value", "type"}:
        return value["raw_value"]
    return value


def _typed(values: Mapping[str, Any], name: str, kinds: type | tuple[type, ...], expected: str) -> Any:
    value = values[name]
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise GRPOJobResultError(f"the GRPO job's result has {name}={value!r}; expected {expected}")
    return value


def _tracked(value: Mapping[str, Any] | None) -> TrackedRun | None:
    if value is None:
        return None
    try:
        return TrackedRun.from_summary(value)
    except (KeyError, TypeError):
        raise GRPOJobResultError(f"the GRPO job's result has tracked={value!r}; expected a run's summary") from None


def _load_config(config_path: str | None, pipes: Any | None) -> GRPOJobConfig:
    if config_path:
        return GRPOJobConfig.from_file(config_path)
    if pipes is not None and PIPES_EXTRA_KEY in pipes.extras:
        return GRPOJobConfig.from_mapping(pipes.extras[PIPES_EXTRA_KEY], source=f"Pipes extra '{PIPES_EXTRA_KEY}'")
    raise GRPOJobConfigError(
        "no config: pass --config CONFIG.json" + (f" or the Pipes extra '{PIPES_EXTRA_KEY}'" if pipes else "")
    )


def _train(job_config_path: str | None, pipes: Any | None) -> tuple[int, GRPOResult | None]:
    """Build the config and train; returns the exit code and the result (None on a config/data error)."""
    try:
        job = _load_config(job_config_path, pipes)
        config = job.grpo_config()
    except ValueError as exc:  # our config errors and TRL's own config checks alike
        logger.error("bad GRPO job config: %s", exc)
        return EXIT_BAD_CONFIG, None

    def on_metrics(metrics: dict[str, Any]) -> None:
        if pipes is not None:
            pipes.report_custom_message({"kind": METRICS_MESSAGE_KIND, **metrics})
        logger.info("%s", _metrics_line(metrics))  # stderr, and the Dagster log through the Pipes handler

    from training.grpo import GRPOConfigError, GRPODataError

    try:
        result = run_grpo(job.model_path, config, on_metrics=on_metrics, tracking=job.tracking)
    except (GRPOConfigError, GRPODataError) as exc:
        logger.error("cannot train: %s", exc)
        return EXIT_BAD_CONFIG, None
    return EXIT_OK, result


def _emit_summary(result: GRPOJobResult) -> None:
    # The last stdout line is the machine-readable result for callers without Pipes.
    sys.stdout.write(json.dumps(result.summary(), sort_keys=True) + "\n")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one GRPO job; see the module docstring for the config and exit codes.

    Args:
        argv: command-line arguments (default `sys.argv[1:]`).

    Returns:
        The exit code.

    Example:
        >>> main(["--config", "runs/grpo.json"])  # doctest: +SKIP
        0
    """
    parser = argparse.ArgumentParser(prog="python -m training.grpo_job", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="JSON job config (under Dagster Pipes it may come as an extra instead)")
    parser.add_argument("--log-level", default="INFO", help="stderr log level (default INFO)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not pipes_requested():
        code, result = _train(args.config, None)
        if result is not None:
            _emit_summary(GRPOJobResult.from_run(result))
        return code

    from dagster_pipes import open_dagster_pipes

    with open_dagster_pipes() as pipes:
        handler = _PipesLogHandler(pipes.log)
        for name in _FORWARDED_LOGGERS:
            logging.getLogger(name).addHandler(handler)
        try:
            code, result = _train(args.config, pipes)
            if result is not None:
                reported = GRPOJobResult.from_run(result)
                if pipes.is_asset_step:
                    pipes.report_asset_materialization(metadata=reported.to_metadata())
                else:
                    pipes.report_custom_message({"kind": "grpo_summary", **reported.summary()})
                _emit_summary(reported)
        finally:
            for name in _FORWARDED_LOGGERS:
                logging.getLogger(name).removeHandler(handler)
    return code


if __name__ == "__main__":
    sys.exit(main())
