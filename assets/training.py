"""Training assets: audit the reward, warm up with SFT, profile difficulty, then train GRPO out of process.

Each trained checkpoint stores its manifest for good under `<root>/checkpoints/` (which model, trained from
what, on which tasks after every filter, under which split plan, by which run, with which config and verifier
versions; `curation.manifests`), and the checkpoint asset's one row repeats it, so lineage questions are
answered from stored data, not from logs. Training run folders, `<root>/training/<stage>/<digest>`, are named by a
hash of their inputs: on a local root a rerun after a kill finds the same folder and resumes from its last complete
checkpoint. On an object store a run trains in a local working copy of its folder, committed back when the step
succeeds (`StorageRoot.folder`); the checkpoint is then a URL, and every step that loads one goes through
`StorageRoot.model_dir`.
"""

import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd

from assets import groups
from assets.metadata import count_table, markdown_table, preview, tracking_metadata
from assets.plots import bar_chart, line_chart
from core.tables import records_from_frame
from curation.manifests import CheckpointManifest, write_manifest
from curation.splits import first_per_family
from langmodels import tether
from resources import (
    CHECKPOINTS_FOLDER,
    EXPORT_FOLDER,
    TRAINING_FOLDER,
    ExperimentTracking,
    PromotionGate,
    SeedRepository,
    StorageRoot,
    TrainingPolicy,
)
from review.rewards import AGREEMENT_COLUMNS, AuditLabels, agreement_table, audit_labels
from training.budget import measured_run
from training.checkpoints import run_digest
from training.difficulty import (
    check_played_episodes,
    empty_grpo_set_reason,
    grpo_set,
    labels_by_family,
    not_profiled,
    profile_table,
    score_profiled,
    solved_histogram,
)
from training.episodes import episodes_table, pass_rates_by_environment, sample_episodes
from training.evaluation import is_episode
from training.export import ExportedSplit
from training.grpo import reward_spread
from training.grpo_job import GRPOJobResult, job_grpo_settings, step_metrics, write_job
from training.preferences import (
    DEFAULT_MAX_PAIRS_PER_TASK,
    PairSplit,
    PreferencePairs,
    episode_pairs,
    export_pairs,
    outcomes_by_split,
    pairs_by_family,
    pairs_frame,
    profile_rollouts,
    side_text,
    split_pairs,
)
from training.retrain import DEFAULT_RETRAIN_GROWTH, retrain_decision
from training.reward_audit import AuditCheck, RewardAudit, audit_reward
from training.sft import SFTResult, SFTSettings, imitated_tasks, warm_up_digest, warm_up_tasks
from training.tracking import TrackingConfig, tag_checkpoint
from validators.registry import VerifyContext
from validators.rewards import build_reward_funcs
from validators.seeds import AUDIT_DIR
from validators.tasks import TASK_FIELDS

REWARD_AUDIT_FILE = Path(AUDIT_DIR, "reward_audit.jsonl")
# Columns of a checkpoint manifest (sft_checkpoint, grpo_checkpoint): one row per materialization.
MANIFEST_COLUMNS = (
    "name", "stage", "trained", "checkpoint", "start_model", "base_model", "task_ids", "split_seq", "split_epoch",
    "split_plan_id", "run_id", "data_versions", "steps", "train_seconds", "config", "verifier_versions", "manifest",
)  # fmt: skip
DISAGREEMENT_COLUMNS = ("id", "family", "human_accept", "score", "human_reason")
DATA_VERSION_TAG = "dagster/data_version"  # the tag Dagster stores a materialization's data version under
PLOTTED_METRICS = ("reward", "reward_std", "frac_reward_zero_std", "kl")
# The inputs whose materializations a stage's checkpoint manifest names (its lineage): those the asset reads.
MANIFEST_INPUTS = {"sft": ("train_tasks",), "grpo": ("train_tasks", "difficulty_profile", "sft_checkpoint")}


