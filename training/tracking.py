"""Experiment tracking: SFT, GRPO and DPO report to MLflow and TensorBoard, and the evaluation and the promotion
gate log their results to the MLflow run of the training that made the candidate.

- **Config**: `TrackingConfig` (an MLflow tracking URI, a TensorBoard folder, an experiment name) is handed to
  `run_sft`, `run_grpo` (through `training.grpo_job.GRPOJobConfig`, the file the child process reads) and
  `run_dpo`; None tracks nothing (`report_to=[]`). It is built by the pipeline's `tracking` resource, never read
  from the environment here.
- **Training**: the trainers report through TRL/transformers' own integrations, `report_to=["mlflow",
  "tensorboard"]`, configured explicitly rather than through their environment variables (`MLFLOW_*`,
  `TENSORBOARD_LOGGING_DIR`, which would be process-wide and outlive the call):
  - MLflow: `training_run` opens the run itself, with the tracking URI given, and makes it the active run for the
    training call. transformers' `MLflowCallback` finds a tracking URI set and a run active, so it neither reads
    `MLFLOW_TRACKING_URI` nor starts or ends a run: it logs the trainer's arguments and every step's metrics into
    this run, and `training_run` ends it (FAILED when training raised) and restores the previous tracking URI.
  - TensorBoard: transformers 5 has no `logging_dir` argument any more; its `TensorBoardCallback` writes where
    `TENSORBOARD_LOGGING_DIR` says, or through a writer it is given. `attach_tensorboard` swaps the callback
    `report_to` created for one with a writer on `<tensorboard_dir>/<run name>`, through the Trainer's public
    `remove_callback`/`add_callback`.
- **Resuming**: the run's id is recorded in `<output_dir>/tracking.json` as soon as it exists (`TrackedRun`), so a
  training run killed and started again in the same folder resumes the same MLflow run, as the trainer resumes
  its checkpoint.
- **Evaluation and gate**: the run is tagged with the checkpoint it produced (`CHECKPOINT_TAG`, set by the asset
  once it knows where the checkpoint is kept); `log_evaluation` and `log_gate` find it by that tag and log into it
  (pass@k per role and family, the paired differences with their intervals; the decision, its reasons, its
  per-family deltas), through an `MlflowClient` on the configured URI. A candidate no training run produced (the
  base model passed on untrained) gets a run of its own, tagged the same way.

Importing this module costs nothing: mlflow, transformers and torch are imported inside functions.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from core import SeedwheelError
from core.tables import atomic_write

if TYPE_CHECKING:
    from training.gate_eval import EvalTable
    from training.promotion import PromotionDecision, PromotionRecord
    from training.stats import Comparison

logger = logging.getLogger(__name__)

TRACKING_FILE = "tracking.json"  # in a training run's output folder: the MLflow run it logs to
DEFAULT_EXPERIMENT = "seedwheel"
MLFLOW_DB = "mlflow.db"  # the local store's file, in `local_store_uri`'s folder
ARTIFACTS_FOLDER = "artifacts"  # beside it: a local store's artifacts (MLflow's default would be ./mlartifacts)
# Run tags: which stage trained it, and the checkpoint it produced (where the pipeline keeps it).
STAGE_TAG = "seedwheel.stage"
CHECKPOINT_TAG = "seedwheel.checkpoint"
DECISION_TAG = "seedwheel.gate.decision"
BASELINE_TAG = "seedwheel.eval.baseline"
_METRIC_UNSAFE = re.compile(r"[^0-9A-Za-z_\-. :/]")  # what MLflow refuses in a metric name (as transformers cleans)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


class TrackingConfigError(SeedwheelError, ValueError):
    """A tracking configuration MLflow cannot use; the message names the value and the fix."""


@dataclass(frozen=True)
class TrackingConfig:
    """Where training, evaluation and the gate are tracked.

    Attributes:
        mlflow_uri: an MLflow tracking URI: `sqlite:////abs/path/mlflow.db` (a local store, `local_store_uri`),
            `http(s)://host:5000` (a tracking server, whose artifact store is its own), or any URI MLflow takes;
            empty: no MLflow.
        tensorboard_dir: a folder for TensorBoard event files, one subfolder per run; empty: no TensorBoard.
        experiment: the MLflow experiment the runs belong to (created on first use).

    Example:
        >>> TrackingConfig(mlflow_uri="sqlite:////tmp/t/mlflow.db", tensorboard_dir="/tmp/t/tb").report_to()
        ['mlflow', 'tensorboard']
        >>> TrackingConfig(mlflow_uri="runs/mlflow").mlflow_uri  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        training.tracking.TrackingConfigError: mlflow_uri='runs/mlflow' is not a URI; give sqlite:////abs/path/...
    """

    mlflow_uri: str = ""
    tensorboard_dir: str = ""
    experiment: str = DEFAULT_EXPERIMENT

    def __post_init__(self) -> None:
        if self.mlflow_uri and not _SCHEME.match(self.mlflow_uri) and self.mlflow_uri != "databricks":
            raise TrackingConfigError(
                f"mlflow_uri={self.mlflow_uri!r} is not a URI",
                hint="give sqlite:////abs/path/mlflow.db (a local store), http://host:5000 (a tracking server) or "
                "file:///abs/path (MLflow's file store)",
            )
        if not self.experiment.strip():
            raise TrackingConfigError("experiment is empty", hint=f"name one, e.g. {DEFAULT_EXPERIMENT!r}")

    @property
    def enabled(self) -> bool:
        """Whether anything is tracked (an MLflow URI or a TensorBoard folder)."""
        return bool(self.mlflow_uri or self.tensorboard_dir)

    def report_to(self) -> list[str]:
        """The trainer's `report_to`: the integrations this config feeds."""
        return [name for name, on in (("mlflow", self.mlflow_uri), ("tensorboard", self.tensorboard_dir)) if on]


