"""Integration: the whole asset graph on the example seeds, offline, with a real `seedwheel serve` on loopback,
on the multiprocess executor.

One materialization is shared by the module's tests (about 10 minutes on 2 cores); the rerun test
then checks that the caches make a second run free of LLM calls. Under CI the graph runs once: `.ci/run` runs
`make quickstart` first (the CLI's in-process executor) and points `SEEDWHEEL_QUICKSTART_HOME` at its storage,
and these tests read that run.
"""

import os
import shutil
from dataclasses import replace
from functools import partial
from pathlib import Path

import dagster as dg
import pytest

from core.signals import dispositions_kept
from core.tables import read_table, records_from_frame
from curation.manifests import load_manifests
from curation.splits import task_roots
from generators.rewrite import CHECKS_VERSION, REWRITE_SCHEMA
from pipeline.definitions import build_definitions
from pipeline.instance import open_instance
from pipeline.profiles import profile_resources
from pipeline.runs import RunSummary, materialize, run_summary
from pipeline.settings import Settings
from resources import CHECKPOINTS_FOLDER
from tests.paths import REPO, quickstart_settings
from tests.processes import leftover_processes
from validators.json_answer import parse_json_response
from validators.registry import VerifyContext
from validators.seeds import load_seeds
from validators.tasks import TASK_FIELDS, task_problems

FAMILIES = {"arithmetic", "json_extraction", "sql", "python_function", "tool_call", "episode"}
ASSETS = {
    *("seed_tasks", "seed_rejects", "task_variants", "variant_rejects", "validated_tasks", "task_rejects"),
    *("deduplicated_tasks", "judge_calibration", "judged_tasks", "train_tasks", "eval_tasks"),
    *("reward_audit", "sft_checkpoint", "difficulty_profile", "grpo_checkpoint", "checkpoint_eval", "promotion"),
    *("training_budget", "budget_calibration", "episodes"),
    "preference_pairs",
    *("failure_tasks", "review_queue", "failure_eval", "failure_rates"),  # failure_logs is per file: ingested first
}
CHECKS = {
    ("seed_files_clean", True, "passed"),
    ("family_validity_floor", True, "passed"),
    ("no_eval_contamination", True, "passed"),
    ("reward_sound", True, "passed"),
}

# The whole graph on the real model takes about 10 minutes on 2 cores, past the suite's per-test default.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]
# Set by CI (.ci/run) to the storage root `make quickstart` just filled: the tests read that run instead of
# running the graph a second time.
QUICKSTART_HOME = "SEEDWHEEL_QUICKSTART_HOME"
parse_rewrite = partial(parse_json_response, schema=REWRITE_SCHEMA)  # a rejected rewrite's raw answer


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> tuple[Settings, RunSummary]:
    tmp = tmp_path_factory.mktemp("quickstart")
    done = os.environ.get(QUICKSTART_HOME)
    if done:
        return _read_quickstart(Path(done), tmp)
    settings = quickstart_settings(tmp)
    # As `make quickstart` does: the example failure log is ingested first, so failures flow through the graph.
    inbox = Path(settings.failure_inbox)
    inbox.mkdir(parents=True)
    shutil.copy(REPO / "examples" / "failure_log.jsonl", inbox / "failure_log.jsonl")
    ingested = materialize(settings, "group:failures", partition="failure_log.jsonl")
    assert ingested.success, ingested.failures
    # The whole graph on the multiprocess executor (a process per step, two at a time, as `dagster dev` runs
    # it); the CLI's in-process executor runs the same graph in `make quickstart` and in the other tests.
    return settings, materialize(settings, executor="multiprocess")


def _read_quickstart(home: Path, tmp: Path) -> tuple[Settings, RunSummary]:
    """The run `make quickstart` made at `home`, on a copy: CI runs the graph once and these tests read it.

    The Dagster instance is copied (its SQLite files change in place); the storage is hard-linked, which costs
    nothing and is safe because every table and cache is replaced by a rename, never written in place.
    """
    made = Settings.from_env({}, home=home)
    settings = replace(made, home=tmp / "home", dagster_home=tmp / "dagster", failure_inbox=str(tmp / "inbox"))
    shutil.copytree(made.home, settings.home, copy_function=_link_or_copy)
    shutil.copytree(made.dagster_home, settings.dagster_home)
    return settings, run_summary(settings)