@dg.asset(
    group_name=groups.TRAINING,
    check_specs=[
        dg.AssetCheckSpec(
            "reward_sound",
            asset="reward_audit",
            blocking=True,
            description="The reward agrees with human verdicts and pays nothing for completions that ignore the task.",
        )
    ],
)
def reward_audit(
    context: dg.AssetExecutionContext, train_tasks: pd.DataFrame, seeds: SeedRepository, training: TrainingPolicy
):  # no return annotation: with a check spec the op has two outputs
    """The training reward scored against the labelled audit set, plus reward-hack probes on the training tasks."""
    verify_context = seeds.verify_context()
    funcs, weights = build_reward_funcs(training.reward_weights, context=verify_context)
    labelled = audit_labels(seeds.folder, seeds.folder / REWARD_AUDIT_FILE, verify_context)  # + reviewers' labels
    tasks = records_from_frame(train_tasks[list(TASK_FIELDS)])
    audit = audit_reward(funcs, weights, tasks, labelled.rows, policy=training.audit_policy(), context=verify_context)
    for check in audit.checks:
        (context.log.info if check.passed else context.log.warning)(f"reward audit: {check.message}")
    rows = pd.DataFrame(audit.rows)
    disagreements = rows[rows["agree"].eq(False)] if "agree" in rows else rows
    return dg.MaterializeResult(
        value=rows,
        metadata={
            **audit.numbers,
            **_label_metadata(audit, labelled),
            "probe_tasks": len(tasks),
            "reward_weights": dg.MetadataValue.json(training.reward_weights),
            "checks": dg.MetadataValue.md("\n".join(f"- {check.message}" for check in audit.checks)),
            "disagreements": dg.MetadataValue.md(
                markdown_table(disagreements.head(20).to_dict(orient="records"), DISAGREEMENT_COLUMNS)
            ),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="reward_sound",
                passed=audit.passed,
                severity=dg.AssetCheckSeverity.ERROR,
                description="the reward is sound" if audit.passed else _failed(audit.failures),
                metadata={
                    **{k: v for k, v in audit.numbers.items() if isinstance(v, int | float)},
                    "failed_checks": dg.MetadataValue.json([check.name for check in audit.failures]),
                    "label_files": dg.MetadataValue.json(labelled.files),
                },
            )
        ],
    )


def _label_metadata(audit: RewardAudit, labelled: AuditLabels) -> dict[str, Any]:
    """Which labels the audit used, and its agreement per source (hand-written, reviewed), family and verifier."""
    table = agreement_table(audit.rows, labelled.rows)
    return {
        "labelled_rows": len(labelled.rows),
        "reviewed_rows": labelled.reviewed,
        "label_files": dg.MetadataValue.json(labelled.files),
        "agreement_by_source": dg.MetadataValue.md(markdown_table(table, AGREEMENT_COLUMNS)),
        # Two reviewers on the same outputs: Cohen's kappa, per pair (none until two have labelled one output).
        "reviewer_agreement": dg.MetadataValue.json([pair.line() for pair in labelled.reviewers]),
    }


@dg.asset(group_name=groups.TRAINING, deps=["reward_audit"], pool="gpu")
def sft_checkpoint(
    context: dg.AssetExecutionContext,
    train_tasks: pd.DataFrame,
    seeds: SeedRepository,
    training: TrainingPolicy,
    gate: PromotionGate,
    storage: StorageRoot,
    tracking: ExperimentTracking,
) -> dg.MaterializeResult[pd.DataFrame]:
    """The policy GRPO starts from: the start model (`start_from`: the base or the promoted one) after an SFT
    warm-up on the training references (or as is)."""
    base = training.model()
    start = training.start_model(base, lambda: gate.registry(storage.state()))
    if not training.sft:
        return _no_warm_up(start, base, "sft=False")
    tasks = warm_up_tasks(records_from_frame(train_tasks[list(TASK_FIELDS)]), training.sft_families)
    if not tasks:  # none of sft_families is in this split: a night without them still trains
        reason = f"no training task of sft_families {training.sft_families}"
        context.log.warning(
            f"SFT skipped: {reason} (the split has {_families(train_tasks['family'])}); GRPO starts from {start}"
        )
        return _no_warm_up(start, base, reason)
    settings = training.sft_settings()
    run = (TRAINING_FOLDER, "sft", warm_up_digest(start, tasks, settings))
    tracked = tracking.config()
    context.log.info(f"SFT on {len(tasks)} references from {start} (start_from={training.start_from})")
    result, checkpoint = _warm_up(context, storage, run, start, tasks, settings, seeds.verify_context(), tracked)
    manifest = _record_checkpoint(  # once the run folder is committed: the manifest names a checkpoint that exists
        context,
        storage,
        run,
        result,
        checkpoint=checkpoint,
        start=start,
        base=base,
        tasks=imitated_tasks(tasks),
        config=asdict(settings),
    )
    tag_checkpoint(tracked, result.tracked, checkpoint)  # checkpoint_eval and promotion find the run by it
    return dg.MaterializeResult(value=manifest, metadata=_warm_up_metadata(manifest, result, tasks))