def local_store_uri(folder: str | os.PathLike[str]) -> str:
    """The URI of a local MLflow store in `folder`: a SQLite database, `<folder>/mlflow.db` (MLflow 3 deprecates
    its plain-file store; SQLite needs no server, and `mlflow ui --backend-store-uri` opens it).

    Example:
        >>> local_store_uri("/srv/seedwheel/tracking/mlflow")
        'sqlite:////srv/seedwheel/tracking/mlflow/mlflow.db'
    """
    return f"sqlite:///{Path(folder).absolute() / MLFLOW_DB}"


@dataclass(frozen=True)
class TrackedRun:
    """The MLflow run (and TensorBoard folder) a training, evaluation or gate logged to.

    Attributes:
        run_id: the MLflow run's id; None when only TensorBoard is on.
        experiment_id: its experiment's id; None with it.
        tracking_uri: the MLflow store or server it is in; empty with no MLflow.
        tensorboard_dir: the run's TensorBoard folder; None when TensorBoard is off (evaluation and gate: always).
        name: the run's name.
    """

    run_id: str | None
    experiment_id: str | None
    tracking_uri: str
    tensorboard_dir: str | None
    name: str

    @property
    def ui_url(self) -> str | None:
        """Where the run is in the MLflow UI: a link on a tracking server, the UI's path (`#/experiments/<id>/runs/
        <id>`, after the address `mlflow ui` prints) on a local store; None without a run."""
        if self.run_id is None:
            return None
        path = f"#/experiments/{self.experiment_id}/runs/{self.run_id}"
        if urlsplit(self.tracking_uri).scheme in ("http", "https"):
            return f"{self.tracking_uri.rstrip('/')}/{path}"
        return path

    def summary(self) -> dict[str, Any]:
        """A JSON-ready record (the `tracking.json` file, and what crosses the job's process boundary)."""
        return asdict(self)

    @classmethod
    def from_summary(cls, values: Mapping[str, Any]) -> TrackedRun:
        """The run a `summary()` describes."""
        return cls(**{name: values[name] for name in cls.__dataclass_fields__})


