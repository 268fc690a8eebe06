"""`seedwheel lineage`: task chains, failures and checkpoint training sets, answered from stored data."""

import itertools

from click.testing import CliRunner

from core.tables import frame_from_records, write_table
from curation.manifests import CheckpointManifest, write_manifest
from curation.split_ledger import SplitLedger
from curation.splits import EVAL, TRAIN, SplitConfig, plan_splits
from generators.base import derive_task
from pipeline.cli import main
from resources import CHECKPOINTS_FOLDER, SPLITS_FOLDER
from validators.seeds import load_seeds
from validators.tasks import TASK_FIELDS, compute_task_id

GENERATOR = {"name": "planted", "version": 1, "params": {}}


def variant_of(parent: dict, suffix: str) -> dict:
    prompt = [*parent["prompt"][:-1], {"role": "user", "content": parent["prompt"][-1]["content"] + suffix}]
    params = parent["verifier"]["params"]
    return derive_task(
        parent, prompt=prompt, verifier_params=params, reference=parent["reference"], generator=GENERATOR
    )


def failure_from(seed: dict) -> dict:
    prompt = [{"role": "user", "content": "failed in production: " + seed["prompt"][-1]["content"]}]
    lineage = {"seed_id": None, "parent_id": None, "generator": None, "source": "production_failure"}
    task = {**seed, "prompt": prompt, "lineage": {**lineage, "failure_id": "f-001"}}
    return {**task, "task_id": compute_task_id(prompt, seed["verifier"])}


def plant(settings) -> dict[str, dict]:
    seeds_dir = settings.seeds_dir
    seeds = [
        {k: t[k] for k in TASK_FIELDS} for t in load_seeds([seeds_dir / "arithmetic"], root=seeds_dir.parent).tasks
    ]
    seed, failure = seeds[0], failure_from(seeds[1])
    tasks = {"seed": seed, "variant": variant_of(seed, " (v)"), "failure": failure}
    tasks["failure_variant"] = variant_of(failure, " (fv)")
    home = settings.home
    home.mkdir(parents=True)
    write_table(frame_from_records([seed], TASK_FIELDS), home / "seed_tasks.parquet")
    write_table(frame_from_records([failure], TASK_FIELDS), home / "failure_tasks.parquet")
    variants = [tasks["variant"], tasks["failure_variant"]]
    write_table(frame_from_records(variants, TASK_FIELDS), home / "task_variants.parquet")
    train, held_out = [seed, tasks["variant"]], [failure, tasks["failure_variant"]]
    write_table(frame_from_records(train, TASK_FIELDS), home / "train_tasks.parquet")
    write_table(frame_from_records(held_out, TASK_FIELDS), home / "eval_tasks.parquet")
    write_table(frame_from_records(held_out, TASK_FIELDS), home / "failure_eval.parquet")
    state = plant_ledger(home, seed["task_id"], [*train, *held_out]).state
    manifest = CheckpointManifest(
        name="grpo-abc123",
        stage="grpo",
        checkpoint=str(home / "training/grpo/abc123/output/final"),
        start_model="base-model",
        base_model="base-model",
        task_ids=sorted(t["task_id"] for t in train),
        split_seq=state.seq,
        split_epoch=state.epoch,
        split_plan_id=state.plan_id,
        run_id="run-1",
        data_versions={"train_tasks": {"run_id": "run-0", "data_version": None}},
    )
    write_manifest(home / CHECKPOINTS_FOLDER, manifest, train)
    return tasks


def plant_ledger(home, seed_root: str, tasks: list[dict]):
    """A split ledger that holds the seed's lineage in train and the failure's in eval."""
    config = config_giving(tasks, {seed_root: TRAIN, "f-001": EVAL})
    return SplitLedger(home / SPLITS_FOLDER).assign(tasks, config, run_id="run-0")


def config_giving(tasks: list[dict], sides: dict[str, str]) -> SplitConfig:
    """A split config (its salt found by trying) whose hash alone puts the roots on these sides."""
    for n in itertools.count():
        config = SplitConfig(salt=f"lineage-{n}", min_eval_per_stratum=0, min_train_per_stratum=0)
        if plan_splits(tasks, config).sides == sides:
            return config


def lineage(settings, ident: str):
    return CliRunner().invoke(main, ["lineage", ident, "--home", str(settings.home)])


def test_a_variant_traces_to_its_seed_its_split_and_the_checkpoint_trained_on_it(settings):
    tasks = plant(settings)
    result = lineage(settings, tasks["variant"]["task_id"])
    assert result.exit_code == 0, result.output
    assert f"<- {tasks['seed']['task_id']}: seed" in result.output
    assert "split: train_tasks" in result.output
    assert f"root {tasks['seed']['task_id']}: train (since split plan 1, epoch 0)" in result.output
    assert "grpo-abc123 (" in result.output and "training/grpo/abc123/output/final" in result.output
    assert f"split plan 1 (epoch 0), root {tasks['seed']['task_id']} was train" in result.output


def test_a_failure_variant_is_held_out_and_guards_its_failure(settings):
    tasks = plant(settings)
    result = lineage(settings, tasks["failure_variant"]["task_id"])
    assert "production failure f-001" in result.output
    assert "split: eval_tasks, failure_eval" in result.output and "trained on by:\n    no checkpoint" in result.output
    checkpoint = lineage(settings, "abc123").output  # by digest; the manifest name and the path work too
    assert "trained on 2 tasks from 1 seeds and 0 production failures" in checkpoint
    assert "split plan 1 in force (epoch 0" in checkpoint and "train_tasks (run run-0)" in checkpoint
    guards = sorted([tasks["failure"]["task_id"], tasks["failure_variant"]["task_id"]])
    assert f"failure f-001 (not trained on): guarded by eval items {', '.join(guards)}" in checkpoint
    assert lineage(settings, str(settings.home / "training/grpo/abc123/output/final")).output == checkpoint
    assert lineage(settings, "grpo-abc123").output == checkpoint


def test_a_failure_id_lists_its_tasks_their_sides_and_who_trained_on_them(settings):
    tasks = plant(settings)
    result = lineage(settings, "f-001")
    assert result.exit_code == 0, result.output
    assert "production failure f-001: 2 tasks" in result.output
    assert f"{tasks['failure_variant']['task_id']}: root f-001, now in eval_tasks, failure_eval" in result.output
    assert "checkpoints that trained on its tasks:\n    no checkpoint" in result.output


def test_lineage_survives_a_resplit(settings):
    tasks = plant(settings)
    home = settings.home
    ledger = SplitLedger(home / SPLITS_FOLDER)
    everything = [tasks["seed"], tasks["variant"], tasks["failure"], tasks["failure_variant"]]
    seed_root = tasks["seed"]["task_id"]
    config = config_giving(everything, {seed_root: EVAL, "f-001": EVAL})
    entry = ledger.resplit(everything, config, pinned=[], run_id="t", note="t")  # nothing pinned: it may move
    assert entry.moved == {seed_root: (TRAIN, EVAL)}
    output = lineage(settings, tasks["variant"]["task_id"]).output
    assert f"root {seed_root}: eval (since split plan 2, epoch 1)" in output
    assert f"split plan 1 (epoch 0), root {seed_root} was train" in output  # as it was when it trained


def test_an_unknown_id_says_where_it_looked(settings):
    plant(settings)
    result = lineage(settings, "deadbeef")
    assert result.exit_code == 1 and "neither a task id" in result.output and "Traceback" not in result.output