@dg.asset(group_name=groups.TRAINING)
def difficulty_profile(
    context: dg.AssetExecutionContext,
    train_tasks: pd.DataFrame,
    sft_checkpoint: pd.DataFrame,
    episodes: pd.DataFrame,
    seeds: SeedRepository,
    training: TrainingPolicy,
    storage: StorageRoot,
) -> dg.MaterializeResult[pd.DataFrame]:
    """Offline dynamic sampling: the starting policy's pass rate per training task (episode tasks from `episodes`),
    and which tasks GRPO gets."""
    if not training.difficulty_profile:
        profile = not_profiled(train_tasks)
        return dg.MaterializeResult(
            value=profile, metadata={"enabled": False, "rows": len(profile), "in_grpo_set": len(profile)}
        )
    policy_model = str(sft_checkpoint.loc[0, "checkpoint"])
    k = training.difficulty_k
    profiled = _profiled(records_from_frame(train_tasks[list(TASK_FIELDS)]), training)
    episode_tasks = sum(is_episode(task) for task in profiled)
    if episode_tasks:  # scored by the episodes `episodes` played: the same policy, and played as this profile samples
        check_played_episodes(episodes, policy=policy_model, sampling=training.episode_sampling())
    context.log.info(
        f"sampling {k} completions for each of {len(profiled) - episode_tasks} training tasks with {policy_model}; "
        f"{episode_tasks} episode tasks from `episodes`"
    )
    sampled = score_profiled(
        storage.model_dir(policy_model),
        profiled,
        episodes,
        k=k,
        max_new_tokens=training.difficulty_max_new_tokens,
        temperature=training.difficulty_temperature,
        batch_size=training.difficulty_batch_size,
        context=seeds.verify_context(),
    )
    profile = profile_table(train_tasks, sampled, k, policy=policy_model, grpo_unprofiled=training.grpo_unprofiled)
    metadata = _profile_metadata(profile, policy_model, k, len(profiled), episode_tasks)
    return dg.MaterializeResult(value=profile, metadata=metadata)


@dg.asset(group_name=groups.TRAINING)
def episodes(
    context: dg.AssetExecutionContext,
    train_tasks: pd.DataFrame,
    sft_checkpoint: pd.DataFrame,
    seeds: SeedRepository,
    training: TrainingPolicy,
    storage: StorageRoot,
) -> dg.MaterializeResult[pd.DataFrame]:
    """The starting policy's multi-turn rollouts on the training split's episode tasks: each turn, tool call and
    result, the end reason, the state the episode changed and the verdict of the task's own verifier.

    The episode tasks difficulty_profile profiles, played with its k: it reads their verdicts from here.
    """
    records = records_from_frame(train_tasks[list(TASK_FIELDS)])
    chosen = [task for task in _profiled(records, training) if is_episode(task)]
    policy_model = str(sft_checkpoint.loc[0, "checkpoint"])
    context.log.info(f"playing {training.difficulty_k} episodes of each of {len(chosen)} tasks with {policy_model}")
    rows = (
        sample_episodes(
            storage.model_dir(policy_model),
            chosen,
            k=training.difficulty_k,
            max_new_tokens=training.difficulty_max_new_tokens,
            temperature=training.difficulty_temperature,
            context=seeds.verify_context(),
            batch_size=training.difficulty_batch_size,
            max_turns=training.episode_max_turns,
        )
        if chosen
        else []
    )
    played = episodes_table(rows, chosen, model=policy_model, sampling=training.episode_sampling())
    in_split = sum(is_episode(task) for task in records)
    return dg.MaterializeResult(value=played, metadata=_episodes_metadata(played, policy_model, len(chosen), in_split))


