"""Curation assets on planted data: bad variants are rejected with a reason, and the validity floor blocks;
validation in shards gives the tables of one step, also with a step per process."""

import os
import shutil
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest

from core.cache_store import CacheStore
from core.shards import shard_of
from core.tables import frame_from_records, read_table, write_table
from curation.splits import SplitConfig, plan_splits
from generators.base import derive_task
from pipeline.instance import open_instance
from pipeline.runs import materialize
from validators.registry import VerifyContext
from validators.seeds import load_seeds
from validators.tasks import TASK_FIELDS, compute_task_id

GENERATOR = {"name": "planted", "version": 1, "params": {}}


@pytest.fixture
def arithmetic_seeds(settings) -> list[dict]:
    folder = settings.seeds_dir / "arithmetic"
    seeds = load_seeds([folder], root=settings.seeds_dir.parent, context=VerifyContext(seeds_dir=settings.seeds_dir))
    return seeds.tasks[:4]


def plant(settings, seeds: list[dict], variants: list[dict], failures: list[dict] = ()) -> None:
    """Write upstream assets as a previous run would have, so only curation runs (no failure logs by default)."""
    write_table(frame_from_records(seeds, (*TASK_FIELDS, "origin")), settings.home / "seed_tasks.parquet")
    write_table(frame_from_records(variants, TASK_FIELDS), settings.home / "task_variants.parquet")
    write_table(frame_from_records(failures, TASK_FIELDS), settings.home / "failure_tasks.parquet")


def variant(seed: dict, answer: str, reference: str) -> dict:
    prompt = [*seed["prompt"][:-1], {"role": "user", "content": seed["prompt"][-1]["content"] + " (variant)"}]
    params = {"answer": answer}
    return derive_task(seed, prompt=prompt, verifier_params=params, reference=reference, generator=GENERATOR)


def test_bad_variants_go_to_rejects_with_the_reason(settings, arithmetic_seeds):
    good = [variant(s, "7", "#### 7") for s in arithmetic_seeds]
    bad = variant(arithmetic_seeds[0], "7", "#### 8")  # the reference fails its own verifier
    bad["prompt"] = [{"role": "user", "content": "a different question"}]
    bad["task_id"] = "0" * 16  # and the id is not the content hash
    plant(settings, arithmetic_seeds, [*good, bad])
    summary = materialize(settings, "validated_tasks")
    assert summary.success, summary.failures
    validated = read_table(settings.home / "validated_tasks.parquet")
    rejects = read_table(settings.home / "task_rejects.parquet")
    assert len(validated) == len(arithmetic_seeds) + len(good)
    assert rejects["task_id"].tolist() == ["0" * 16]
    assert rejects["reason_code"].tolist() == ["task_id_mismatch"]
    assert rejects.loc[0, "record"]["reference"] == "#### 8"  # the whole row is kept, not just an id
    assert ("family_validity_floor", True, "passed") in summary.checks  # 4 of 5 valid = the 0.8 floor


def test_a_second_materialization_takes_every_verdict_from_the_cache(settings, arithmetic_seeds):
    good = [variant(s, "7", "#### 7") for s in arithmetic_seeds]
    bad = variant(arithmetic_seeds[0], "8", "#### 9")  # rejected: rejects are verdicts too
    plant(settings, arithmetic_seeds, [*good, bad])
    first = materialize(settings, "validated_tasks")
    second = materialize(settings, "validated_tasks")
    assert first.success and second.success, (first.failures, second.failures)
    metadata = [next(a for a in s.assets if a.key == "validated_tasks").metadata for s in (first, second)]
    counts = [(m["variants_checked"], m["cache_hits"], m["cache_misses"]) for m in metadata]
    assert counts == [(5, 0, 5), (5, 5, 0)]
    assert metadata[1]["validation_seconds"] >= 0 and not metadata[1]["cache_rebuilt"]
    assert read_table(settings.home / "task_rejects.parquet")["reason_code"].tolist() == ["reference_failed"]
    assert list((settings.home / "validation_cache" / "segments").glob("*.jsonl"))  # core.cache_store


def test_the_validity_floor_blocks_when_a_family_falls_below_it(settings, arithmetic_seeds):
    bad = [variant(s, "7", "#### 8") for s in arithmetic_seeds]  # every reference is wrong
    plant(settings, arithmetic_seeds, bad)
    summary = materialize(settings, "validated_tasks")
    assert ("family_validity_floor", False, "ERROR") in summary.checks
    assert read_table(settings.home / "task_rejects.parquet")["reason_code"].unique().tolist() == ["reference_failed"]
    assert Path(settings.home / "validated_tasks.parquet").exists()


