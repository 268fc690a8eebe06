"""Training and evaluation assets on planted tables: the reward audit gates training, the promotion gate decides,
and training on an object-store root (moto's S3 server) keeps its checkpoints there.

Upstream tables are written as a previous run would have left them, so each test runs only the assets it is
about (the whole chain on the tiny model runs in tests/test_quickstart_graph.py).
"""

import dataclasses
import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest
from fsspec.core import url_to_fs
from mlflow import MlflowClient
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from transformers import AutoModelForCausalLM
from upath import UPath

import training.sft
from core.folders import RemoteFolder, working_copy
from core.tables import frame_from_records, read_table, records_from_frame, write_table
from curation.manifests import load_manifests
from curation.splits import first_per_family
from pipeline.runs import materialize
from pipeline.settings import Settings
from resources import CHECKPOINT_CACHE_FOLDER, CHECKPOINTS_FOLDER, StorageRoot
from resources.storage import store_table
from tests.paths import SEEDS
from tests.services import fresh_database
from training.difficulty import ROLLOUT_FIELDS
from training.episodes import EPISODE_FIELDS, EngineTurns
from training.gate_eval import EVAL_COLUMNS
from training.promotion import PromotionRegistry
from validators.environments import END_REASONS
from validators.registry import Completion, Verdict, Verifier, VerifyContext
from validators.seeds import load_seeds
from validators.tasks import TASK_FIELDS, compute_task_id
from validators.verifiers.episode import episode_calls
from validators.verifiers.tool_call import tagged_calls

# Every test here materializes training assets: real SFT/GRPO steps, rollouts or the whole audit.
pytestmark = pytest.mark.slow


class AlwaysPass(Verifier):
    """Test-only: a broken reward that pays full marks for anything (the reward hack the audit must catch)."""

    name = "test_always_pass"
    version = 1

    def check(self, params: Mapping[str, Any], completion: Completion, context: VerifyContext) -> Verdict:
        return Verdict(score=1.0, passed=True, reason="anything goes")


def bundled_tasks(settings, per_family: int | None = None) -> list[dict]:
    """The bundled seeds as training tasks: all of them (the probes need a realistic spread of answers), or a few."""
    tasks = [
        {k: t[k] for k in TASK_FIELDS} for t in load_seeds([settings.seeds_dir], root=settings.seeds_dir.parent).tasks
    ]
    return [tasks[i] for i in first_per_family(tasks, per_family)]


def plant_train_tasks(settings, tasks: list[dict]) -> None:
    write_table(frame_from_records(tasks, TASK_FIELDS), settings.home / "train_tasks.parquet")


def test_the_bundled_reward_passes_its_audit(settings):
    plant_train_tasks(settings, bundled_tasks(settings))
    summary = materialize(settings, "reward_audit")
    assert summary.success, summary.failures
    assert summary.checks == [("reward_sound", True, "passed")]
    metadata = summary.assets[0].metadata
    assert metadata["labelled/agreement"] >= 0.9
    assert metadata["probe/tasks_without_reward"] == 0
    rows = read_table(settings.home / "reward_audit.parquet")
    assert len(rows) == metadata["labelled_rows"] and rows["agree"].notna().all()


def test_a_constant_reward_fails_the_audit_and_training_does_not_start(settings):
    settings = dataclasses.replace(settings, verifier_plugins=(f"{__name__}:AlwaysPass",))
    tasks = []
    for task in bundled_tasks(settings, per_family=2):
        verifier = {"name": "test_always_pass", "version": 1, "params": {}}
        tasks.append({**task, "verifier": verifier, "task_id": compute_task_id(task["prompt"], verifier)})
    plant_train_tasks(settings, tasks)
    summary = materialize(settings, "key:reward_audit or key:sft_checkpoint")
    assert ("reward_sound", False, "ERROR") in summary.checks
    assert [a.key for a in summary.assets] == ["reward_audit"]  # the blocking check stopped sft_checkpoint
    failed = summary.check_metadata["reward_sound"]
    assert failed["probe/constant/mean"] == 1.0  # "42" scores full marks on every task: the hack is named