def _link_or_copy(source: str, target: str) -> None:
    """A hard link, or a copy where the temporary folder is on another file system."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def asset(summary: RunSummary, key: str):
    return next(a for a in summary.assets if a.key == key)


def test_the_run_succeeds_and_writes_every_asset(quickstart):
    settings, summary = quickstart
    assert summary.success, summary.failures
    assert {a.key for a in summary.assets} == ASSETS
    assert set(summary.checks) - {c for c in summary.checks if c[0] == "judge_agreement"} == CHECKS
    # The judge's calibration is a warning in the quickstart: reported either way, never blocking. A 135M judge
    # usually misses the floors; its verdict must follow its own numbers.
    numbers = asset(summary, "judge_calibration").metadata
    meets = (
        numbers.get("kappa", 0) >= 0.6
        and numbers.get("accuracy", 0) >= 0.8
        and numbers.get("false_accept_rate", 1) <= 0.15
        and numbers["judge_error_rate"] <= 0.05
    )
    assert ("judge_agreement", meets, "passed" if meets else "WARN") in summary.checks
    for materialized in summary.assets:
        assert materialized.path == settings.home / f"{materialized.key}.parquet"
        assert len(read_table(materialized.path)) == materialized.rows


def test_seed_tasks_round_trip_as_valid_records(quickstart):
    settings, _ = quickstart
    tasks = read_table(settings.home / "seed_tasks.parquet")
    expected = load_seeds([settings.seeds_dir], root=settings.seeds_dir.parent)
    assert tasks["task_id"].tolist() == [t["task_id"] for t in expected.tasks]
    context = VerifyContext(seeds_dir=settings.seeds_dir)
    for row in records_from_frame(tasks):
        assert task_problems({k: row[k] for k in TASK_FIELDS}, context) == [], row["origin"]
    assert read_table(settings.home / "seed_rejects.parquet").empty


def test_variants_cover_every_family_and_trace_to_real_seeds_or_failures(quickstart):
    settings, _ = quickstart
    seeds = read_table(settings.home / "seed_tasks.parquet")
    failure_ids = set(read_table(settings.home / "failure_tasks.parquet")["task_id"])
    variants = records_from_frame(read_table(settings.home / "task_variants.parquet"))
    assert {v["family"] for v in variants if v["lineage"]["generator"]["name"] != "llm_rewrite"} == FAMILIES
    seed_ids = set(seeds["task_id"])
    for variant in variants:
        lineage = variant["lineage"]
        if lineage["failure_id"]:  # a variant of a production failure: rooted at the failure, no seed
            assert lineage["seed_id"] is None and lineage["parent_id"] in failure_ids
        else:
            assert lineage["seed_id"] in seed_ids and lineage["parent_id"] in seed_ids
        assert variant["task_id"] not in seed_ids
    assert len({v["task_id"] for v in variants}) == len(variants)
    context = VerifyContext(seeds_dir=settings.seeds_dir)
    for variant in variants:
        assert task_problems(variant, context) == [], variant["lineage"]


def test_the_real_model_rewrites_one_parent_per_family_and_every_call_is_accounted_for(quickstart):
    settings, summary = quickstart
    parents = read_table(settings.home / "seed_tasks.parquet")["family"].tolist()
    parents += read_table(settings.home / "failure_tasks.parquet")["family"].tolist()
    # The quickstart caps the rewrites at one parent per family: one call each.
    assert asset(summary, "task_variants").metadata["llm_calls_made"] == len(set(parents))
    rejects = read_table(settings.home / "variant_rejects.parquet")
    llm = rejects[rejects["generator"] == "llm_rewrite"]
    variants = records_from_frame(read_table(settings.home / "task_variants.parquet"))
    rewrites = [v for v in variants if v["lineage"]["generator"]["name"] == "llm_rewrite"]
    assert len(llm) + len(rewrites) == len(set(parents))  # every call is accounted for: a variant or a reject
    assert llm["raw"].notna().all()  # a rejected answer keeps its raw text
    # Readable: grammar-constrained JSON from a real model gives sentences in words, not the random model's bytes;
    # whether they keep the task is for the checks against the parent (which reject most of the 135M model's).
    answers = [value["rewritten"] for value, error in map(parse_rewrite, llm["raw"]) if error is None]
    texts = [rewrite["prompt"][-1]["content"] for rewrite in rewrites] + answers
    assert any(len(t.split()) >= 8 and sum(c.isalpha() or c.isspace() for c in t) / len(t) > 0.8 for t in texts)
    # Every rewrite the splits hold passed the checks its generator runs today: no unvouched LLM text.
    for name in ("train_tasks", "eval_tasks"):
        for task in records_from_frame(read_table(settings.home / f"{name}.parquet")):
            generator = task["lineage"]["generator"] or {}
            if generator.get("name") == "llm_rewrite":
                assert generator["params"]["checks"] == CHECKS_VERSION, task["task_id"]


def test_rerun_makes_no_llm_calls_and_keeps_ids_stable(quickstart):
    settings, summary = quickstart
    before = read_table(settings.home / "task_variants.parquet")
    server_logs = sorted((settings.home / "local_model" / "logs").iterdir())
    rerun = materialize(settings, "task_variants")
    assert rerun.success, rerun.failures
    metadata = asset(rerun, "task_variants").metadata
    first = asset(summary, "task_variants").metadata["llm_calls_made"]
    assert (metadata["llm_calls_made"], metadata["llm_calls_cached"]) == (0, first)  # every call came from the cache
    assert read_table(settings.home / "task_variants.parquet")["task_id"].tolist() == before["task_id"].tolist()
    assert sorted((settings.home / "local_model" / "logs").iterdir()) == server_logs  # no model server was started
    assert not [p for p in settings.home.iterdir() if p.name.startswith(".")]  # no temp files left


def test_the_local_model_server_is_stopped_after_the_run(quickstart):
    settings, _ = quickstart
    # The run's own storage root: under CI, the one `make quickstart` used (its servers are what could linger).
    # The local server's working folder is under the root (its logs); its command line names neither root nor serve.
    assert leftover_processes(Path(os.environ.get(QUICKSTART_HOME) or settings.home)) == []


def test_splits_keep_lineages_whole_and_export_for_trl(quickstart):
    settings, _ = quickstart
    deduplicated = read_table(settings.home / "deduplicated_tasks.parquet")
    train = read_table(settings.home / "train_tasks.parquet")
    evaluation = read_table(settings.home / "eval_tasks.parquet")
    # The quickstart shows the judge's labels but does not filter on them (its model's labels are noise).
    assert len(train) + len(evaluation) == int((~deduplicated["is_duplicate"].astype(bool)).sum())
    # A root is a seed, or a production failure no seed explains: each lives on one side only.
    train_roots, eval_roots = set(task_roots(train)), set(task_roots(evaluation))
    assert train_roots and eval_roots and not train_roots & eval_roots
    assert set(evaluation["family"]) >= FAMILIES  # stratified: every seed family is evaluated
    failure_families = {
        f for f, lineage in zip(evaluation["family"], evaluation["lineage"], strict=True) if lineage["failure_id"]
    }
    assert set(evaluation["family"]) - FAMILIES <= failure_families  # other families come from production failures
    exported = read_table(settings.home / "export" / "train.parquet")
    assert exported["task_id"].tolist() == train["task_id"].tolist()


def test_the_judge_runs_end_to_end_and_its_errors_are_visible(quickstart):
    settings, summary = quickstart
    judged = read_table(settings.home / "judged_tasks.parquet")
    verdicts = set(judged["judge_verdict"])
    assert "not_judged" in verdicts and verdicts <= {"accept", "reject", "judge_error", "not_judged"}
    assert asset(summary, "judged_tasks").metadata["llm_calls_made"] > 0
    # Structured output on the local server: the real model's verdicts parse (judge_error at most 5%).
    judged_rows = judged[judged["judge_verdict"] != "not_judged"]
    assert len(judged_rows) and (judged_rows["judge_verdict"] == "judge_error").mean() <= 0.05
    calibration = asset(summary, "judge_calibration").metadata
    assert calibration["items"] == len(read_table(settings.home / "judge_calibration.parquet"))  # 1 sample each
    assert "judge_error_rate" in calibration and "confusion" in calibration


def test_training_runs_out_of_process_and_ends_with_a_promotion_decision(quickstart):
    settings, summary = quickstart
    sft = read_table(settings.home / "sft_checkpoint.parquet").iloc[0]
    grpo = read_table(settings.home / "grpo_checkpoint.parquet").iloc[0]
    assert sft["trained"] and grpo["start_model"] == sft["checkpoint"]  # GRPO starts from the SFT warm-up
    # The warm-up imitated the references of the profile's SFT families alone.
    training = profile_resources(settings).training
    assert asset(summary, "sft_checkpoint").metadata["families"] == ", ".join(sorted(training.sft_families))
    assert Path(grpo["checkpoint"], "config.json").exists()
    train = read_table(settings.home / "train_tasks.parquet")
    assert set(grpo["task_ids"]) <= set(train["task_id"])  # lineage: what the checkpoint saw
    assert grpo["data_versions"]["train_tasks"]["run_id"] == summary.run_id
    # Both checkpoints' manifests are kept for good, under the split plan the train split was made with.
    manifests = {m.stage: m for m in load_manifests(settings.home / CHECKPOINTS_FOLDER)}
    assert manifests["grpo"].task_ids == sorted(grpo["task_ids"]) and manifests["sft"].checkpoint == sft["checkpoint"]
    assert manifests["grpo"].split_seq == asset(summary, "train_tasks").metadata["split_plan"] >= 1
    metadata = asset(summary, "grpo_checkpoint").metadata
    assert metadata["steps"] == grpo["config"]["grpo"]["max_steps"]  # streamed back from the Pipes child
    assert metadata["reward_curve"].startswith("![")
    # The verifiers that rewarded it are the GRPO tasks' own.
    verifiers = {v["name"] for v in train.loc[train["task_id"].isin(grpo["task_ids"]), "verifier"]}
    assert set(metadata["verifier_versions"]) == verifiers
    profile = read_table(settings.home / "difficulty_profile.parquet")
    profiled = profile[profile["label"] != "not_profiled"]
    # The quickstart profiles the easiest tasks of each family from real samples of the SFT checkpoint, k each.
    per_family, k = training.difficulty_max_per_family, training.difficulty_k
    assert (
        profiled.groupby("family").size().to_dict()
        == profile.groupby("family").size().clip(upper=per_family).to_dict()
    )
    assert (profiled["samples"] == k).all() and profiled["rollouts"].map(len).eq(k).all()
    # Some tasks are within the warmed-up model's reach, solved sometimes but not always.
    assert (profile["label"] == "learnable").any()
    # GRPO trains on the learnable tasks alone, and its groups' rewards differ: a gradient flows.
    kept = profile["label"] == "learnable"
    assert profile["in_grpo_set"].astype(bool).tolist() == kept.tolist()
    assert set(grpo["task_ids"]) == set(profile.loc[kept, "task_id"])
    assert metadata["groups_with_reward_spread"] > 0
    # Episode tasks in the GRPO set are played in their environments (training.grpo_episodes), and only then.
    assert bool(metadata["episode_end_reasons"]) == profile.loc[kept, "family"].eq("episode").any()
    assert weights_differ(Path(sft["checkpoint"]), Path(grpo["checkpoint"]))
    evaluation = read_table(settings.home / "checkpoint_eval.parquet")
    assert set(evaluation["role"]) == {"baseline", "candidate"}
    # Both models on the gate's uniform sample of the eval split (by task-id hash) and every held-out failure:
    # more paired tasks than the gate's min_tasks, so the decision is not "too few to judge".
    gate = profile_resources(settings).gate
    chosen = gate.eval_tasks(
        *(read_table(settings.home / f"{name}.parquet") for name in ("eval_tasks", "failure_eval"))
    )
    per_role = evaluation.groupby("role")["task_id"].agg(set)
    assert per_role["baseline"] == per_role["candidate"] == {t["task_id"] for t in chosen}
    assert len(chosen) >= gate.policy().min_tasks
    # Both models pass some eval tasks: the promotion decision compares real pass rates, not 0 with 0.
    passed = evaluation.groupby("role")["passed"].sum()
    assert passed["baseline"] > 0 and passed["candidate"] > 0
    decision = asset(summary, "promotion").metadata
    assert decision["candidate"] == grpo["checkpoint"] and decision["reasons"]
    # The warm-up taught JSON extraction, and the gate shows it on the fair sample: the wheel turns, the candidate
    # is promoted because the overall lower bound is above 0.
    assert decision["decision"] == "promoted", decision["reasons"]
    assert decision["difference_low"] > 0 and decision["failures_broken"] == []


def test_the_starting_policy_played_the_episode_tasks_in_their_environments(quickstart):
    settings, summary = quickstart
    played = read_table(settings.home / "episodes.parquet")
    train = read_table(settings.home / "train_tasks.parquet")
    episode_tasks = train.loc[train["family"] == "episode", "task_id"]
    # The profile's easiest episode tasks of the split, k real multi-turn rollouts each, every one ended and judged.
    training = profile_resources(settings).training
    per_family, k = training.difficulty_max_per_family, training.difficulty_k
    assert played.groupby("task_id").size().to_dict() == {task_id: k for task_id in set(played["task_id"])}
    assert set(played["task_id"]) <= set(episode_tasks)
    assert played["task_id"].nunique() == min(per_family, len(episode_tasks))
    assert set(played["end_reason"]) <= {"answered", "max_turns", "invalid_call", "tool_error", "timeout"}
    assert played["turns"].map(len).ge(1).all() and played["passed"].isin([True, False]).all()
    metadata = asset(summary, "episodes").metadata
    assert metadata["episodes"] == len(played) and "| end_reason |" in metadata["end_reasons"]


def test_the_budget_planned_the_real_grpo_run_within_2x(quickstart):
    settings, summary = quickstart
    plan = asset(summary, "training_budget").metadata
    assert plan["steps"] == read_table(settings.home / "grpo_checkpoint.parquet").iloc[0]["steps"]
    assert plan["prompt_tokens"] > 0 and "groups with signal" in plan["plan"]
    calibration = asset(summary, "budget_calibration").metadata
    # The plan (bench-measured CPU throughputs x measured tokens) against the real run's wall time on the CPU.
    assert calibration["comparable"], calibration["problems"]
    assert 0.5 <= calibration["wall_time_ratio"] <= 2.0, calibration
    assert 0.5 <= calibration["tokens_ratio"] <= 2.0, calibration


def weights_differ(first: Path, second: Path) -> bool:
    """Whether any weight tensor of two checkpoints (same architecture, safetensors) differs."""
    from safetensors import safe_open

    with (
        safe_open(str(first / "model.safetensors"), "pt") as a,
        safe_open(str(second / "model.safetensors"), "pt") as b,
    ):
        names = list(a.keys())  # a safetensors file handle, not a dict: it is not iterable
        return any(not a.get_tensor(name).equal(b.get_tensor(name)) for name in names)


def test_production_failures_become_tasks_variants_and_a_separate_eval_line(quickstart):
    settings, summary = quickstart
    failure_tasks = read_table(settings.home / "failure_tasks.parquet")
    assert len(failure_tasks) > 0
    failure_ids = {lineage["failure_id"] for lineage in failure_tasks["lineage"]}
    variants = read_table(settings.home / "task_variants.parquet")
    assert any(lineage["failure_id"] in failure_ids for lineage in variants["lineage"])  # variants of failures
    evaluation = read_table(settings.home / "eval_tasks.parquet")
    failure_eval = read_table(settings.home / "failure_eval.parquet")
    held_out = [
        t for t, lineage in zip(evaluation["task_id"], evaluation["lineage"], strict=True) if lineage["failure_id"]
    ]
    # Failures form their own split stratum, so with several of them at least one is held out for the gate.
    assert failure_eval["task_id"].tolist() == held_out and held_out
    held_out_failures = {lineage["failure_id"] for lineage in failure_eval["lineage"]}
    assert held_out_failures < failure_ids  # and at least one is trained on
    evaluated = read_table(settings.home / "checkpoint_eval.parquet")
    assert set(evaluated.loc[evaluated["failure_eval"].astype(bool), "task_id"]) == set(held_out)
    line = asset(summary, "promotion").metadata["failure_eval"]
    assert line.startswith("failure_eval: the candidate solves ") and f" of {len(held_out)} held-out" in line


def test_a_growth_policy_sees_no_growth_right_after_training(quickstart):
    # The real checkpoint records the split it was trained from, which is the split now: nothing to retrain.
    settings, _ = quickstart
    sensor = build_definitions(replace(settings, retrain_growth=0.2)).resolve_sensor_def("corpus_growth")
    with (
        dispositions_kept(),  # a tick rewrites the stop signals' handlers
        open_instance(settings) as instance,
        dg.build_sensor_context(instance=instance) as context,
    ):
        result = sensor.evaluate_tick(context)
    rows = len(read_table(settings.home / "train_tasks.parquet"))
    assert not result.run_requests
    assert f"train_tasks has {rows} rows, the last checkpoint was trained from {rows};" in result.skip_message
