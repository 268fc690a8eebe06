"""Integration: the whole asset graph materialized on the example seeds into a temp dir, read back from Parquet."""

from pipeline.runs import materialize
from validators.registry import VerifyContext
from validators.seeds import load_seeds
from validators.tables import read_table
from validators.tasks import TASK_FIELDS, task_problems


def test_materialize_the_graph_and_read_the_parquet_back(settings):
    summary = materialize(settings)
    assert summary.success, summary.failures
    assert {a.key for a in summary.assets} == {"seed_tasks", "seed_rejects"}
    assert ("seed_files_clean", True, "passed") in summary.checks

    tasks = read_table(settings.home / "seed_tasks.parquet")
    expected = load_seeds([settings.seeds_dir], root=settings.seeds_dir.parent)
    assert tasks["task_id"].tolist() == [t["task_id"] for t in expected.tasks]
    # Every stored row is still a valid task record: nested fields survived the round trip.
    context = VerifyContext(seeds_dir=settings.seeds_dir)
    for row in tasks.to_dict(orient="records"):
        assert task_problems({k: row[k] for k in TASK_FIELDS}, context) == [], row["origin"]
    assert read_table(settings.home / "seed_rejects.parquet").empty


def test_rerun_overwrites_atomically(settings):
    assert materialize(settings).success
    first = read_table(settings.home / "seed_tasks.parquet")
    assert materialize(settings, "seed_tasks").success
    assert read_table(settings.home / "seed_tasks.parquet").equals(first)
    assert not [p for p in settings.home.iterdir() if p.name.startswith(".")]  # no temp files left