def eval_rows(candidate: list[bool], baseline: list[bool], families: list[str], failures: int = 0) -> pd.DataFrame:
    """A checkpoint_eval table: one sample per task and model; the last `failures` tasks are production failures."""
    rows = []
    for role, passed, model in (("baseline", baseline, "base-model"), ("candidate", candidate, "ckpt/run-1")):
        for i, (ok, family) in enumerate(zip(passed, families, strict=True)):
            rows.append(
                {"role": role, "model": model, "task_id": f"t{i:02d}", "family": family, "sample": 0}
                | {"failure_eval": i >= len(passed) - failures, "passed": ok, "score": float(ok), "reason": ""}
                | {"completion": "#### 1"}
            )
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    ("candidate", "baseline", "promoted"),
    [
        # 30 tasks: the candidate solves 24, the baseline 6, in the same family: clearly better.
        ([True] * 24 + [False] * 6, [True] * 6 + [False] * 24, True),
        # The same pass rate on the same tasks: not shown to be better.
        ([True] * 15 + [False] * 15, [True] * 15 + [False] * 15, False),
        # Better on average, but worse than the baseline on every task of a family: a regression blocks it.
        ([True] * 20 + [False] * 10, [False] * 20 + [True] * 10, False),
    ],
)
def test_promotion_decides_on_the_paired_comparison(settings, candidate, baseline, promoted):
    families = ["arithmetic"] * 20 + ["sql"] * 10
    write_table(eval_rows(candidate, baseline, families), settings.home / "checkpoint_eval.parquet")
    summary = materialize(settings, "promotion")
    assert summary.success, summary.failures
    metadata = summary.assets[0].metadata
    assert metadata["promoted"] is promoted
    decision = read_table(settings.home / "promotion.parquet").iloc[0]
    assert decision["decision"] == ("promoted" if promoted else "kept baseline")
    assert decision["reasons"] and all(isinstance(r, str) for r in decision["reasons"])
    # The decision is in the candidate's MLflow run, with its interval.
    run = MlflowClient(metadata["mlflow_tracking_uri"]).get_run(metadata["mlflow_run_id"])
    assert run.data.metrics["gate/promoted"] == float(promoted)
    assert run.data.metrics["gate/difference_low"] == metadata["difference_low"]
    assert run.data.tags["seedwheel.gate.decision"] == decision["decision"]
    registry = settings.home / "promotion" / "promoted.json"
    if promoted:
        record = json.loads(registry.read_text())
        assert record["current"]["model"] == "ckpt/run-1"
        assert record["current"]["run_id"] == summary.run_id
        assert metadata["promoted_model"] == "ckpt/run-1"  # the next run's baseline
    else:
        assert not registry.exists()
        assert metadata["promoted_model"] == "base-model"


def plant_profile_inputs(settings, policy_dir: Path | str, families=("arithmetic", "sql"), episodes=()) -> list[dict]:
    """difficulty_profile's upstream: 3 bundled tasks of each of `families`, an untrained SFT manifest and the
    `episodes` table (`episodes`' rows: none by default, as when the split has no episode task)."""
    tasks = [t for t in bundled_tasks(settings, per_family=3) if t["family"] in families]
    plant_train_tasks(settings, tasks)
    manifest = {"stage": "sft", "trained": False, "checkpoint": str(policy_dir), "base_model": str(policy_dir)}
    write_table(pd.DataFrame([manifest]), settings.home / "sft_checkpoint.parquet")
    write_table(frame_from_records(episodes, [*EPISODE_FIELDS, "sampling"]), settings.home / "episodes.parquet")
    return tasks


def profile_overrides(**training: object) -> dict[str, dict[str, object]]:
    """Resources for a quick profile: 2 samples of 4 tokens per task, plus `training`'s settings."""
    return {"training": {"difficulty_profile": True, "difficulty_k": 2, "difficulty_max_new_tokens": 4, **training}}


def test_sft_warms_up_on_its_families_alone_and_skips_a_split_without_them(settings, tiny_model_dir):
    plant_train_tasks(
        settings, [t for t in bundled_tasks(settings, per_family=2) if t["family"] in ("arithmetic", "sql")]
    )
    training = {"base_model": str(tiny_model_dir), "sft_max_steps": 1, "sft_batch_size": 2}

    def warm_up(families: list[str]) -> dict:
        summary = materialize(
            settings, "sft_checkpoint", resources={"training": {**training, "sft_families": families}}
        )
        assert summary.success, summary.failures
        return next(a for a in summary.assets if a.key == "sft_checkpoint").metadata

    trained = warm_up(["arithmetic", "json_extraction"])
    assert trained["trained"] and trained["families"] == "arithmetic" and trained["train_rows"] == 2
    # None of its families in this split (a night without them): no warm-up, and the run goes on from the base model.
    skipped = warm_up(["json_extraction"])
    assert not skipped["trained"] and skipped["checkpoint"] == str(tiny_model_dir)
    assert skipped["skipped_because"] == "no training task of sft_families ['json_extraction']"


