"""`seedwheel export`: a stored split in TRL's or verl's format, and one-line errors when it cannot be."""

import json

import pandas as pd
import pytest
from click.testing import CliRunner

import interop.verl
from core.tables import frame_from_records, read_table, write_table
from pipeline.cli import main
from tests.paths import copy_seeds
from training.export import EXPORT_SCHEMA
from validators.seeds import load_seeds
from validators.tasks import TASK_FIELDS


@pytest.fixture
def home(tmp_path):
    """A storage root holding train and eval splits of real seed tasks (arithmetic and SQL), as the splits step
    stores them (`core.tables.write_table`), and the seeds folder the SQL tasks' database is in."""
    seeds = copy_seeds(tmp_path / "seeds", ["arithmetic", "sql"])
    tasks = [{k: t[k] for k in TASK_FIELDS} for t in load_seeds([seeds]).tasks]
    home = tmp_path / "home"
    write_table(frame_from_records(tasks[0::2]), home / "train_tasks.parquet")
    write_table(frame_from_records(tasks[1::2]), home / "eval_tasks.parquet")
    return home, seeds


def export(home, seeds, *args: str):
    return CliRunner().invoke(main, ["export", *args, "--home", str(home)], env={"SEEDWHEEL_SEEDS": str(seeds)})


def test_verl_export_writes_the_split_and_prints_the_config_lines(home):
    home, seeds = home
    out = home.parent / "verl" / "eval.parquet"
    result = export(home, seeds, "--format", "verl", "-o", str(out), "--split", "eval")
    assert result.exit_code == 0, result.output
    expected = read_table(home / "eval_tasks.parquet")
    rows = pd.read_parquet(out)
    assert len(rows) == len(expected) > 0
    assert [json.loads(gt["ground_truth"]) for gt in rows["reward_model"]] == list(expected["verifier"])
    assert {info["split"] for info in rows["extra_info"]} == {"eval"}
    assert f"wrote {len(expected)} eval tasks" in result.output
    # The lines a user pastes into verl's command: the data file, this file's reward function, the seeds folder.
    assert f"data.val_files={out.resolve()}" in result.output
    assert f"custom_reward_function.path={interop.verl.__file__}" in result.output
    assert "custom_reward_function.name=compute_score" in result.output
    assert f"+custom_reward_function.reward_kwargs.seeds_dir={seeds}" in result.output


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_trl_export_writes_the_train_split_as_the_file_suffix_says(home, suffix):
    home, seeds = home
    out = home.parent / f"train{suffix}"
    result = export(home, seeds, "--format", "trl", "-o", str(out))
    assert result.exit_code == 0, result.output
    expected = read_table(home / "train_tasks.parquet")
    if suffix == ".parquet":
        rows = pd.read_parquet(out)
        assert list(rows.columns) == EXPORT_SCHEMA.names
        specs = [json.loads(text) for text in rows["verifier"]]
    else:
        specs = [json.loads(json.loads(line)["verifier"]) for line in out.read_text(encoding="utf-8").splitlines()]
    assert specs == list(expected["verifier"])


def test_nemo_gym_export_writes_one_row_per_task_that_reads_back_as_it(home):
    home, seeds = home
    out = home.parent / "train.jsonl"
    result = export(home, seeds, "--format", "nemo-gym", "-o", str(out))
    assert result.exit_code == 0, result.output
    expected = read_table(home / "train_tasks.parquet")
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [row["task_id"] for row in rows] == list(expected["task_id"])
    assert [row["responses_create_params"]["input"] for row in rows] == list(expected["prompt"])


@pytest.mark.parametrize(
    ("fmt", "name", "says", "code"),
    [
        # verl reads Parquet only.
        ("verl", "train.jsonl", "*.parquet", 1),
        # TRL's export is Parquet or JSON Lines.
        ("trl", "train.csv", "*.parquet or *.jsonl", 1),
        # NeMo Gym's datasets are JSON Lines; refused before the split is read (a usage error).
        ("nemo-gym", "train.parquet", "*.jsonl", 2),
    ],
)
def test_a_file_name_of_the_wrong_kind_is_one_line_and_writes_nothing(home, fmt, name, says, code):
    home, seeds = home
    result = export(home, seeds, "--format", fmt, "-o", str(home.parent / name))
    assert result.exit_code == code and "Traceback" not in result.output
    assert says in result.output and name in result.output
    assert not (home.parent / name).exists()


def test_a_home_without_splits_says_how_to_make_them(tmp_path):
    result = CliRunner().invoke(
        main, ["export", "--format", "verl", "-o", str(tmp_path / "t.parquet"), "--home", str(tmp_path / "empty")]
    )
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "no train split at" in result.output
    assert "make quickstart" in result.output and "seedwheel run --job regeneration_job" in result.output
