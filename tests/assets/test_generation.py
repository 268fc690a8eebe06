"""Generation assets on planted seeds: a second night reuses every unchanged seed's programmatic output, and
generation in shards gives the tables of one step."""

import dataclasses
import shutil
from collections import Counter

from core.shards import shard_of
from core.tables import read_table
from curation.seed_import import ImportSpec, import_seeds
from pipeline.runs import materialize
from tests.assets.test_curation import plant
from validators.registry import VerifyContext
from validators.seeds import load_seeds

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


def test_a_new_family_imported_with_a_numeric_verifier_gets_variants_in_a_regeneration(settings, tmp_path):
    # A team's own family: no generator is named after it, and none was written for it.
    source = tmp_path / "conversions.csv"
    source.write_text(
        "question,solution\n"
        '"How many grams are in 1.25 kilograms?","1.25 * 1000 = 1250 grams.\n#### 1250"\n'
        '"How many centimeters are in 3.5 meters?","3.5 * 100 = 350 centimeters.\n#### 350"\n'
        '"A rope is 7 meters long. How many millimeters is it?","7 * 1000 = 7000 millimeters.\n#### 7000"\n'
    )
    spec = ImportSpec(family="unit_conversion", prompt="{question}", answer="solution", verifier="numeric_answer")
    seeds_dir = tmp_path / "seeds"
    assert import_seeds(source, spec, seeds_dir / "unit_conversion" / "conversions.jsonl").written == 3
    settings = dataclasses.replace(settings, seeds_dir=seeds_dir)
    plant(settings, [], [])  # no failure log: the night's only parents are the seeds
    summary = materialize(settings, "seed_tasks,task_variants", resources=NO_REWRITES)
    assert summary.success, summary.failures
    variants = read_table(settings.home / "task_variants.parquet")
    assert set(variants["family"]) == {"unit_conversion"}
    assert Counter(v["name"] for v in variants["lineage"].map(lambda lineage: lineage["generator"])) == {
        "arithmetic_resample": len(variants)
    }
    assert variants["lineage"].map(lambda lineage: lineage["seed_id"]).nunique() == 3
    assert read_table(settings.home / "variant_rejects.parquet").query("reason_code == 'no_generator'").empty


def generate(settings, shards: int) -> tuple[dict, dict[str, bytes]]:
    resources = {"plan": {**NO_REWRITES["plan"], "generation_shards": shards}}
    summary = materialize(settings, "task_variants", resources=resources)
    assert summary.success, summary.failures
    tables = {name: (settings.home / f"{name}.parquet").read_bytes() for name in ("task_variants", "variant_rejects")}
    return next(a for a in summary.assets if a.key == "task_variants").metadata, tables


def test_three_shards_give_the_tables_of_one_step_byte_for_byte(settings):
    context = VerifyContext(seeds_dir=settings.seeds_dir)
    seeds = load_seeds([settings.seeds_dir / "arithmetic", settings.seeds_dir / "sql"], context=context).tasks
    seeds = seeds[:12] + seeds[-12:]  # both families
    # A failure task without a user turn: rejected by its generator (it rewrites the last user message).
    failures = [{**seeds[0], "task_id": "f" * 16, "prompt": [{"role": "system", "content": "no user turn"}]}]
    plant(settings, seeds, [], failures)
    _, one = generate(settings, 1)
    shutil.rmtree(settings.home / "generation_cache")  # the shards generate every parent again
    metadata, three = generate(settings, 3)
    assert three == one
    # Rows keep the parents' order (seeds, then failure tasks), not the order of the shards.
    variants = read_table(settings.home / "task_variants.parquet")
    order = {seed["task_id"]: i for i, seed in enumerate(seeds)}
    positions = [order[lineage["parent_id"]] for lineage in variants["lineage"]]
    assert positions == sorted(positions) and len(set(positions)) > 12
    assert read_table(settings.home / "variant_rejects.parquet")["parent_id"].tolist()[-1] == "f" * 16
    table = [line.split("|") for line in metadata["shard_balance"].splitlines()[2:]]  # | shard | parents | ...
    balance = {int(cells[1]): int(cells[2]) for cells in table}
    assert balance == Counter(shard_of(p["task_id"], 3) for p in [*seeds, *failures])
    assert (metadata["shards"], metadata["shard_steps"], metadata["parents"]) == (3, len(balance), 25)
    assert metadata["programmatic_parents_generated"] == 25 and len(balance) >= 2
    assert not list((settings.home / "steps").iterdir()), "the merged shards' scratch was left behind"

    metadata, _ = generate(settings, 2)  # a new shard count: the cache is keyed by parent, not by shard
    assert (metadata["programmatic_parents_reused"], metadata["programmatic_parents_generated"]) == (25, 0)


def test_an_impossible_shard_count_stops_before_any_work(settings):
    context = VerifyContext(seeds_dir=settings.seeds_dir)
    plant(settings, load_seeds([settings.seeds_dir / "arithmetic"], context=context).tasks[:2], [])
    summary = materialize(settings, "task_variants", resources={"plan": {"generation_shards": 0}})
    assert not summary.success
    assert "generation_shards must be a whole number of at least 1, got 0" in str(summary.failures)
    assert not (settings.home / "generation_cache").exists()