@dg.asset(group_name=groups.TRAINING, pool="gpu")
def grpo_checkpoint(
    context: dg.AssetExecutionContext,
    train_tasks: pd.DataFrame,
    difficulty_profile: pd.DataFrame,
    sft_checkpoint: pd.DataFrame,
    training: TrainingPolicy,
    seeds: SeedRepository,
    storage: StorageRoot,
    tracking: ExperimentTracking,
    pipes: dg.PipesSubprocessClient,
) -> dg.MaterializeResult[pd.DataFrame]:
    """GRPO with the registry's rewards by `python -m training.grpo_job` under Dagster Pipes (or a GPU launcher)."""
    part = grpo_set(train_tasks, difficulty_profile)
    if part.empty:  # no task the starting policy learns from: a night without one still evaluates it
        return _no_grpo(context, sft_checkpoint, train_tasks, difficulty_profile)
    start = str(sft_checkpoint.loc[0, "checkpoint"])
    grpo = job_grpo_settings(training.grpo, training.reward_weights, training.episode_max_turns)
    run = (TRAINING_FOLDER, "grpo", run_digest(start, sorted(part["task_id"]), {"runtime": training.runtime, **grpo}))
    named = {"run_name": f"grpo-{run[2]}", **grpo}  # the MLflow run's and TensorBoard folder's name
    with storage.folder(*run) as run_dir:
        job, job_file = write_job(part, run_dir, storage.model_dir(start), training.runtime, named, tracking.config())
        context.log.info(f"GRPO on {len(part)} tasks from {start}; job config {job_file}")
        reported, steps = _run_job(context, pipes, seeds, job_file)
        kept = partial(_stored, storage, run, run_dir)  # where each file stays once the folder is committed
    manifest = _record_checkpoint(
        context,
        storage,
        run,
        reported,
        checkpoint=kept(reported.checkpoint_dir),
        start=start,
        base=str(sft_checkpoint.loc[0, "base_model"]),
        tasks=reported.trained_tasks(records_from_frame(part[list(TASK_FIELDS)])),
        config=job.relocated(start, kept).to_mapping(),
    )
    tag_checkpoint(tracking.config(), reported.tracked, kept(reported.checkpoint_dir))
    return dg.MaterializeResult(
        value=manifest, metadata=_grpo_metadata(manifest, reported, steps, kept(job_file), len(train_tasks))
    )


class PreferenceConfig(dg.Config):
    """How many preference pairs one task may give per sampling model."""

    max_pairs_per_task: int = DEFAULT_MAX_PAIRS_PER_TASK


@dg.asset(group_name=groups.TRAINING)
def preference_pairs(
    config: PreferenceConfig,
    train_tasks: pd.DataFrame,
    eval_tasks: pd.DataFrame,
    difficulty_profile: pd.DataFrame,
    checkpoint_eval: pd.DataFrame,
    storage: StorageRoot,
) -> dg.MaterializeResult[pd.DataFrame]:
    """DPO pairs from verified rollouts (an episode's side: its turns): train pairs from difficulty_profile,
    eval-task pairs held out apart."""
    train, held_out = (records_from_frame(frame[list(TASK_FIELDS)]) for frame in (train_tasks, eval_tasks))
    rollouts = profile_rollouts(
        records_from_frame(difficulty_profile.reindex(columns=["task_id", "policy", "rollouts"]))
    )
    built = split_pairs(
        rollouts, train, records_from_frame(checkpoint_eval), held_out, max_pairs_per_task=config.max_pairs_per_task
    )
    with storage.folder(EXPORT_FOLDER) as folder:
        exported = {split: export_pairs(part.pairs, folder, split) for split, part in built.items()}
    pairs = pairs_frame(built)
    return dg.MaterializeResult(
        value=pairs,
        metadata=_pairs_metadata(
            pairs,
            built,
            exported,
            storage,
            rollouts={"train": len(rollouts), "eval": len(checkpoint_eval)},
            tasks=train + held_out,
            max_pairs_per_task=config.max_pairs_per_task,
        ),
    )


def _profiled(records: list[dict[str, Any]], training: TrainingPolicy) -> list[dict[str, Any]]:
    """The training tasks difficulty_profile profiles, in split order: the `difficulty_max_per_family` easiest of
    each family (`curation.splits.first_per_family`). `episodes` plays the episode tasks among them."""
    return [records[i] for i in first_per_family(records, training.difficulty_max_per_family)]