def mixed_variants(seeds: list[dict]) -> tuple[list[dict], list[dict]]:
    """Failure tasks and variants, valid and rejected interleaved: 2 + 22 tasks, 1 + 3 of them rejected (the
    variants stay above the validity floor)."""
    made = [variant(s, str(n), f"#### {n if n < 6 else n + 1}") for s in seeds for n in range(1, 7)]
    return [made[0], made[5]], [*made[1:5], *made[6:]]


def validate(settings, shards: int, executor: str = "in_process"):
    summary = materialize(
        settings, "validated_tasks", resources={"policy": {"validation_shards": shards}}, executor=executor
    )
    assert summary.success, summary.failures
    tables = {name: (settings.home / f"{name}.parquet").read_bytes() for name in ("validated_tasks", "task_rejects")}
    return summary, tables


def test_three_shards_give_the_tables_of_one_step_byte_for_byte(settings, arithmetic_seeds):
    failures, variants = mixed_variants(arithmetic_seeds)
    plant(settings, arithmetic_seeds, variants, failures)
    _, one = validate(settings, 1)
    shutil.rmtree(settings.home / "validation_cache")  # the shards check every task again
    summary, three = validate(settings, 3)
    assert three == one
    # The rows keep their input order (failure tasks, then variants), not the order of the shards.
    validated = read_table(settings.home / "validated_tasks.parquet")
    rejects = read_table(settings.home / "task_rejects.parquet")
    good = [t["task_id"] for t in [*failures, *variants] if t["task_id"] not in set(rejects["task_id"])]
    assert validated["task_id"].tolist() == [*(s["task_id"] for s in arithmetic_seeds), *good]
    assert len(rejects) == 4 and rejects["reason_code"].unique().tolist() == ["reference_failed"]
    metadata = next(a for a in summary.assets if a.key == "validated_tasks").metadata
    assert (metadata["shards"], metadata["variants_checked"], metadata["cache_misses"]) == (3, 24, 24)
    table = [line.split("|") for line in metadata["shard_balance"].splitlines()[2:]]  # | shard | tasks | ...
    balance = {int(cells[1]): int(cells[2]) for cells in table}
    assert balance == Counter(shard_of(t["task_id"], 3) for t in [*failures, *variants])
    assert metadata["shard_steps"] == len(balance) >= 2
    assert not list((settings.home / "steps").iterdir()), "the merged shards' scratch was left behind"


def test_a_new_shard_count_keeps_the_verdict_cache(settings, arithmetic_seeds):
    failures, variants = mixed_variants(arithmetic_seeds)
    plant(settings, arithmetic_seeds, variants, failures)
    validate(settings, 1)
    summary, _ = validate(settings, 2)
    metadata = next(a for a in summary.assets if a.key == "validated_tasks").metadata
    assert (metadata["cache_hits"], metadata["cache_misses"]) == (24, 0)  # verdicts are keyed by content


def test_no_tasks_to_check_make_no_shard_step(settings, arithmetic_seeds):
    plant(settings, arithmetic_seeds, [])
    summary, _ = validate(settings, 3)
    metadata = next(a for a in summary.assets if a.key == "validated_tasks").metadata
    assert (metadata["rows"], metadata["variants_checked"], metadata["shard_steps"]) == (4, 0, 0)
    assert read_table(settings.home / "task_rejects.parquet").empty


def test_zero_shards_fail_the_run_naming_the_setting(settings, arithmetic_seeds):
    plant(settings, arithmetic_seeds, mixed_variants(arithmetic_seeds)[1])
    summary = materialize(settings, "validated_tasks", resources={"policy": {"validation_shards": 0}})
    assert not summary.success and "validation_shards must be a whole number" in " ".join(summary.failures)


@pytest.mark.slow  # a process per step, each loading the code location: about 15 s on 2 cores
def test_shards_run_in_processes_of_their_own_under_the_multiprocess_executor(settings, arithmetic_seeds):
    failures, variants = mixed_variants(arithmetic_seeds)
    plant(settings, arithmetic_seeds, variants, failures)
    _, one = validate(settings, 1)
    shutil.rmtree(settings.home / "validation_cache")
    summary, three = validate(settings, 3, executor="multiprocess")
    assert three == one
    with open_instance(settings) as instance:
        starts = instance.all_logs(summary.run_id, of_type=dg.DagsterEventType.STEP_START)
    pids = {entry.dagster_event.step_key: entry.dagster_event.pid for entry in starts}
    shards = {step: pid for step, pid in pids.items() if step.startswith("validated_tasks.check_shard[")}
    assert len(shards) >= 2 and len(set(shards.values())) == len(shards), pids
    assert os.getpid() not in shards.values() and pids["validated_tasks.merge_shards"] not in shards.values()
    assert not list((settings.home / "steps").iterdir())
    # The shard processes committed to one verdict cache, each merging what the others wrote: none is lost.
    cache = CacheStore.open(settings.home / "validation_cache")
    assert (len(cache), cache.rebuilt) == (24, False)