def test_start_from_promoted_trains_on_from_the_promoted_model_and_base_from_the_base(
    settings, tiny_model_dir, tmp_path
):
    plant_train_tasks(settings, [t for t in bundled_tasks(settings, per_family=2) if t["family"] == "arithmetic"])
    promoted = shutil.copytree(tiny_model_dir, tmp_path / "promoted-model")  # as if a past run trained it
    registry = StorageRoot(root=str(settings.home)).state()
    PromotionRegistry(str(settings.home / "promotion" / "promoted.json"), registry).promote(promoted)
    base = {"base_model": str(tiny_model_dir), "sft_max_steps": 1, "sft_batch_size": 2, "sft_families": ["arithmetic"]}

    def manifest(start_from: str) -> pd.Series:
        summary = materialize(settings, "sft_checkpoint", resources={"training": {**base, "start_from": start_from}})
        assert summary.success, summary.failures
        return read_table(settings.home / "sft_checkpoint.parquet").iloc[0]

    continued = manifest("promoted")
    assert continued["trained"] and continued["start_model"] == str(promoted)
    assert continued["base_model"] == str(tiny_model_dir)
    fresh = manifest("base")  # the default: the promotion record does not change where training starts
    assert fresh["start_model"] == fresh["base_model"] == str(tiny_model_dir)
    assert fresh["checkpoint"] != continued["checkpoint"]  # another start, another run


def test_difficulty_profile_leaves_out_tasks_without_signal_and_grpo_skips_an_empty_set(settings, tiny_model_dir):
    tasks = plant_profile_inputs(settings, tiny_model_dir)
    # Every task (the quickstart profiles three per family).
    overrides = profile_overrides(difficulty_max_per_family=None)
    for name in ("eval_tasks", "failure_eval"):  # the budget's inputs; no gate sample is drawn without a run
        write_table(frame_from_records([], list(TASK_FIELDS)), settings.home / f"{name}.parquet")
    budgets = "key:training_budget or key:budget_calibration"
    summary = materialize(settings, f"key:difficulty_profile or key:grpo_checkpoint or {budgets}", resources=overrides)
    assert summary.success, summary.failures  # nothing for GRPO to learn from is no failure (below)
    profile = read_table(settings.home / "difficulty_profile.parquet")
    assert profile["task_id"].tolist() == [t["task_id"] for t in tasks]
    # A random policy with 4 new tokens solves nothing: every task is never solved, none carries GRPO signal.
    assert set(profile["label"]) == {"never_solved"} and not profile["in_grpo_set"].any()
    assert (profile["samples"] == 2).all()
    # The scored samples stay with the profile: preference_pairs pairs them.
    assert (profile["policy"] == str(tiny_model_dir)).all()
    assert [len(r) for r in profile["rollouts"]] == [2] * len(tasks)
    assert all(set(r) == set(ROLLOUT_FIELDS) and not r["passed"] for rows in profile["rollouts"] for r in rows)
    metadata = summary.assets[0].metadata
    assert metadata["in_grpo_set"] == 0 and metadata["solved_of_k"].startswith("![")
    # Nothing for GRPO to learn from: it passes the starting policy on untrained, saying why.
    metadata = {a.key: a.metadata for a in summary.assets}
    reason = metadata["grpo_checkpoint"]["skipped_because"]
    assert reason.endswith("difficulty_profile kept none of 6 (never_solved: 6)")
    # No run to price and none to compare with: the training job still succeeds, and both budget assets say why.
    assert metadata["training_budget"]["skipped_because"] == reason
    calibration = metadata["budget_calibration"]
    assert (calibration["comparable"], calibration["skipped_because"]) == (False, reason)


def test_difficulty_profile_scores_episode_tasks_by_the_episodes_the_policy_played(settings, tiny_model_dir):
    tasks = plant_profile_inputs(settings, tiny_model_dir, families=("arithmetic", "episode"))
    # The easiest task of each family: an arithmetic one sampled in one turn, an episode played turn by turn.
    overrides = profile_overrides(difficulty_max_per_family=1, episode_max_turns=2)
    summary = materialize(settings, "key:episodes", resources=overrides)
    assert summary.success, summary.failures
    played = records_from_frame(read_table(settings.home / "episodes.parquet"))
    chosen = [tasks[i] for i in first_per_family(tasks, 1)]
    [episode_task] = [t for t in chosen if t["family"] == "episode"]
    # The episodes asset played exactly the episode task the profile chooses, k times, and names the policy.
    assert [r["task_id"] for r in played] == [episode_task["task_id"]] * 2
    assert {r["model"] for r in played} == {str(tiny_model_dir)}
    assert all(r["end_reason"] in END_REASONS and r["turns"][0]["role"] == "assistant" for r in played)
    # One episode's verdict changed in the table: the profile must read it from there, not play the task again.
    played[1] |= {"passed": True, "score": 1.0, "reason": "planted"}
    assert {r["sampling"] for r in played} == {"max_new_tokens=4, temperature=0.7, max_turns=2"}
    write_table(frame_from_records(played, [*EPISODE_FIELDS, "sampling"]), settings.home / "episodes.parquet")

    summary = materialize(settings, "key:difficulty_profile", resources=overrides)
    assert summary.success, summary.failures
    rows = read_table(settings.home / "difficulty_profile.parquet").set_index("task_id")
    profiled = rows.loc[episode_task["task_id"]]
    assert (profiled["solved"], profiled["label"], profiled["samples"]) == (1, "learnable", 2)
    # Its rollouts are the played episodes, turns and end included, for preference_pairs.
    assert profiled["rollouts"] == [{name: r[name] for name in ROLLOUT_FIELDS} for r in played]
    [single] = [t for t in chosen if t["family"] == "arithmetic"]
    assert [(r["turns"], r["end_reason"]) for r in rows.loc[single["task_id"], "rollouts"]] == [(None, None)] * 2
    metadata = summary.assets[0].metadata
    assert (metadata["profiled_tasks"], metadata["profiled_episode_tasks"]) == (2, 1)