def _warm_up(
    context: dg.AssetExecutionContext,
    storage: StorageRoot,
    run: tuple[str, str, str],
    start: str,
    tasks: list[Mapping[str, Any]],
    settings: SFTSettings,
    verify_context: VerifyContext,
    tracking: TrackingConfig | None,
) -> tuple[SFTResult, str]:
    """Warm `start` up on `tasks` in the run folder (a working copy, committed when training returns), logging each
    step's loss; returns the result and where its checkpoint is kept."""
    from training.sft import run_sft  # looked up at each run: a test replaces it

    def on_metrics(metrics: dict[str, Any]) -> None:
        if "loss" in metrics:
            context.log.info(f"SFT step {metrics.get('step')}: loss {metrics['loss']:.4g}")

    with storage.folder(*run) as output_dir:
        result = run_sft(
            storage.model_dir(start),
            tasks,
            output_dir,
            settings=settings,
            on_metrics=on_metrics,
            context=verify_context,  # episode references are played in their environments
            overrides={"run_name": f"{run[1]}-{run[2]}"},  # the MLflow run's and TensorBoard folder's name
            tracking=tracking,
        )
        return result, _stored(storage, run, output_dir, result.checkpoint_dir)


def _warm_up_metadata(manifest: pd.DataFrame, result: SFTResult, tasks: list[Mapping[str, Any]]) -> dict[str, Any]:
    """sft_checkpoint's metadata after a warm-up: its checkpoint and manifest, what it trained on, its loss curve."""
    losses = [m for m in result.metrics if "loss" in m]
    return {
        "trained": True,
        "checkpoint": dg.MetadataValue.path(str(manifest.loc[0, "checkpoint"])),
        "manifest": dg.MetadataValue.path(str(manifest.loc[0, "manifest"])),
        "split_plan": int(manifest.loc[0, "split_seq"]),
        "base_model": str(manifest.loc[0, "base_model"]),
        "steps": result.steps,
        "train_rows": result.train_rows,
        "families": _families(task["family"] for task in tasks),
        # Of them, episodes imitated turn by turn (their references played in their environments).
        "episode_rows": sum(is_episode(task) for task in imitated_tasks(tasks)),
        "skipped_rows_without_reference": result.skipped_rows,
        "skipped_rows_too_long": result.too_long_rows,  # the prompt alone fills sft_max_length
        "train_seconds": dg.MetadataValue.float(result.train_seconds),
        "resumed_from": result.resumed_from or "",
        "loss_curve": line_chart(
            [m.get("step", i) for i, m in enumerate(losses)],
            {"loss": [m["loss"] for m in losses]},
            title="SFT loss",
            xlabel="step",
            ylabel="loss",
        ),
        **tracking_metadata(result.tracked),
    }


def _profile_metadata(profile: pd.DataFrame, policy: str, k: int, profiled: int, episode_tasks: int) -> dict[str, Any]:
    """difficulty_profile's metadata: what it sampled and how, the labels (per family too), and solved-of-k."""
    by_family = labels_by_family(profile)
    return {
        "enabled": True,
        "policy": policy,
        "rows": len(profile),
        "profiled_tasks": profiled,
        # Scored from `episodes`' multi-turn rollouts; the rest sampled here in one turn.
        "profiled_episode_tasks": episode_tasks,
        "in_grpo_set": int(profile["in_grpo_set"].sum()),
        "labels": count_table(profile["label"], "label"),
        "labels_by_family": dg.MetadataValue.md(
            markdown_table(by_family.to_dict(orient="records"), list(by_family.columns))
        ),
        "solved_of_k": bar_chart(
            {"tasks": solved_histogram(profile["solved"], k)},
            title=f"completions solved out of {k} per task",
            xlabel="solved",
            ylabel="tasks",
        ),
    }


def _episodes_metadata(played: pd.DataFrame, policy: str, tasks: int, in_split: int) -> dict[str, Any]:
    """episodes' metadata: how many it played of how many, how they ended, pass rates (per environment too)."""
    rates = [{**r, "pass_rate": f"{r['pass_rate']:.2f}"} for r in pass_rates_by_environment(played)]
    return {
        "policy": policy,
        "tasks": tasks,
        "episode_tasks_in_split": in_split,
        "episodes": len(played),
        "pass_rate": dg.MetadataValue.float(float(played["passed"].mean()) if len(played) else 0.0),
        "mean_tool_calls": dg.MetadataValue.float(float(played["tool_calls"].mean()) if len(played) else 0.0),
        "end_reasons": count_table(played["end_reason"], "end_reason"),
        "fail_reasons": count_table(played.loc[~played["passed"].astype(bool), "reason"], "reason"),
        "pass_rate_by_environment": dg.MetadataValue.md(
            markdown_table(rates, ["environment", "episodes", "pass_rate"])
        ),
        "preview": preview(played, ("task_id", "sample", "end_reason", "tool_calls", "passed", "completion")),
    }


