"""The GRPO child process: `python -m training.grpo_job --config CONFIG.json`, with or without Dagster Pipes.

The `grpo_checkpoint` asset launches this out of process (`PipesSubprocessClient`, or `PipesK8sClient` for a GPU
pod). Under Pipes it streams every metrics dict back as a custom message (`{"kind": "grpo_metrics", ...}`) plus
a one-line `pipes.log.info`, forwards this process's warnings (a verifier that raised, filtered prompts) to the
Dagster log, and ends with `report_asset_materialization` (checkpoint path, steps, final reward mean, filtered
rows, verifier versions). Without Pipes (a person, a GPU launcher) it logs to stderr and prints one JSON summary
line last on stdout. The only Dagster dependency is `dagster_pipes` (small, dependency-free), imported only when
the process was launched by Pipes.

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
`SeedwheelGRPOConfig` field (every `trl.GRPOConfig` field included); `logging_steps` defaults to 1 here so each
step's metrics stream. Exit codes: 0 done, 2 bad config or data (message on stderr), 1 a training failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.grpo import GRPOResult, cpu_defaults, grpo_config_class, run_grpo, runtime_defaults

# Named explicitly: under `python -m` this module is `__main__`, and the Pipes log handler sits on "training".
logger = logging.getLogger("training.grpo_job")

PIPES_EXTRA_KEY = "grpo_job_config"
METRICS_MESSAGE_KIND = "grpo_metrics"
RUNTIMES = ("auto", "cpu", "none")
EXIT_OK, EXIT_TRAINING_FAILED, EXIT_BAD_CONFIG = 0, 1, 2
# Defaults of the job only (not of the config class): stream every step's metrics.
JOB_GRPO_DEFAULTS: dict[str, Any] = {"logging_steps": 1}
# Log records from these packages reach Dagster under Pipes: rewards, filtering and training progress.
_FORWARDED_LOGGERS = ("training", "validators")
# Summary and metric keys worth a line in the Dagster log (the full dict goes as a custom message).
_LOG_LINE_KEYS = ("reward", "reward_std", "frac_reward_zero_std", "kl", "completions/mean_length", "loss")


class GRPOJobConfigError(ValueError):
    """A job config file that cannot be used: unreadable, missing keys, unknown keys or bad values."""


@dataclass(frozen=True)
class GRPOJobConfig:
    """One GRPO job, as read from the JSON config.

    Args:
        model_path: the policy to start from (a model directory or a hub id).
        output_dir: checkpoints and `final/` go here; a rerun resumes from its last complete checkpoint.
        train_file: the exported train Parquet.
        runtime: `auto`, `cpu` or `none`: which machine defaults go under `grpo`.
        grpo: `SeedwheelGRPOConfig` fields.

    Example:
        >>> GRPOJobConfig.from_mapping({"model_path": "m", "output_dir": "o", "train_file": "t.parquet"}).runtime
        'auto'
    """

    model_path: str
    output_dir: str
    train_file: str
    runtime: str = "auto"
    grpo: dict[str, Any] = field(default_factory=dict)

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
        required = ("model_path", "output_dir", "train_file")
        missing = [k for k in required if not isinstance(raw.get(k), str) or not raw.get(k)]
        if missing:
            raise GRPOJobConfigError(f"{source}: {', '.join(missing)} must be given as non-empty text")
        runtime = raw.get("runtime", "auto")
        if runtime not in RUNTIMES:
            raise GRPOJobConfigError(f"{source}: runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
        grpo = raw.get("grpo", {})
        if not isinstance(grpo, Mapping):
            raise GRPOJobConfigError(f"{source}: 'grpo' must be an object of GRPO parameters")
        clashes = sorted(set(grpo) & set(required))
        if clashes:
            raise GRPOJobConfigError(f"{source}: give {', '.join(clashes)} at the top level, not inside 'grpo'")
        return cls(
            model_path=raw["model_path"],
            output_dir=raw["output_dir"],
            train_file=raw["train_file"],
            runtime=runtime,
            grpo=dict(grpo),
        )

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


def materialization_metadata(result: GRPOResult) -> dict[str, Any]:
    """Asset metadata for a finished run, in `dagster_pipes` form (typed where inference would guess wrong).

    Args:
        result: the run's result.

    Returns:
        A mapping for `pipes.report_asset_materialization(metadata=...)`.

    Example:
        >>> materialization_metadata(result)["steps"]  # doctest: +SKIP
        100
    """
    summary = result.summary()
    reward = summary["final_reward_mean"]
    return {
        "checkpoint_dir": {"raw_value": summary["checkpoint_dir"], "type": "path"},
        "steps": summary["steps"],
        "final_reward_mean": {"raw_value": reward, "type": "float"}
        if reward is not None
        else {"raw_value": None, "type": "null"},
        "train_rows": summary["train_rows"],
        "filtered_rows": summary["filtered_rows"],
        "filtered_task_ids": {"raw_value": summary["filtered_task_ids"], "type": "json"},
        "verifier_versions": {"raw_value": summary["verifier_versions"], "type": "json"},
        "reward_means": {"raw_value": summary["reward_means"], "type": "json"},
        "resumed_from": {"raw_value": summary["resumed_from"] or "", "type": "text"},
        "train_seconds": {"raw_value": summary["train_seconds"], "type": "float"},
    }


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
        result = run_grpo(job.model_path, config, on_metrics=on_metrics)
    except (GRPOConfigError, GRPODataError) as exc:
        logger.error("cannot train: %s", exc)
        return EXIT_BAD_CONFIG, None
    return EXIT_OK, result


def _emit_summary(result: GRPOResult) -> None:
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
            _emit_summary(result)
        return code

    from dagster_pipes import open_dagster_pipes

    with open_dagster_pipes() as pipes:
        handler = _PipesLogHandler(pipes.log)
        for name in _FORWARDED_LOGGERS:
            logging.getLogger(name).addHandler(handler)
        try:
            code, result = _train(args.config, pipes)
            if result is not None:
                if pipes.is_asset_step:
                    pipes.report_asset_materialization(metadata=materialization_metadata(result))
                else:
                    pipes.report_custom_message({"kind": "grpo_summary", **result.summary()})
                _emit_summary(result)
        finally:
            for name in _FORWARDED_LOGGERS:
                logging.getLogger(name).removeHandler(handler)
    return code


if __name__ == "__main__":
    sys.exit(main())