def _rank() -> int:
    # Set by torchrun/accelerate for each process of a multi-GPU run; only the main process tracks.
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _safe_name(name: str) -> str:
    return re.sub(r"[^0-9A-Za-z_.-]+", "_", name).strip("._") or "run"


def _mlflow() -> Any:
    """The mlflow module, its usage telemetry off unless the environment says otherwise.

    MLflow decides at import whether to send telemetry to its vendor; the project sends none (Dagster's is off in
    pipeline/instance.py too), and an offline machine would only try. Every use here imports mlflow through this.
    """
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    import mlflow

    return mlflow


def _client(config: TrackingConfig) -> Any:
    return _mlflow().MlflowClient(tracking_uri=config.mlflow_uri)


def _experiment_id(client: Any, config: TrackingConfig) -> str:
    """The experiment's id, created on first use (a local store's artifacts beside its database)."""
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(config.experiment)
    if found is not None:
        return str(found.experiment_id)
    location = None
    if config.mlflow_uri.startswith("sqlite:///"):
        location = (Path(config.mlflow_uri.removeprefix("sqlite:///")).parent / ARTIFACTS_FOLDER).as_uri()
    try:
        return str(client.create_experiment(config.experiment, artifact_location=location))
    except MlflowException:  # another process created it meanwhile
        found = client.get_experiment_by_name(config.experiment)
        if found is None:
            raise
        return str(found.experiment_id)


def _store_ready(config: TrackingConfig) -> None:
    if config.mlflow_uri.startswith("sqlite:///"):  # SQLite makes the file, not its folder
        Path(config.mlflow_uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)


def recorded_run(output_dir: str | os.PathLike[str]) -> TrackedRun | None:
    """The run recorded in a training run's output folder (`tracking.json`), or None.

    Example:
        >>> recorded_run("runs/grpo/output").run_id  # doctest: +SKIP
        '3f2a...'
    """
    path = Path(output_dir, TRACKING_FILE)
    if not path.is_file():
        return None
    try:
        return TrackedRun.from_summary(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError):
        logger.warning("%s is unreadable: starting a new MLflow run", path)
        return None


def _resumable(client: Any, recorded: TrackedRun | None, config: TrackingConfig) -> str | None:
    """The recorded run's id when it is in this store still (a rerun after a kill), else None."""
    if recorded is None or recorded.run_id is None or recorded.tracking_uri != config.mlflow_uri:
        return None
    from mlflow.exceptions import MlflowException

    try:
        client.get_run(recorded.run_id)
    except MlflowException:
        return None
    return recorded.run_id


@contextmanager
def training_run(
    config: TrackingConfig | None, output_dir: str | os.PathLike[str], *, stage: str, name: str
) -> Iterator[TrackedRun | None]:
    """The MLflow run a training call logs to, active for the block, and its TensorBoard folder.

    A run recorded in `<output_dir>/tracking.json` is resumed (`mlflow.start_run(run_id=...)`); otherwise one is
    created in the experiment and recorded there at once, so a killed run started again resumes it. The block's
    trainer reports with `report_to=config.report_to()` (see the module docstring for why no environment variable
    is set). The run ends when the block does: FINISHED, or FAILED when it raised; the previous tracking URI is
    restored.

    Args:
        config: where to track; None or an empty config: nothing (the block gets None).
        output_dir: the training run's output folder (its checkpoints, `final`, and `tracking.json`).
        stage: `sft`, `grpo` or `dpo` (the run's `seedwheel.stage` tag).
        name: the run's name, also its TensorBoard subfolder's.

    Yields:
        The `TrackedRun`, or None when nothing is tracked (or on a process other than the main one).

    Example:
        >>> with training_run(config, "runs/sft", stage="sft", name="sft-demo") as run:  # doctest: +SKIP
        ...     trainer.train()
    """
    if config is None or not config.enabled or _rank() != 0:
        yield None
        return
    tensorboard = str(Path(config.tensorboard_dir, _safe_name(name)).absolute()) if config.tensorboard_dir else None
    if not config.mlflow_uri:
        yield TrackedRun(None, None, "", tensorboard, name)
        return
    mlflow = _mlflow()
    _store_ready(config)
    client = _client(config)
    experiment_id = _experiment_id(client, config)
    run_id = _resumable(client, recorded_run(output_dir), config)
    if run_id is None:
        run_id = str(client.create_run(experiment_id, run_name=name, tags={STAGE_TAG: stage}).info.run_id)
    else:
        logger.info("Resuming MLflow run %s (%s)", run_id, name)
    tracked = TrackedRun(run_id, experiment_id, config.mlflow_uri, tensorboard, name)
    with atomic_write(Path(output_dir, TRACKING_FILE), "w") as handle:
        handle.write(json.dumps(tracked.summary(), indent=2, sort_keys=True) + "\n")
    previous = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    mlflow.set_tracking_uri(config.mlflow_uri)
    try:
        # Nested under a run the caller has open (a notebook's), else the process's only active run.
        with mlflow.start_run(run_id=run_id, nested=mlflow.active_run() is not None):
            yield tracked
    finally:
        mlflow.set_tracking_uri(previous)  # None unsets it (and the variable it exported)


