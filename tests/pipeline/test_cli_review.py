"""`seedwheel review sample` samples the current policy as the pipeline finds it (the promotion record's file, or
its table in the production database), and both review commands refuse an object-store root in one line."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from core.state import StateStore
from core.tables import frame_from_records, write_table
from pipeline.cli import main
from pipeline.promoted import current_policy
from pipeline.settings import Settings
from review.sampling import read_outputs
from tests.paths import copy_seeds
from tests.services import fresh_database
from training.promotion import PromotionRegistry
from validators.registry import VerifyContext
from validators.seeds import load_seeds
from validators.tasks import TASK_FIELDS


def test_the_current_policy_is_the_promoted_model_else_the_base_model(tmp_path: Path) -> None:
    settings = Settings.from_env({"SEEDWHEEL_BASE_MODEL": "org/base"}, home=tmp_path / "home")
    assert current_policy(settings) == "org/base"
    PromotionRegistry(tmp_path / "home" / "promotion" / "promoted.json").promote("ckpt/run-7")
    assert current_policy(settings) == "ckpt/run-7"


def test_review_sample_samples_the_model_promoted_in_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres_url: str, tiny_model_dir: Path
) -> None:
    url = fresh_database(postgres_url)
    seeds = copy_seeds(tmp_path / "seeds", ["arithmetic"])
    home = tmp_path / "home"
    context = VerifyContext(seeds_dir=seeds)
    tasks = [{k: t[k] for k in TASK_FIELDS} for t in load_seeds([seeds], context=context).tasks]
    write_table(frame_from_records(tasks, TASK_FIELDS), home / "train_tasks.parquet")
    # The production profile with its database: a worker's promotion lands in the table, not in a file here.
    PromotionRegistry(tmp_path / "worker" / "promoted.json", StateStore(url)).promote(str(tiny_model_dir))
    environ = {
        "SEEDWHEEL_PROFILE": "production",
        "SEEDWHEEL_DATABASE_URL": url,
        "SEEDWHEEL_SEEDS": str(seeds),
        "SEEDWHEEL_BASE_MODEL": str(tmp_path / "not-the-current-policy"),  # sampling it would fail
    }
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(main, ["review", "sample", "--n", "1", "--max-tokens", "4", "--home", str(home)])
    assert result.exit_code == 0, result.output
    (output,) = read_outputs(home)
    assert output["model"] == str(tiny_model_dir)
    assert not (home / "promotion").exists()


@pytest.mark.parametrize("command", [["review"], ["review", "sample"]])
def test_an_object_store_root_is_refused_in_one_line_that_names_the_fix(command: list[str]) -> None:
    result = CliRunner().invoke(main, [*command, "--home", "s3://bucket/seedwheel"])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [
        "Error: --home s3://bucket/seedwheel is an object store; the review page and review sample read and write a "
        "local folder; copy s3://bucket/seedwheel/{train_tasks,judged_tasks,judge_calibration,review_queue}.parquet "
        "into a folder and pass --home FOLDER"
    ]
