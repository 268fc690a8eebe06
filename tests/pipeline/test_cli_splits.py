"""`seedwheel splits`: the split in force, and a re-split that is explicit, logged and keeps trained roots."""

from click.testing import CliRunner

from core.tables import frame_from_records, read_table, write_table
from curation.manifests import CheckpointManifest, write_manifest
from curation.split_ledger import SplitLedger
from curation.splits import TRAIN, task_roots
from pipeline.cli import main
from pipeline.runs import materialize
from resources import CHECKPOINTS_FOLDER, SPLITS_FOLDER
from tests.assets.test_curation import judged
from tests.assets.test_splits import sides_now


def cli(settings, *args: str):
    return CliRunner().invoke(main, [*args, "--home", str(settings.home)])


def test_a_resplit_needs_yes_keeps_trained_roots_and_the_next_split_applies_it(settings, seed_records):
    write_table(frame_from_records(judged(seed_records)), settings.home / "judged_tasks.parquet")
    assert materialize(settings, "train_tasks").success
    before = sides_now(settings)
    train = read_table(settings.home / "train_tasks.parquet").to_dict(orient="records")
    trained = train[:5]
    manifest = CheckpointManifest(
        name="sft-abc",
        stage="sft",
        checkpoint="/models/sft",
        start_model="base",
        base_model="base",
        task_ids=sorted(t["task_id"] for t in trained),
        split_seq=1,
        split_epoch=0,
        split_plan_id="x",
        run_id="r",
    )
    write_manifest(settings.home / CHECKPOINTS_FOLDER, manifest, trained)
    ledger = SplitLedger(settings.home / SPLITS_FOLDER)

    preview = cli(settings, "splits", "resplit", "--salt", "another-salt", "--note", "more eval")
    assert preview.exit_code == 0, preview.output
    assert "roots move" in preview.output and "nothing written" in preview.output
    assert ledger.state().epoch == 0 and ledger.state().seq == 1

    done = cli(settings, "splits", "resplit", "--salt", "another-salt", "--note", "more eval", "--yes")
    assert done.exit_code == 0, done.output
    state = ledger.state()
    assert state.epoch == 1 and "split epoch 1 in force" in done.output
    assert all(state.sides[root] == TRAIN for root in task_roots(trained))
    moved = ledger.plans()[-1]["moved"]
    assert moved and all(before[root] == was for root, (was, _) in moved.items())

    shown = cli(settings, "splits", "show")
    assert "epoch 1" in shown.output and "resplit" in shown.output and "(more eval)" in shown.output
    assert materialize(settings, "train_tasks").success
    assert sides_now(settings) == {root: state.sides[root] for root in before}


def test_a_resplit_with_the_salt_in_force_is_refused(settings, seed_records):
    write_table(frame_from_records(judged(seed_records)), settings.home / "judged_tasks.parquet")
    assert materialize(settings, "train_tasks").success
    salt = SplitLedger(settings.home / SPLITS_FOLDER).state().salt
    result = cli(settings, "splits", "resplit", "--salt", salt, "--note", "n", "--yes")
    assert result.exit_code == 2 and "is the salt in force" in result.output