def report_to(configured: Any, tracked: TrackedRun | None) -> list[str]:
    """A trainer's `report_to`: the integrations the config already names plus the tracked ones.

    Example:
        >>> report_to(["wandb"], TrackedRun("r", "0", "sqlite:///x.db", "/tb/r", "r"))
        ['mlflow', 'tensorboard', 'wandb']
        >>> report_to([], None)
        []
    """
    names = set(configured or [])
    if tracked is not None:
        names |= {"mlflow"} if tracked.run_id else set()
        names |= {"tensorboard"} if tracked.tensorboard_dir else set()
    return sorted(names)


def attach_tensorboard(trainer: Any, tracked: TrackedRun | None) -> None:
    """Point the trainer's TensorBoard callback at the run's folder (see the module docstring); no-op without one."""
    if tracked is None or tracked.tensorboard_dir is None:
        return
    from torch.utils.tensorboard import SummaryWriter
    from transformers.integrations import TensorBoardCallback

    trainer.remove_callback(TensorBoardCallback)
    trainer.add_callback(TensorBoardCallback(tb_writer=SummaryWriter(log_dir=tracked.tensorboard_dir)))


def tag_checkpoint(config: TrackingConfig | None, run: TrackedRun | None, checkpoint: str) -> None:
    """Tag `run` with the checkpoint it produced, where the pipeline keeps it: the evaluation and the gate find
    the run by it (`find_run`)."""
    if config is None or not config.mlflow_uri or run is None or run.run_id is None:
        return
    _client(config).set_tag(run.run_id, CHECKPOINT_TAG, checkpoint)


def find_run(config: TrackingConfig, checkpoint: str) -> TrackedRun | None:
    """The newest run of the experiment tagged with `checkpoint` (the training that produced it), or None."""
    _store_ready(config)
    client = _client(config)
    experiment_id = _experiment_id(client, config)
    quoted = checkpoint.replace("\\", "\\\\").replace("'", "\\'")
    runs = client.search_runs(
        [experiment_id], filter_string=f"tags.`{CHECKPOINT_TAG}` = '{quoted}'", order_by=["start_time DESC"]
    )
    if not runs:
        return None
    info = runs[0].info
    return TrackedRun(str(info.run_id), experiment_id, config.mlflow_uri, None, str(info.run_name))


def candidate_run(config: TrackingConfig | None, checkpoint: str) -> TrackedRun | None:
    """The run the evaluation and the gate of `checkpoint` log to: the training run that produced it, else (a model
    no run trained, such as the base model passed on) a run of its own, tagged with it. None: no MLflow."""
    if config is None or not config.mlflow_uri:
        return None
    found = find_run(config, checkpoint)
    if found is not None:
        return found
    client = _client(config)
    experiment_id = _experiment_id(client, config)
    name = f"eval-{_safe_name(Path(checkpoint).name)}"
    run = client.create_run(experiment_id, run_name=name, tags={STAGE_TAG: "eval", CHECKPOINT_TAG: checkpoint})
    client.set_terminated(run.info.run_id)
    return TrackedRun(str(run.info.run_id), experiment_id, config.mlflow_uri, None, name)


