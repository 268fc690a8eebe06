"""Generation assets on planted seeds: a second night reuses every unchanged seed's programmatic output."""

from pipeline.runs import materialize
from tests.assets.test_curation import plant
from validators.registry import VerifyContext
from validators.seeds import load_seeds
from validators.tables import read_table

# Programmatic variants only: the LLM rewrites have their own call cache (tests/test_quickstart_graph.py).
NO_REWRITES = {"plan": {"rewrite_kinds": []}}


def test_a_second_materialization_reuses_every_unchanged_parent(settings):
    context = VerifyContext(seeds_dir=settings.seeds_dir)
    seeds = load_seeds([settings.seeds_dir / "arithmetic", settings.seeds_dir / "sql"], context=context).tasks[:40]
    plant(settings, seeds, [])
    first = materialize(settings, "task_variants", resources=NO_REWRITES)
    variants = read_table(settings.home / "task_variants.parquet")
    second = materialize(settings, "task_variants", resources=NO_REWRITES)
    assert first.success and second.success, (first.failures, second.failures)
    metadata = [next(a for a in s.assets if a.key == "task_variants").metadata for s in (first, second)]
    reuse = [(m["parents"], m["programmatic_parents_reused"], m["programmatic_parents_generated"]) for m in metadata]
    assert reuse == [(40, 0, 40), (40, 40, 0)]
    assert metadata[0]["rows"] == metadata[1]["rows"] > 0
    assert read_table(settings.home / "task_variants.parquet")["task_id"].tolist() == variants["task_id"].tolist()
