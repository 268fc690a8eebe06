"""The GRPO job's config and result are shared types: what one side writes, the other reads back, or it fails."""

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.paths import SEEDS
from training.grpo import GRPOResult
from training.grpo_job import (
    GRPOJobConfig,
    GRPOJobConfigError,
    GRPOJobResult,
    GRPOJobResultError,
    job_grpo_settings,
    write_job,
)
from validators.seeds import load_seeds
from validators.tasks import TASK_FIELDS

RESULT = GRPOJobResult(
    checkpoint_dir="runs/grpo/output/final",
    steps=2,
    train_rows=7,
    filtered_task_ids=["t-long"],
    verifier_versions={"numeric_answer": [1]},
    reward_means={"rewards/numeric_answer/mean": 0.25},
    final_reward_mean=0.25,
    resumed_from=None,
    train_seconds=3.5,
)


def dagster_values(metadata: dict) -> dict:
    """What the asset gets back: each entry's plain value (`MetadataValue.value`), after a trip through JSON."""
    sent = json.loads(json.dumps(metadata))
    return {
        key: value["raw_value"] if isinstance(value, dict) and "raw_value" in value else value
        for key, value in sent.items()
    }


@pytest.mark.parametrize(
    "result",
    [
        RESULT,
        # A resumed run whose steps logged no reward: None survives as null, the resume point as text.
        GRPOJobResult("final", 0, 0, [], {}, {}, None, "runs/grpo/output/checkpoint-2", 0.0),
    ],
)
def test_the_result_round_trips_through_the_metadata(result):
    assert GRPOJobResult.from_metadata(result.to_metadata()) == result  # the dagster_pipes form
    assert GRPOJobResult.from_metadata(dagster_values(result.to_metadata())) == result  # as the asset reads it


def test_the_result_of_a_run_keeps_its_summary():
    run = GRPOResult(
        checkpoint_dir=Path("out/final"),
        metrics_history=[{"step": 1, "reward": 0.5, "rewards/numeric_answer/mean": 0.5}],
        steps=1,
        resumed_from=None,
        verifier_versions={"numeric_answer": [1]},
        train_rows=4,
        filtered_task_ids=["t9"],
        train_seconds=1.23456,
    )
    result = GRPOJobResult.from_run(run)
    # The stdout line (and the grpo_summary message) says what it always said.
    assert result.summary() == run.summary()
    assert (result.final_reward_mean, result.filtered_rows, result.train_seconds) == (0.5, 1, 1.235)


def test_a_key_renamed_on_one_side_fails_naming_it():
    metadata = RESULT.to_metadata()
    metadata["step_count"] = metadata.pop("steps")  # the child renamed a key the parent reads

    with pytest.raises(GRPOJobResultError, match=r"lacks steps \(it reported: checkpoint_dir, .*step_count") as error:
        GRPOJobResult.from_metadata(metadata)
    assert "same seedwheel code" in str(error.value)


def test_a_value_of_the_wrong_type_fails_naming_the_key():
    metadata = {**RESULT.to_metadata(), "steps": "2"}

    with pytest.raises(GRPOJobResultError, match=r"steps='2'; expected an integer"):
        GRPOJobResult.from_metadata(metadata)


def test_the_config_the_asset_writes_is_the_config_the_job_reads(tmp_path):
    tasks = [{k: t[k] for k in TASK_FIELDS} for t in load_seeds([SEEDS / "arithmetic"], root=SEEDS.parent).tasks[:2]]
    grpo = job_grpo_settings({"max_steps": 2}, {"*": 1.0}, 3)
    config, path = write_job(tasks, tmp_path, "models/sft", "cpu", grpo)
    assert config == GRPOJobConfig(
        model_path="models/sft",
        output_dir=str(tmp_path / "output"),
        train_file=str(tmp_path / "train.parquet"),
        runtime="cpu",
        grpo={"max_steps": 2, "reward_weights_by_verifier": {"*": 1.0}, "max_episode_turns": 3},
    )
    assert path == tmp_path / "job.json"
    assert GRPOJobConfig.from_file(path) == config
    assert json.loads(path.read_text()) == config.to_mapping()
    # The train file holds the tasks, in order, as the job loads them.
    assert [row["task_id"] for row in pq.read_table(config.train_file).to_pylist()] == [t["task_id"] for t in tasks]


def test_the_manifest_records_the_tasks_trained_on_and_the_job_where_its_folder_is_kept():
    tasks = [{"task_id": "t-short"}, {"task_id": "t-long"}, {"task_id": "t-other"}]
    assert RESULT.trained_tasks(tasks) == [tasks[0], tasks[2]]  # t-long was filtered for its prompt's length
    job = GRPOJobConfig(model_path="/tmp/copy", output_dir="/tmp/wc/output", train_file="/tmp/wc/train.parquet")
    kept = job.relocated("s3://b/sft/final", lambda path: path.replace("/tmp/wc", "s3://b/training/grpo/d"))
    assert (kept.model_path, kept.output_dir, kept.train_file) == (
        "s3://b/sft/final",
        "s3://b/training/grpo/d/output",
        "s3://b/training/grpo/d/train.parquet",
    )


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        # A machine the job has no defaults for.
        ({"runtime": "tpu"}, "runtime must be one of auto, cpu, none, got 'tpu'"),
        # Paths belong at the top level, where the job puts them into the trainer's config.
        ({"grpo": {"output_dir": "elsewhere"}}, "give output_dir at the top level"),
        # Nothing to train.
        ({"train_file": ""}, "train_file must be given as non-empty text"),
    ],
)
def test_a_config_checks_itself_when_built(fields, match):
    with pytest.raises(GRPOJobConfigError, match=match):
        GRPOJobConfig(**{"model_path": "m", "output_dir": "o", "train_file": "t", **fields})


def test_a_config_file_names_itself_in_the_error(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"model_path": "m", "output_dir": "o", "train_file": "t", "runtime": "tpu"}))

    with pytest.raises(GRPOJobConfigError, match=rf"^{path}: runtime must be one of"):
        GRPOJobConfig.from_file(path)