def metric_name(key: str) -> str:
    """`key` as an MLflow metric name: `pass@k` spelled `pass_at_k`, other characters MLflow refuses as `_`.

    Example:
        >>> metric_name("eval/candidate/pass@1")
        'eval/candidate/pass_at_1'
    """
    return _METRIC_UNSAFE.sub("_", key.replace("@", "_at_"))


def _log(config: TrackingConfig, run: TrackedRun, metrics: Mapping[str, float], tags: Mapping[str, str]) -> None:
    import math
    import time

    from mlflow.entities import Metric, RunTag

    assert run.run_id is not None
    now = int(time.time() * 1000)
    _client(config).log_batch(
        run.run_id,
        metrics=[
            Metric(metric_name(key), float(value), now, 0)
            for key, value in metrics.items()
            if isinstance(value, int | float) and math.isfinite(value)
        ],
        tags=[RunTag(key, value) for key, value in tags.items()],
    )


def _differences(prefix: str, comparison: Comparison) -> dict[str, float]:
    """The paired differences, overall and per family, each with its interval: `<prefix>/difference`, ...,
    `<prefix>/family/<family>/difference_low`, ..."""
    parts = [(prefix, comparison.overall)]
    parts += [(f"{prefix}/family/{family}", paired) for family, paired in comparison.families.items()]
    out: dict[str, float] = {}
    for at, paired in parts:
        out |= {
            f"{at}/difference": paired.difference.value,
            f"{at}/difference_low": paired.difference.low,
            f"{at}/difference_high": paired.difference.high,
            f"{at}/tasks": paired.tasks,
        }
    return out


def log_evaluation(
    config: TrackingConfig | None, candidate: str, baseline: str, table: EvalTable
) -> TrackedRun | None:
    """Log a checkpoint evaluation to the candidate's run (`candidate_run`): each role's pass@k overall
    (`eval/candidate/pass_at_1`, ...) and per family, the paired differences with their intervals, and the
    per-family table as `eval/by_family.json`.

    Returns:
        The run logged to; None without MLflow.
    """
    run = candidate_run(config, candidate)
    if config is None or run is None or run.run_id is None:
        return None
    metrics: dict[str, float] = {f"eval/{key}": value for key, value in table.overall().items()}
    for role, families in table.pass_at_1().items():
        metrics |= {f"eval/{role}/family/{family}/pass@1": value for family, value in families.items()}
    metrics |= _differences("eval", table.comparison)
    _log(config, run, metrics, {BASELINE_TAG: baseline})
    by_family = {"candidate": candidate, "baseline": baseline, "by_family": table.by_family()}
    _client(config).log_dict(run.run_id, by_family, "eval/by_family.json")
    return run


def log_gate(
    config: TrackingConfig | None, decision: PromotionDecision, comparison: Comparison, record: PromotionRecord
) -> TrackedRun | None:
    """Log a promotion decision to the candidate's run (`candidate_run`): `gate/promoted` (1 or 0), the paired
    differences overall and per family with their intervals (`gate/difference_low`,
    `gate/family/<family>/difference`, ...), the decision as the tag `seedwheel.gate.decision`, and the whole
    record (reasons, numbers, the production failures fixed and broken) as `gate/decision.json`.

    Returns:
        The run logged to; None without MLflow.
    """
    run = candidate_run(config, record["candidate"])
    if config is None or run is None or run.run_id is None:
        return None
    metrics = {"gate/promoted": float(decision.promote), **_differences("gate", comparison)}
    _log(config, run, metrics, {DECISION_TAG: decision.verdict, BASELINE_TAG: record["baseline"]})
    _client(config).log_dict(run.run_id, dict(record), "gate/decision.json")
    return run