SAMPLING = "max_new_tokens=4, temperature=0.7, max_turns=4"  # as profile_overrides() plays in the quickstart


def test_grpo_trains_on_the_grpo_set_alone_and_passes_the_policy_on_without_one(settings, tiny_model_dir):
    tasks = plant_profile_inputs(settings, tiny_model_dir)  # the starting policy: the tiny model, as SFT left it
    write_table(frame_from_records(tasks[:1], TASK_FIELDS), settings.home / "eval_tasks.parquet")
    write_table(frame_from_records([], TASK_FIELDS), settings.home / "failure_eval.parquet")
    grpo = {"max_steps": 1, "num_generations": 2, "per_device_train_batch_size": 2, "max_completion_length": 8}
    resources = {"training": {"grpo": grpo}, "gate": {"samples": 1, "max_new_tokens": 4}}

    def train(learnable: int) -> tuple[dict, dict]:
        labels = ["learnable"] * learnable + ["never_solved"] * (len(tasks) - learnable)
        profile = pd.DataFrame({"task_id": [t["task_id"] for t in tasks], "label": labels})
        in_grpo_set = profile["label"] == "learnable"
        write_table(profile.assign(in_grpo_set=in_grpo_set), settings.home / "difficulty_profile.parquet")
        summary = materialize(settings, "key:grpo_checkpoint or key:checkpoint_eval", resources=resources)
        assert summary.success, summary.failures
        metadata = {a.key: a.metadata for a in summary.assets}
        return metadata["grpo_checkpoint"], metadata["checkpoint_eval"]

    trained, evaluated = train(learnable=2)
    assert trained["train_rows"] == 2 and evaluated["candidate_model"] == trained["checkpoint"] != str(tiny_model_dir)
    # The GRPO job reported to MLflow and TensorBoard under the root, and the evaluation logged to the same run.
    client = MlflowClient(trained["mlflow_tracking_uri"])
    assert trained["mlflow_tracking_uri"] == f"sqlite:///{settings.home}/tracking/mlflow/mlflow.db"
    assert evaluated["mlflow_run_id"] == trained["mlflow_run_id"]
    assert trained["mlflow_run"] == f"#/experiments/1/runs/{trained['mlflow_run_id']}"
    run = client.get_run(trained["mlflow_run_id"])
    assert run.info.run_name == f"grpo-{Path(trained['job_config']).parent.name}"  # its run folder's name
    assert [m.step for m in client.get_metric_history(run.info.run_id, "reward")] == [1]
    assert "eval/candidate/pass_at_1" in run.data.metrics
    events = EventAccumulator(trained["tensorboard_dir"])
    events.Reload()
    assert [e.step for e in events.Scalars("train/reward")] == [1]
    # No task in the GRPO set (a night whose profile finds none): no GRPO run, and the gate weighs the starting policy.
    skipped, evaluated = train(learnable=0)
    assert not skipped["trained"] and skipped["checkpoint"] == evaluated["candidate_model"] == str(tiny_model_dir)
    # A candidate no run trained gets a run of its own, named by its checkpoint.
    assert "mlflow_run_id" not in skipped and evaluated["mlflow_run_id"] != trained["mlflow_run_id"]
    assert client.get_run(evaluated["mlflow_run_id"]).data.tags["seedwheel.checkpoint"] == str(tiny_model_dir)
    assert skipped["skipped_because"] == (
        "no training task is in the GRPO set: difficulty_profile kept none of 6 (never_solved: 6)"
    )
    row = read_table(settings.home / "grpo_checkpoint.parquet").iloc[0]
    assert (row["stage"], row["trained"], row["start_model"]) == ("grpo", False, str(tiny_model_dir))
    assert len(row["task_ids"]) == 0  # trained on no task