def _run_job(
    context: dg.AssetExecutionContext, pipes: dg.PipesSubprocessClient, seeds: SeedRepository, config_path: Path
) -> tuple[GRPOJobResult, list[dict[str, Any]]]:
    """Run the GRPO job written at `config_path` under Dagster Pipes; returns its result and its steps' metrics."""
    invocation = pipes.run(
        context=context,
        # Tethered: if this run is killed, the training process ends too (on a local root a rerun resumes).
        command=tether.command_for([sys.executable, "-m", "training.grpo_job", "--config", str(config_path)]),
        env={"SEEDWHEEL_SEEDS": str(seeds.folder)},  # verifier fixtures resolve against the seeds folder
    )
    reported = GRPOJobResult.from_metadata(  # raises, naming the key, when the job's result lacks a field
        {
            name: getattr(entry, "value", entry)
            for name, entry in (invocation.get_materialize_result().metadata or {}).items()
        }
    )
    return reported, step_metrics(invocation.get_custom_messages())


def _grpo_metadata(
    manifest: pd.DataFrame, reported: GRPOJobResult, steps: list[dict[str, Any]], job_config: str, split_rows: int
) -> dict[str, Any]:
    """grpo_checkpoint's metadata: the run's checkpoint, numbers and lineage, its reward curve and measurements."""
    return {
        "checkpoint": dg.MetadataValue.path(str(manifest.loc[0, "checkpoint"])),
        "start_model": str(manifest.loc[0, "start_model"]),
        "steps": reported.steps,
        "train_rows": reported.train_rows,
        "filtered_rows": reported.filtered_rows,
        "train_tasks_rows": split_rows,  # the split it was trained from (the corpus_growth sensor reads it)
        "final_reward_mean": reported.final_reward_mean,
        "reward_means": dg.MetadataValue.json(reported.reward_means),
        "verifier_versions": dg.MetadataValue.json(reported.verifier_versions),
        "resumed_from": reported.resumed_from or "",
        "train_seconds": dg.MetadataValue.float(reported.train_seconds),
        # None when train_tasks was never materialized here (written by hand, as tests do).
        "train_tasks_run_id": (manifest.loc[0, "data_versions"].get("train_tasks") or {}).get("run_id"),
        "manifest": dg.MetadataValue.path(str(manifest.loc[0, "manifest"])),
        "split_plan": int(manifest.loc[0, "split_seq"]),
        "split_epoch": int(manifest.loc[0, "split_epoch"]),
        "job_config": dg.MetadataValue.path(job_config),
        "reward_curve": _reward_curve(steps),
        "groups_with_reward_spread": dg.MetadataValue.float(reward_spread(steps) or 0.0),
        # The episode tasks' rollouts (training.grpo_episodes): how they ended and the calls they made.
        "episode_end_reasons": dg.MetadataValue.json(reported.episode_end_reasons),
        "episode_tool_calls": reported.episode_tool_calls,
        # What the run measured, for the plan's calibration (`budget_calibration`): TRL's token count and
        # mean completion length over the logged steps.
        "measured": dg.MetadataValue.json(asdict(measured_run(reported.steps, reported.train_seconds, steps))),
        **tracking_metadata(reported.tracked),
    }


def _reward_curve(steps: list[dict[str, Any]]) -> dg.MetadataValue:
    keys = [key for key in PLOTTED_METRICS if any(m.get(key) is not None for m in steps)]
    keys += sorted({k for m in steps for k in m if k.startswith("rewards/") and k.endswith("/mean")})
    return line_chart(
        [m.get("step", i) for i, m in enumerate(steps)],
        {key: [m.get(key) for m in steps] for key in keys},
        title="GRPO rewards per step",
        xlabel="step",
        ylabel="value",
    )