def judged(tasks: list[dict], calibrated: bool = True) -> list[dict]:
    """Tasks as judged_tasks holds them, every one accepted by the judge (one that passed its calibration, or not)."""
    labels = {"judge_verdict": "accept", "judge_scores": None, "judge_failed": [], "judge_error": None}
    labels["judge_calibrated"] = calibrated
    return [{**t, **labels, "judge_rationale": "fine"} for t in tasks]


def arithmetic_tasks_and_an_eval_item(settings) -> tuple[list[dict], dict]:
    """The arithmetic seeds as task records, and one that the split holds out."""
    seeds_dir = settings.seeds_dir
    seeds = load_seeds([seeds_dir / "arithmetic"], root=seeds_dir.parent, context=VerifyContext(seeds_dir=seeds_dir))
    tasks = [{k: t[k] for k in TASK_FIELDS} for t in seeds.tasks]
    plan = plan_splits(tasks, SplitConfig())
    return tasks, next(t for t, side in zip(tasks, plan.splits, strict=True) if side == "eval")


def near_copy_hashed_to_train(tasks: list[dict], eval_item: dict, lineage_of) -> dict:
    """A near-copy of `eval_item` (one sentence marked ` (n)`) whose own lineage root, `lineage_of(task_id, n)`,
    the split's hash alone would put in train."""
    for n in range(100):
        text = eval_item["prompt"][-1]["content"].replace(".", f" ({n}).", 1)
        prompt = [*eval_item["prompt"][:-1], {"role": "user", "content": text}]
        task_id = compute_task_id(prompt, eval_item["verifier"])
        copy = {**eval_item, "task_id": task_id, "prompt": prompt, "lineage": lineage_of(task_id, n)}
        if plan_splits([*tasks, copy], SplitConfig()).splits[-1] == "train":
            return copy
    raise AssertionError("no near-copy of the eval item hashes to train in 100 tries")


def test_decontamination_blocks_an_eval_paraphrase_planted_in_training(settings):
    tasks, eval_item = arithmetic_tasks_and_an_eval_item(settings)
    # A near-copy of the eval item posing as an unrelated seed (its own lineage root) that hashes to train.
    planted = near_copy_hashed_to_train(
        tasks, eval_item, lambda task_id, n: {**eval_item["lineage"], "seed_id": task_id}
    )
    write_table(frame_from_records(judged([*tasks, planted])), settings.home / "judged_tasks.parquet")
    summary = materialize(settings, "train_tasks")
    assert ("no_eval_contamination", False, "ERROR") in summary.checks
    offenders = summary.check_metadata["no_eval_contamination"]["offenders"]
    assert planted["task_id"] in offenders and eval_item["task_id"] in offenders and "near-duplicate" in offenders


def test_decontamination_passes_on_a_clean_split(settings, arithmetic_seeds):
    write_table(frame_from_records(judged(arithmetic_seeds)), settings.home / "judged_tasks.parquet")
    summary = materialize(settings, "train_tasks")
    assert summary.success, summary.failures
    assert ("no_eval_contamination", True, "passed") in summary.checks


def test_a_failure_asking_a_seeds_exact_question_is_validated_once(settings, arithmetic_seeds):
    seed = arithmetic_seeds[0]
    failure = {**seed, "lineage": {**seed["lineage"], "seed_id": None, "source": "production_failure"}}
    failure["lineage"]["failure_id"] = "f-1"
    plant(settings, arithmetic_seeds, [], failures=[failure])
    summary = materialize(settings, "validated_tasks")
    assert summary.success, summary.failures
    validated = read_table(settings.home / "validated_tasks.parquet")
    assert validated["task_id"].is_unique and len(validated) == len(arithmetic_seeds)
    assert validated.loc[0, "lineage"]["source"] == "seed"  # the seed's record is the one kept
    metadata = next(a.metadata for a in summary.assets if a.key == "validated_tasks")
    assert metadata["repeated_tasks"] == 1


def test_a_failure_that_near_copies_an_eval_item_is_held_out_with_it(settings):
    tasks, eval_item = arithmetic_tasks_and_an_eval_item(settings)
    # A production failure (its own lineage root) that near-copies the eval item and would hash to train.
    lineage = {"seed_id": None, "parent_id": None, "generator": None, "source": "production_failure"}
    failure = near_copy_hashed_to_train(tasks, eval_item, lambda task_id, n: {**lineage, "failure_id": f"f{n}"})
    write_table(frame_from_records(judged([*tasks, failure])), settings.home / "judged_tasks.parquet")
    summary = materialize(settings, "train_tasks")
    assert summary.success, summary.failures
    assert ("no_eval_contamination", True, "passed") in summary.checks
    assert failure["task_id"] in set(read_table(settings.home / "failure_eval.parquet")["task_id"])
    metadata = next(a.metadata for a in summary.assets if a.key == "train_tasks")
    assert metadata["followed_roots"] == 1