@pytest.mark.parametrize(
    ("model", "samples", "sampling", "failure"),
    [
        # Played by the policy of an earlier sft_checkpoint: the profile must not judge this one by it.
        ("sft/older", 2, SAMPLING, "episodes were played by ['sft/older'], not by the starting policy sft/current"),
        # Played with k=1 while the profile counts 2 per task.
        ("sft/current", 1, SAMPLING, r"samples [0], not samples 0..1 (k=2)"),
        # Played at another temperature: another pass rate.
        (
            "sft/current",
            2,
            SAMPLING.replace("temperature=0.7", "temperature=0.2"),
            "played with max_new_tokens=4, temperature=0.2, max_turns=4, not with this profile's "
            "max_new_tokens=4, temperature=0.7, max_turns=4",
        ),
        # A table that does not say how it was played.
        ("sft/current", 2, None, "played with not recorded, not with this profile's"),
    ],
)
def test_difficulty_profile_refuses_episodes_of_another_policy_k_or_sampling(
    settings, model, samples, sampling, failure
):
    tasks = [t for t in bundled_tasks(settings, per_family=1) if t["family"] == "episode"]
    rows = [
        {"task_id": t["task_id"], "family": "episode", "sample": i, "model": model, "completion": "", "passed": False}
        | {"turns": [{"role": "assistant", "content": ""}], "end_reason": "answered", "score": 0.0, "reason": "no"}
        | {"sampling": sampling}
        for t in tasks
        for i in range(samples)
    ]
    # No single-turn task: no model is loaded, the check alone decides.
    plant_profile_inputs(settings, "sft/current", families=("episode",), episodes=rows)
    summary = materialize(settings, "key:difficulty_profile", resources=profile_overrides())
    assert not summary.success
    assert failure in summary.failures[0] and "materialize episodes again" in summary.failures[0]


@pytest.mark.parametrize("grpo_unprofiled", [True, False])
def test_a_capped_difficulty_profile_samples_the_easiest_tasks_per_family(settings, tiny_model_dir, grpo_unprofiled):
    tasks = plant_profile_inputs(settings, tiny_model_dir)
    overrides = profile_overrides(difficulty_max_per_family=1, grpo_unprofiled=grpo_unprofiled)
    summary = materialize(settings, "key:difficulty_profile", resources=overrides)
    assert summary.success, summary.failures
    profile = read_table(settings.home / "difficulty_profile.parquet")
    first = {i for i in first_per_family(tasks, 1)}
    assert {tasks[i]["difficulty"] for i in first} == {1}  # the bundled arithmetic and sql seeds' easiest
    for i, row in profile.iterrows():
        if i in first:  # sampled: the random policy never solves it, so it carries no signal
            assert (row["label"], row["samples"], len(row["rollouts"]), row["in_grpo_set"]) == (
                "never_solved",
                2,
                2,
                False,
            )
        else:  # over the cap: unknown signal, kept for GRPO (as when profiling is off) unless the policy says not
            assert (row["label"], row["samples"], row["rollouts"], row["in_grpo_set"]) == (
                "not_profiled",
                0,
                None,
                grpo_unprofiled,
            )


def test_promotion_reports_the_production_failures_apart(settings):
    # 30 tasks, the last 4 held-out production failures: the candidate fixes t26 and t27 and breaks t29.
    candidate = [True] * 24 + [False] * 2 + [True, True, False, False]
    baseline = [True] * 6 + [False] * 20 + [False, False, False, True]
    write_table(
        eval_rows(candidate, baseline, ["arithmetic"] * 30, failures=4), settings.home / "checkpoint_eval.parquet"
    )
    summary = materialize(settings, "promotion")
    metadata = summary.assets[0].metadata
    assert metadata["failures_fixed"] == ["t26", "t27"] and metadata["failures_broken"] == ["t29"]
    assert metadata["failure_eval"].startswith("failure_eval: the candidate solves 2 of 4")
    decision = read_table(settings.home / "promotion.parquet").iloc[0]
    assert decision["failure_eval"]["tasks"] == 4


def plant_rollouts(settings, train: list[dict], evaluation: list[dict], profiled: list[dict]) -> None:
    """Upstream tables of preference_pairs: the splits, difficulty_profile's rollouts (on `profiled`), an eval run."""
    plant_train_tasks(settings, train)
    write_table(frame_from_records(evaluation, TASK_FIELDS), settings.home / "eval_tasks.parquet")
    verdicts = [("#### 4", True), ("#### 5", False), ("#### 5", False)]  # the last one a duplicate
    samples = [
        {"sample": i, "completion": text, "passed": ok, "score": float(ok), "reason": f"r{i}"}
        for i, (text, ok) in enumerate(verdicts)
    ]
    profile = pd.DataFrame(
        {
            "task_id": [t["task_id"] for t in profiled],
            "family": [t["family"] for t in profiled],
            "label": "learnable",
            "in_grpo_set": True,
            "policy": "sft/final",
            "rollouts": pd.Series([samples] * len(profiled), dtype=object),
        }
    )
    write_table(profile, settings.home / "difficulty_profile.parquet")
    rows = [
        {"role": role, "model": role, "task_id": task["task_id"], "family": task["family"], "failure_eval": False}
        | {"sample": i, "passed": ok, "score": float(ok), "reason": "", "completion": text}
        for role in ("baseline", "candidate")
        for task in evaluation
        for i, (text, ok) in enumerate(verdicts if role == "candidate" else verdicts[1:])  # the baseline never passes
    ]
    write_table(pd.DataFrame(rows), settings.home / "checkpoint_eval.parquet")