def _pairs_metadata(
    pairs: pd.DataFrame,
    built: dict[PairSplit, PreferencePairs],
    exported: dict[PairSplit, ExportedSplit],
    storage: StorageRoot,
    *,
    rollouts: dict[PairSplit, int],
    tasks: list[dict[str, Any]],
    max_pairs_per_task: int,
) -> dict[str, Any]:
    """preference_pairs' metadata: the rollouts and pairs of each split, what became of the rest, the exports."""
    texts = pairs.assign(
        chosen_text=[side_text(side) for side in pairs["chosen"]],
        rejected_text=[side_text(side) for side in pairs["rejected"]],
    )
    return {
        # 0 when difficulty_profile is switched off: then there is nothing to make training pairs from.
        "train_rollouts": rollouts["train"],
        "eval_rollouts": rollouts["eval"],
        # Pairs whose sides are multi-turn episodes (their `turns`), not single completions.
        "episode_pairs": episode_pairs(pairs, tasks),
        **{f"{split}_pairs": len(part.pairs) for split, part in built.items()},
        **{f"{split}_tasks_with_pairs": part.tasks_with_pairs for split, part in built.items()},
        "max_pairs_per_task": max_pairs_per_task,
        "pairs_by_family": dg.MetadataValue.md(
            markdown_table(pairs_by_family(pairs), ["split", "source", "family", "pairs", "tasks"])
        ),
        "task_outcomes": dg.MetadataValue.md(markdown_table(outcomes_by_split(built), ["split", "outcome", "tasks"])),
        "dropped_samples": dg.MetadataValue.json({split: dict(part.dropped) for split, part in built.items()}),
        **{
            f"export_{split}_{kind}": dg.MetadataValue.path(storage.location(EXPORT_FOLDER, path.name))
            for split, e in exported.items()
            for kind, path in (("parquet", e.parquet), ("jsonl", e.jsonl))
        },
        "preview": preview(texts, ("split", "task_id", "family", "chosen_text", "rejected_text", "rejected_reason")),
    }


def _record_checkpoint(
    context: dg.AssetExecutionContext,
    storage: StorageRoot,
    run: tuple[str, str, str],
    trained: SFTResult | GRPOJobResult,
    *,
    checkpoint: str,
    start: str,
    base: str,
    tasks: list[Mapping[str, Any]],
    config: dict[str, Any],
) -> pd.DataFrame:
    """Store a trained checkpoint's manifest for good (`curation.manifests`); returns it as the asset's row.

    The manifest is named as its run folder `(TRAINING_FOLDER, stage, digest)`: `<stage>-<digest>`. It names the
    split plan in force (the ledger's latest: the one `train_tasks` was made under) and the run of each input the
    stage read (`MANIFEST_INPUTS`), so lineage questions stay answerable after the tables are replaced.
    """
    _, stage, digest = run
    state = storage.split_ledger().state()
    versions = {}
    for asset in MANIFEST_INPUTS[stage]:
        event = context.instance.get_latest_materialization_event(dg.AssetKey(asset))
        if event is not None:
            versions[asset] = {"run_id": event.run_id, "data_version": (event.tags or {}).get(DATA_VERSION_TAG)}
    manifest = CheckpointManifest(
        name=f"{stage}-{digest}",
        stage=stage,
        checkpoint=checkpoint,
        start_model=start,
        base_model=base,
        task_ids=sorted(t["task_id"] for t in tasks),
        split_seq=state.seq,
        split_epoch=state.epoch,
        split_plan_id=state.plan_id,
        run_id=context.run.run_id,
        data_versions=versions,
        verifier_versions=trained.verifier_versions if isinstance(trained, GRPOJobResult) else {},
        config=config,
    )
    with storage.folder(CHECKPOINTS_FOLDER) as folder:
        path = write_manifest(folder, manifest, tasks)
        stored = storage.location(CHECKPOINTS_FOLDER, *path.relative_to(folder).parts)
    row = {
        **asdict(manifest),
        "trained": True,
        "manifest": stored,
        "steps": trained.steps,
        "train_seconds": trained.train_seconds,
    }
    return pd.DataFrame([row], columns=MANIFEST_COLUMNS)


def _stored(storage: StorageRoot, run: tuple[str, ...], working: Path, path: str | Path) -> str:
    """Where `path`, a file in the working copy `working` of run folder `run`, is kept: its `storage.location`."""
    return storage.location(*run, *Path(path).relative_to(working).parts)


