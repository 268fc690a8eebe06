"""`seedwheel lineage`: task chains and checkpoint training sets, answered from stored tables."""

import json

from click.testing import CliRunner

from generators.base import derive_task
from pipeline.cli import main
from validators.export import export_split
from validators.seeds import load_seeds
from validators.tables import frame_from_records, write_table
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
    run_dir = home / "training" / "grpo" / "abc123"
    export_split(train, run_dir, "train")
    job = {"model_path": "base-model", "output_dir": str(run_dir / "output"), "train_file": "", "grpo": {}}
    (run_dir / "job.json").write_text(json.dumps(job))
    return tasks


def lineage(settings, ident: str):
    return CliRunner().invoke(main, ["lineage", ident, "--home", str(settings.home)])


def test_a_variant_traces_to_its_seed_its_split_and_the_checkpoint_trained_on_it(settings):
    tasks = plant(settings)
    result = lineage(settings, tasks["variant"]["task_id"])
    assert result.exit_code == 0, result.output
    assert f"<- {tasks['seed']['task_id']}: seed" in result.output
    assert "split: train_tasks" in result.output
    assert "training/grpo/abc123/output/final" in result.output


def test_a_failure_variant_is_held_out_and_guards_its_failure(settings):
    tasks = plant(settings)
    result = lineage(settings, tasks["failure_variant"]["task_id"])
    assert "production failure f-001" in result.output
    assert "split: eval_tasks, failure_eval" in result.output and "trained on by: no checkpoint" in result.output
    checkpoint = lineage(settings, "abc123").output  # by run hash; the path works too
    assert "trained on 2 tasks from 1 seeds and 0 production failures" in checkpoint
    guards = sorted([tasks["failure"]["task_id"], tasks["failure_variant"]["task_id"]])
    assert f"failure f-001 (not trained on): guarded by eval items {', '.join(guards)}" in checkpoint
    assert lineage(settings, str(settings.home / "training/grpo/abc123/output/final")).output == checkpoint


def test_an_unknown_id_says_where_it_looked(settings):
    plant(settings)
    result = lineage(settings, "deadbeef")
    assert result.exit_code == 1 and "neither a task id" in result.output and "Traceback" not in result.output