def test_preference_pairs_train_on_training_rollouts_and_keep_eval_pairs_apart(settings):
    tasks = bundled_tasks(settings, per_family=1)
    train, evaluation = tasks[:2], tasks[2:4]
    plant_rollouts(settings, train, evaluation, profiled=train)
    summary = materialize(settings, "preference_pairs")
    assert summary.success, summary.failures
    pairs = read_table(settings.home / "preference_pairs.parquet")
    # One pair per task that both passed and failed: the duplicate failure adds none.
    assert sorted(zip(pairs["split"], pairs["task_id"], pairs["source"], pairs["model"], strict=True)) == sorted(
        [("train", t["task_id"], "difficulty_profile", "sft/final") for t in train]
        + [("eval", t["task_id"], "checkpoint_eval", "candidate") for t in evaluation]
    )
    prompts = {t["task_id"]: t["prompt"] for t in train + evaluation}
    assert all(prompt == prompts[t] for t, prompt in zip(pairs["task_id"], pairs["prompt"], strict=True))
    metadata = summary.assets[0].metadata
    assert (metadata["train_pairs"], metadata["eval_pairs"], metadata["train_tasks_with_pairs"]) == (2, 2, 2)
    assert metadata["dropped_samples"] == {"train": {"duplicate": 2}, "eval": {"duplicate": 4}}
    assert "| eval | no_passing | 2 |" in metadata["task_outcomes"]  # the baseline failed every sample
    export = settings.home / "export"
    for split in ("train", "eval"):
        exported = pq.read_table(export / f"preferences_{split}.parquet").to_pylist()
        assert {row["split"] for row in exported} == {split} and len(exported) == 2
        assert len((export / f"preferences_{split}.jsonl").read_text().splitlines()) == 2


