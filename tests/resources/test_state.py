"""The storage resource picks where the shared records live: SEEDWHEEL_DATABASE_URL set, the split ledger, the
promotion record and the run-level locks are in PostgreSQL (the dedup index's files stay files); unset, files."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from curation.splits import SplitConfig
from pipeline.cli import main
from resources import CurationPolicy, PromotionGate, StorageError, StorageRoot
from tests.curation.test_splits import seeds
from tests.services import fresh_database

CONFIG = SplitConfig(salt="resources")


def record_everything(home: Path) -> StorageRoot:
    """Assign a split, promote a checkpoint and commit a row to the dedup index through the resources."""
    storage = StorageRoot(root=str(home))
    storage.split_ledger().assign(seeds("a", 10), CONFIG, run_id="run-1")
    PromotionGate(registry_path=str(home / "promotion" / "promoted.json")).registry(storage.state()).promote("ckpt-1")
    with CurationPolicy().dedup_index(storage) as index:
        index.stage_texts(["task-1"], ["What is the sum of 2 and 3? Answer with a number."])
        assert index.commit() == 1
    return storage


def test_the_database_variable_moves_the_ledger_the_registry_and_the_locks(tmp_path, monkeypatch, postgres_url):
    url = fresh_database(postgres_url)
    monkeypatch.setenv("SEEDWHEEL_DATABASE_URL", url)
    storage = record_everything(tmp_path / "home")

    # Only the dedup index's data is on disk, without its lock file; the URL's password shows nowhere.
    files = sorted(str(p.relative_to(tmp_path / "home")) for p in (tmp_path / "home").rglob("*"))
    assert files and all(f.startswith("dedup_index") for f in files) and not any(f.endswith(".lock") for f in files)
    password = url.split("@")[0].rsplit(":", 1)[1]
    assert storage.state().in_database and password not in repr(storage.state())
    # A worker whose storage root is mounted elsewhere, and the command line, read the same records.
    elsewhere = StorageRoot(root=str(tmp_path / "mounted-elsewhere"))
    assert elsewhere.split_ledger().state() == storage.split_ledger().state()
    gate = PromotionGate(registry_path=str(tmp_path / "mounted-elsewhere" / "promoted.json"))
    assert gate.registry(elsewhere.state()).current().model == "ckpt-1"
    shown = CliRunner().invoke(main, ["splits", "show", "--home", str(tmp_path / "cli-home")])
    assert shown.exit_code == 0 and "split plan 1 (epoch 0" in shown.output and "run run-1" in shown.output


def test_without_the_variable_everything_stays_in_files_under_the_root(tmp_path):
    storage = record_everything(tmp_path / "home")
    assert not storage.state().in_database
    home = tmp_path / "home"
    assert (home / "splits" / "ledger.parquet").exists() and (home / "splits" / ".lock").exists()
    assert (home / "promotion" / "promoted.json").exists()
    [index_folder] = (home / "dedup_index").iterdir()
    assert (index_folder / ".lock").exists() and (index_folder / "manifest.json").exists()


def test_an_object_store_root_needs_the_database(monkeypatch):
    monkeypatch.delenv("SEEDWHEEL_DATABASE_URL", raising=False)
    storage = StorageRoot(root="s3://bucket/seedwheel")
    with pytest.raises(StorageError, match=r"s3://bucket/seedwheel is an object store") as caught:
        storage.split_ledger()
    assert "SEEDWHEEL_DATABASE_URL=postgresql://" in caught.value.hint
    assert storage.location("export", "train.jsonl") == "s3://bucket/seedwheel/export/train.jsonl"


@pytest.mark.parametrize(
    "checkpoint",
    [
        "/data/seedwheel/training/sft/0a1b/final",  # a checkpoint under a local root: loaded where it is
        "HuggingFaceTB/SmolLM2-135M-Instruct",  # a hub id: the loader downloads it
    ],
)
def test_a_local_checkpoint_or_a_hub_id_is_loaded_as_it_is(checkpoint):
    assert StorageRoot(root="s3://bucket/seedwheel").model_dir(checkpoint) == checkpoint
    assert StorageRoot(root="/data/seedwheel").model_dir(checkpoint) == checkpoint