def _no_warm_up(start: str, base: str, reason: str) -> dg.MaterializeResult[pd.DataFrame]:
    metadata = {"trained": False, "checkpoint": start, "skipped_because": reason}
    return dg.MaterializeResult(value=_untrained("sft", start, base), metadata=metadata)


def _no_grpo(
    context: dg.AssetExecutionContext, sft_checkpoint: pd.DataFrame, train_tasks: pd.DataFrame, profile: pd.DataFrame
) -> dg.MaterializeResult[pd.DataFrame]:
    """grpo_checkpoint with no task in the GRPO set: the starting policy passed on untrained, as `_no_warm_up`
    passes the base model on, with a warning that says why and what to change."""
    start = str(sft_checkpoint.loc[0, "checkpoint"])
    reason = empty_grpo_set_reason(train_tasks, profile)
    context.log.warning(
        f"GRPO skipped: {reason}; checkpoint_eval weighs the starting policy {start} as it is. For tasks within its "
        "reach, profile more samples (difficulty_k) or more tasks per family (difficulty_max_per_family), set "
        "grpo_unprofiled=True, add easier tasks, or set difficulty_profile=False"
    )
    metadata = {
        "trained": False,
        "checkpoint": start,
        "skipped_because": reason,
        # The split it had (the corpus_growth sensor waits for it to grow before trying again).
        "train_tasks_rows": len(train_tasks),
    }
    row = _untrained("grpo", start, str(sft_checkpoint.loc[0, "base_model"]))
    return dg.MaterializeResult(value=row.assign(task_ids=[[]]), metadata=metadata)  # trained on no task


def _families(families: Iterable[str]) -> str:
    return ", ".join(sorted(set(families)))


def _untrained(stage: str, start: str, base: str) -> pd.DataFrame:
    """A training asset's row when it trains nothing: `start` passed on as its checkpoint (no manifest is stored)."""
    row = {"stage": stage, "trained": False, "checkpoint": start, "start_model": start, "base_model": base}
    return pd.DataFrame([row], columns=MANIFEST_COLUMNS)


def _failed(failures: list[AuditCheck]) -> str:
    """The failed checks' lines, for the check result's description."""
    return "; ".join(check.message for check in failures) or "failed"


def build_corpus_growth(job: dg.JobDefinition, growth: float | None) -> dg.SensorDefinition:
    """The `corpus_growth` sensor: runs `job` (training, then the gate) when `train_tasks` has grown by `growth`
    (a fraction) since the split the last GRPO checkpoint was trained from, or when there is no checkpoint yet.

    It starts switched on when `growth` is given (`SEEDWHEEL_RETRAIN_GROWTH`); otherwise it is off, training
    runs on demand, and switching it on in the UI uses +20%. The rule is `training.retrain.retrain_decision`. Each
    `train_tasks` materialization triggers at most one run (the run key is its event id), so a tick that repeats,
    or a split that has not changed, never trains twice.
    """
    threshold = DEFAULT_RETRAIN_GROWTH if growth is None else growth

    @dg.sensor(
        name="corpus_growth",
        job=job,
        minimum_interval_seconds=300,
        default_status=dg.DefaultSensorStatus.STOPPED if growth is None else dg.DefaultSensorStatus.RUNNING,
        description=f"Train and gate again when train_tasks has grown by {threshold:.0%} since the last checkpoint.",
    )
    def corpus_growth(context: dg.SensorEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        [split] = context.instance.fetch_materializations(dg.AssetKey("train_tasks"), limit=1).records or [None]
        if split is None:
            return dg.SkipReason("no train_tasks yet: the regeneration makes them")
        rows = int(split.asset_materialization.metadata["rows"].value)
        [last] = context.instance.fetch_materializations(dg.AssetKey("grpo_checkpoint"), limit=1).records or [None]
        entry = None if last is None else last.asset_materialization.metadata.get("train_tasks_rows")
        decision = retrain_decision(rows, None if entry is None else int(entry.value), threshold)
        if not decision.train:
            return dg.SkipReason(decision.reason)
        context.log.info(decision.reason)
        return dg.RunRequest(run_key=f"train_tasks:{split.storage_id}", tags={"seedwheel/trigger": decision.reason})

    return corpus_growth