def test_preference_pairs_of_episodes_are_their_turns(settings):
    episode_tasks = [t for t in bundled_tasks(settings, per_family=2) if t["family"] == "episode"]
    train, evaluation = episode_tasks[:1], episode_tasks[1:2]
    plant_train_tasks(settings, train)
    write_table(frame_from_records(evaluation, TASK_FIELDS), settings.home / "eval_tasks.parquet")
    call = {"id": "call_1", "type": "function", "function": {"name": "find_customer", "arguments": "{}"}}
    solved = [
        {"role": "assistant", "content": '<tool_call>{"name": "find_customer"}</tool_call>', "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"id": 1}'},
        {"role": "assistant", "content": "Refunded."},
    ]
    claimed = [{"role": "assistant", "content": "Refunded."}]
    samples = [
        {"sample": i, "completion": "", "passed": ok, "score": float(ok), "reason": "", "turns": turns}
        | {"end_reason": "answered"}
        for i, (turns, ok) in enumerate([(solved, True), (claimed, False)])
    ]
    profile = pd.DataFrame(
        {"task_id": [train[0]["task_id"]], "family": ["episode"], "policy": ["sft/final"]}
        | {"rollouts": pd.Series([samples], dtype=object)}
    )
    write_table(profile, settings.home / "difficulty_profile.parquet")
    evaluated = [
        {"role": "candidate", "model": "ckpt", "task_id": evaluation[0]["task_id"], "family": "episode"}
        | {"failure_eval": False, **sample}
        for sample in samples
    ]
    write_table(frame_from_records(evaluated, EVAL_COLUMNS), settings.home / "checkpoint_eval.parquet")
    summary = materialize(settings, "preference_pairs")
    assert summary.success, summary.failures
    pairs = read_table(settings.home / "preference_pairs.parquet")
    # Each side is the episode's messages as played (tool calls and results), in both splits.
    assert [(p["split"], p["chosen"], p["rejected"]) for p in records_from_frame(pairs)] == [
        ("train", solved, claimed),
        ("eval", solved, claimed),
    ]
    metadata = summary.assets[0].metadata
    assert metadata["episode_pairs"] == 2
    assert "| find_customer → Refunded. | Refunded. |" in metadata["preview"]
    [exported] = pq.read_table(settings.home / "export" / "preferences_train.parquet").to_pylist()
    assert exported["chosen"][0]["tool_calls"] == [call] and exported["chosen"][1]["tool_call_id"] == "call_1"


def test_preference_pairs_refuse_rollouts_on_eval_tasks_as_training_pairs(settings):
    tasks = bundled_tasks(settings, per_family=1)
    train, evaluation = tasks[:2], tasks[2:4]
    plant_rollouts(settings, train, evaluation, profiled=train + evaluation[:1])  # a profile that saw an eval task
    summary = materialize(settings, "preference_pairs")
    assert not summary.success
    assert "1 held-out task(s) among the rollouts for training pairs" in summary.failures[0]
    assert not (settings.home / "export" / "preferences_train.parquet").exists()


def test_checkpoint_eval_plays_the_episode_tasks_and_samples_the_others(settings, tiny_model_dir, monkeypatch):
    tasks = [t for t in bundled_tasks(settings, per_family=1) if t["family"] in ("arithmetic", "episode")]
    # Both models play the episode turn by turn, looking the same thing up every turn (a 4-token random model
    # would answer at once): only the gate's turn cap ends the loop.
    [lookup] = [tagged_calls(episode_calls(t["reference"])[:1]) for t in tasks if t["family"] == "episode"]
    generate = EngineTurns.__call__
    monkeypatch.setattr(EngineTurns, "__call__", lambda *args: [lookup for _ in generate(*args)])
    write_table(frame_from_records(tasks, TASK_FIELDS), settings.home / "eval_tasks.parquet")
    write_table(frame_from_records([], TASK_FIELDS), settings.home / "failure_eval.parquet")
    checkpoint = {"checkpoint": str(tiny_model_dir), "base_model": str(tiny_model_dir)}
    write_table(pd.DataFrame([checkpoint]), settings.home / "grpo_checkpoint.parquet")
    gate = {"samples": 2, "max_new_tokens": 4, "episode_max_turns": 1}
    summary = materialize(settings, "key:checkpoint_eval", resources={"gate": gate})
    assert summary.success, summary.failures
    rows = read_table(settings.home / "checkpoint_eval.parquet")
    assert tuple(rows.columns) == EVAL_COLUMNS and len(rows) == 2 * 2 * 2  # roles x tasks x samples
    episodes = rows["family"] == "episode"
    # An episode row is one episode: its messages (the call and the tool's answer) and how it ended (the cap).
    assert (rows.loc[episodes, "end_reason"] == "max_turns").all()
    assert all([m["role"] for m in turns] == ["assistant", "tool"] for turns in rows.loc[episodes, "turns"])
    assert rows.loc[~episodes, "end_reason"].isna().all() and rows.loc[~episodes, "turns"].isna().all()
    metadata = summary.assets[0].metadata
    assert (metadata["tasks"], metadata["episode_tasks"], metadata["episode_max_turns"]) == (2, 1, 1)


# Every step that trains or loads a checkpoint, from the planted splits on.
TRAINING_CHAIN = " or ".join(
    f"key:{key}"
    for key in ("sft_checkpoint", "episodes", "difficulty_profile", "grpo_checkpoint", "checkpoint_eval", "promotion")
)


@pytest.fixture
def s3_settings(tmp_path, s3_bucket, monkeypatch) -> Settings:
    """Settings with the storage root on the test S3 server and the arithmetic seeds as train_tasks (4) and
    eval_tasks (2) there; every local folder a run could write to (working directory, home, user cache, temporary
    folder) is under tmp_path, where the test sees what was written."""
    for name in ("cwd", "user", "tmp"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user" / ".cache"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # the GRPO job's process
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # this process: working copies, model copies
    settings = Settings.from_env({}, home=f"s3://{s3_bucket}/seedwheel", seeds_dir=SEEDS, dagster_home=tmp_path / "dg")
    tasks = [{k: t[k] for k in TASK_FIELDS} for t in load_seeds([SEEDS / "arithmetic"], root=SEEDS.parent).tasks]
    for name, part in (("train_tasks", tasks[:4]), ("eval_tasks", tasks[4:6]), ("failure_eval", [])):
        store_table(frame_from_records(part, TASK_FIELDS), UPath(settings.home) / f"{name}.parquet")
    return settings


def s3_training(model: Path) -> dict[str, dict[str, Any]]:
    """The tiny model, two SFT steps, a profile of one task, one GRPO step and an eval of one task."""
    grpo = {"max_steps": 1, "num_generations": 2, "per_device_train_batch_size": 2, "max_completion_length": 8}
    training = {"base_model": str(model), "sft_max_steps": 2, "sft_batch_size": 2, "sft_families": None, "grpo": grpo}
    return {
        **profile_overrides(difficulty_max_per_family=1, grpo_unprofiled=True, **training),
        "gate": {"samples": 1, "max_new_tokens": 4, "max_tasks": 1},
    }


def written_outside_tmp(tmp_path: Path, before: set[Path]) -> list[str]:
    """Files written under tmp_path since `before` was listed, outside the temporary folder."""
    new = (p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file() and p not in before)
    return sorted(str(p) for p in new if p.parts[0] != "tmp")


def test_training_on_an_object_store_commits_its_checkpoints_there_and_every_consumer_loads_them(
    tmp_path, s3_settings, postgres_url, monkeypatch, tiny_model_dir
):
    database = fresh_database(postgres_url)  # an object-store root keeps the split ledger and the record there
    monkeypatch.setenv("SEEDWHEEL_DATABASE_URL", database)
    settings = dataclasses.replace(s3_settings, database_url=database)
    root = str(settings.home)
    before = set(tmp_path.rglob("*"))
    summary = materialize(settings, TRAINING_CHAIN, resources=s3_training(tiny_model_dir))
    assert summary.success, summary.failures
    # Nothing on this machine but the instance's config, outside the temporary folder.
    assert set(written_outside_tmp(tmp_path, before)) <= {"dg/dagster.yaml", "dg/.instance.lock"}

    # The checkpoints are URLs inside run folders committed to the bucket, the manifests beside them there.
    sft, grpo = (pd.read_parquet(f"{root}/{name}.parquet").iloc[0] for name in ("sft_checkpoint", "grpo_checkpoint"))
    sft_run, grpo_run = (f"{root}/training/{row['name'].replace('-', '/', 1)}" for row in (sft, grpo))
    assert (sft["checkpoint"], grpo["checkpoint"]) == (f"{sft_run}/final", f"{grpo_run}/output/final")
    for run, final in ((sft_run, "final"), (grpo_run, "output/final")):
        committed = RemoteFolder(run).latest().files
        assert {f"{final}/config.json", f"{final}/model.safetensors"} <= set(committed), run
        assert any("/checkpoint-" in name or name.startswith("checkpoint-") for name in committed)
    with working_copy(f"{root}/{CHECKPOINTS_FOLDER}") as folder:
        manifests = {m.name: m for m in load_manifests(folder)}
    assert {name: m.checkpoint for name, m in manifests.items()} == {
        sft["name"]: sft["checkpoint"],
        grpo["name"]: grpo["checkpoint"],
    }
    assert grpo["manifest"] == f"{root}/{CHECKPOINTS_FOLDER}/{grpo['name']}/manifest.json"
    recorded = manifests[grpo["name"]]  # the job as stored: where its model and outputs are kept, not the working copy
    assert (recorded.start_model, recorded.config["model_path"]) == (sft["checkpoint"], sft["checkpoint"])
    assert recorded.config["output_dir"] == f"{grpo_run}/output"

    # Each consumer named the checkpoint by its URL and loaded it from one read-only copy per checkpoint: the SFT
    # model's was shared by difficulty_profile and the GRPO job, the GRPO model's made for checkpoint_eval.
    profile = pd.read_parquet(f"{root}/difficulty_profile.parquet")
    assert set(profile["policy"]) == {sft["checkpoint"]} and (profile["samples"] > 0).any()
    evaluated = pd.read_parquet(f"{root}/checkpoint_eval.parquet").groupby("role")["model"].first()
    assert evaluated.to_dict() == {"baseline": str(tiny_model_dir), "candidate": grpo["checkpoint"]}
    assert next(a for a in summary.assets if a.key == "promotion").metadata["split_epochs"]["candidate"] == 0
    cache = tmp_path / "tmp" / CHECKPOINT_CACHE_FOLDER
    copies = sorted(p for p in cache.iterdir() if not p.name.startswith("."))
    storage = StorageRoot(root=root)
    assert sorted(Path(storage.model_dir(c)) for c in (sft["checkpoint"], grpo["checkpoint"])) == copies
    loaded = AutoModelForCausalLM.from_pretrained(storage.model_dir(grpo["checkpoint"]))
    assert loaded.num_parameters() == AutoModelForCausalLM.from_pretrained(tiny_model_dir).num_parameters()


def test_a_training_step_that_fails_on_an_object_store_leaves_nothing_in_its_run_folder(
    tmp_path, s3_settings, monkeypatch, tiny_model_dir
):
    real_sft = training.sft.run_sft

    def trains_then_fails(*args: Any, **kwargs: Any) -> Any:
        result = real_sft(*args, **kwargs)
        assert (result.checkpoint_dir / "config.json").is_file()  # trained, the model in the working copy
        raise RuntimeError("the step died after training")

    monkeypatch.setattr(training.sft, "run_sft", trains_then_fails)
    summary = materialize(s3_settings, "sft_checkpoint", resources=s3_training(tiny_model_dir))
    assert not summary.success and "the step died after training" in summary.failures[0]
    fs, root = url_to_fs(str(s3_settings.home))
    assert fs.find(f"{root}/training") == [] and fs.find(f"{root}/{CHECKPOINTS_FOLDER}") == []
    assert list((tmp_path / "tmp").glob("seedwheel-folder-*")) == []  # the working copy went with the step
