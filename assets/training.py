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

import hashlib
import sys
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd

from assets import groups
from assets.metadata import count_table, markdown_table, preview
from assets.plots import bar_chart, line_chart
from curation.manifests import CheckpointManifest, write_manifest
from curation.splits import first_per_family
from llm import tether
from pipeline.resources import (
    CHECKPOINTS_FOLDER,
    EXPORT_FOLDER,
    TRAINING_FOLDER,
    SeedRepository,
    StorageRoot,
    TrainingPolicy,
)
from training.budget import measured_run
from training.difficulty import difficulty_label, in_grpo_set, rollouts_by_task, solved_counts
from training.episodes import EPISODE_FIELDS, PlayedEpisodesError, play_and_score, sample_episodes
from training.evaluation import is_episode
from training.grpo import reward_spread
from training.grpo_job import METRICS_MESSAGE_KIND, GRPOJobConfig, GRPOJobResult
from training.preferences import (
    DEFAULT_MAX_PAIRS_PER_TASK,
    PAIR_COLUMNS,
    build_preference_pairs,
    export_pairs,
    side_text,
)
from training.retrain import DEFAULT_RETRAIN_GROWTH, retrain_decision
from training.reward_audit import AuditCheck, audit_reward, load_labelled
from validators.export import export_split
from validators.rewards import build_reward_funcs
from validators.seeds import AUDIT_DIR
from validators.tables import atomic_write, frame_from_records, records_from_frame
from validators.tasks import TASK_FIELDS, canonical_json

REWARD_AUDIT_FILE = Path(AUDIT_DIR, "reward_audit.jsonl")
# Columns of a checkpoint manifest (sft_checkpoint, grpo_checkpoint): one row per materialization.
MANIFEST_COLUMNS = (
    "name", "stage", "trained", "checkpoint", "start_model", "base_model", "task_ids", "split_seq", "split_epoch",
    "split_plan_id", "run_id", "data_versions", "steps", "train_seconds", "config", "verifier_versions", "manifest",
)  # fmt: skip
DISAGREEMENT_COLUMNS = ("id", "family", "human_accept", "score", "human_reason")
DATA_VERSION_TAG = "dagster/data_version"  # the tag Dagster stores a materialization's data version under
PLOTTED_METRICS = ("reward", "reward_std", "frac_reward_zero_std", "kl")
# What difficulty_profile keeps of each scored sample (its `rollouts` column); an episode's messages and end, for
# preference_pairs (None for a single-turn sample).
ROLLOUT_FIELDS = ("sample", "completion", "passed", "score", "reason", "turns", "end_reason")


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
    labelled = load_labelled(seeds.folder / REWARD_AUDIT_FILE, context=verify_context)
    tasks = records_from_frame(train_tasks[list(TASK_FIELDS)])
    audit = audit_reward(funcs, weights, tasks, labelled, policy=training.audit_policy(), context=verify_context)
    for check in audit.checks:
        (context.log.info if check.passed else context.log.warning)(f"reward audit: {check.message}")
    rows = pd.DataFrame(audit.rows)
    disagreements = rows[rows["agree"].eq(False)] if "agree" in rows else rows
    return dg.MaterializeResult(
        value=rows,
        metadata={
            **audit.numbers,
            "labelled_rows": len(labelled),
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
                },
            )
        ],
    )


@dg.asset(group_name=groups.TRAINING, deps=["reward_audit"], pool="gpu")
def sft_checkpoint(
    context: dg.AssetExecutionContext,
    train_tasks: pd.DataFrame,
    seeds: SeedRepository,
    training: TrainingPolicy,
    storage: StorageRoot,
) -> dg.MaterializeResult[pd.DataFrame]:
    """The policy GRPO starts from: the base model after an SFT warm-up on the training references (or as is)."""
    from training.sft import EXAMPLES_VERSION, run_sft

    base = training.model()
    families = training.sft_families
    chosen = train_tasks if families is None else train_tasks[train_tasks["family"].isin(families)]
    if not training.sft:
        return _no_warm_up(base, "sft=False")
    if chosen.empty:  # none of sft_families is in this split: a night without them still trains
        reason = f"no training task of sft_families {families}"
        context.log.warning(
            f"SFT skipped: {reason} (the split has {_families(train_tasks)}); GRPO starts from the base"
        )
        return _no_warm_up(base, reason)
    tasks = records_from_frame(chosen[list(TASK_FIELDS)])
    settings = training.sft_settings()
    # The run folder and manifest are named by a digest of this dict and of how the examples are built: a field
    # added to SFTSettings, or a new EXAMPLES_VERSION, renames them.
    config = asdict(settings)
    digest = _digest(base, [t["task_id"] for t in tasks], {**config, "examples": EXAMPLES_VERSION})
    run = (TRAINING_FOLDER, "sft", digest)
    history: list[dict[str, Any]] = []

    def on_metrics(metrics: dict[str, Any]) -> None:
        history.append(metrics)
        if "loss" in metrics:
            context.log.info(f"SFT step {metrics.get('step')}: loss {metrics['loss']:.4g}")

    with storage.folder(*run) as output_dir:
        result = run_sft(
            storage.model_dir(base),
            tasks,
            output_dir,
            settings=settings,
            on_metrics=on_metrics,
            context=seeds.verify_context(),  # episode references are played in their environments
        )
        checkpoint = _stored(storage, run, output_dir, result.checkpoint_dir)
    manifest = _record_checkpoint(  # once the run folder is committed: the manifest names a checkpoint that exists
        context,
        storage,
        f"sft-{digest}",
        inputs=("train_tasks",),
        checkpoint=checkpoint,
        start=base,
        base=base,
        tasks=[t for t in tasks if t.get("reference")],  # sft_examples skips tasks without one
        steps=result.steps,
        seconds=result.train_seconds,
        config=config,
    )
    losses = [m for m in history if "loss" in m]
    return dg.MaterializeResult(
        value=manifest,
        metadata={
            "trained": True,
            "checkpoint": dg.MetadataValue.path(checkpoint),
            "manifest": dg.MetadataValue.path(str(manifest.loc[0, "manifest"])),
            "split_plan": int(manifest.loc[0, "split_seq"]),
            "base_model": base,
            "steps": result.steps,
            "train_rows": result.train_rows,
            "families": _families(chosen),
            # Of them, episodes imitated turn by turn (their references played in their environments).
            "episode_rows": sum(is_episode(t) for t in tasks if t.get("reference")),
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
        },
    )


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
    ids = train_tasks[["task_id", "family"]].reset_index(drop=True)
    if not training.difficulty_profile:
        profile = ids.assign(
            solved=None, samples=0, label="not_profiled", in_grpo_set=True, policy=None, rollouts=None
        )
        return dg.MaterializeResult(
            value=profile,
            metadata={"enabled": False, "rows": len(profile), "in_grpo_set": len(profile)},
        )
    policy_model = str(sft_checkpoint.loc[0, "checkpoint"])
    k = training.difficulty_k
    profiled = _profiled(records_from_frame(train_tasks[list(TASK_FIELDS)]), training)
    episode_tasks = sum(is_episode(task) for task in profiled)
    # Episode tasks are scored by the episodes the `episodes` asset played: the same policy, k and selection. A
    # table from another policy fails here rather than being played again: `episodes` is upstream in every run
    # that materializes both, so a mismatch means it is stale (a new sft_checkpoint without it), and playing here
    # would repeat the slowest sampling and leave two sets of rollouts for one policy. The k and the tasks are
    # checked by `play_and_score`.
    strangers = sorted(set(episodes["model"]) - {policy_model}) if episode_tasks else []
    if strangers:
        raise ValueError(
            f"episodes were played by {strangers[:2]}, not by the starting policy {policy_model} that "
            "difficulty_profile profiles: materialize episodes again with this sft_checkpoint (select both, e.g. "
            "`key:episodes or key:difficulty_profile`)"
        )
    # And as this profile samples: a table played with another length, temperature or turn cap measures another
    # pass rate. A table from before the column was written says nothing, so it is played again too.
    sampling = training.episode_sampling()
    recorded = episodes["sampling"] if "sampling" in episodes else pd.Series(None, index=episodes.index, dtype=object)
    played_with = set(recorded.fillna("not recorded").astype(str))
    if episode_tasks and played_with - {sampling}:
        raise ValueError(
            f"episodes were played with {sorted(played_with - {sampling})[0]}, not with this profile's {sampling}: "
            "materialize episodes again with these settings (select both, e.g. `key:episodes or "
            "key:difficulty_profile`)"
        )
    context.log.info(
        f"sampling {k} completions for each of {len(profiled) - episode_tasks} training tasks with {policy_model}; "
        f"{episode_tasks} episode tasks from `episodes`"
    )
    try:
        sampled = play_and_score(
            storage.model_dir(policy_model),
            profiled,
            k=k,
            max_new_tokens=training.difficulty_max_new_tokens,
            temperature=training.difficulty_temperature,
            batch_size=training.difficulty_batch_size,
            context=seeds.verify_context(),
            played=records_from_frame(episodes),
        )
    except PlayedEpisodesError as exc:  # the message says it all, with the fix; no chain to read through
        raise ValueError(
            f"{exc}. The episodes table does not match this profile (another difficulty_k or "
            "difficulty_max_per_family, or another train_tasks): materialize episodes again with it"
        ) from None
    solved = solved_counts(sampled.passed, ids["task_id"])
    labels = [difficulty_label(n, k) for n in solved]
    # The scored samples themselves, kept for preference_pairs.
    rollouts = rollouts_by_task(sampled.rows, ROLLOUT_FIELDS)
    profile = ids.assign(
        solved=pd.Series(solved, dtype=object),
        samples=[0 if n is None else k for n in solved],
        label=labels,
        in_grpo_set=[in_grpo_set(label, grpo_unprofiled=training.grpo_unprofiled) for label in labels],
        policy=policy_model,
        rollouts=pd.Series([rollouts.get(task_id) for task_id in ids["task_id"]], dtype=object),
    )
    by_family = pd.crosstab(profile["family"], profile["label"]).reset_index()
    distribution = Counter(solved)
    return dg.MaterializeResult(
        value=profile,
        metadata={
            "enabled": True,
            "policy": policy_model,
            "rows": len(profile),
            "profiled_tasks": len(profiled),
            # Scored from `episodes`' multi-turn rollouts; the rest sampled here in one turn.
            "profiled_episode_tasks": episode_tasks,
            "in_grpo_set": int(profile["in_grpo_set"].sum()),
            "labels": count_table(profile["label"], "label"),
            "labels_by_family": dg.MetadataValue.md(
                markdown_table(by_family.to_dict(orient="records"), list(by_family.columns))
            ),
            "solved_of_k": bar_chart(
                {"tasks": {str(n): distribution.get(n, 0) for n in range(k + 1)}},
                title=f"completions solved out of {k} per task",
                xlabel="solved",
                ylabel="tasks",
            ),
        },
    )


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
    tasks = [task for task in records if is_episode(task)]
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
    # `model` names the checkpoint as sft_checkpoint does (a URL on an object store), not the local copy it was
    # loaded from: difficulty_profile checks it is the policy it profiles.
    played = frame_from_records([{**row, "model": policy_model} for row in rows], EPISODE_FIELDS)
    environments = {task["task_id"]: task["verifier"]["params"]["environment"] for task in chosen}
    played = played.assign(
        environment=[environments[task_id] for task_id in played["task_id"]], sampling=training.episode_sampling()
    )
    rates = played.groupby("environment")["passed"].agg(["size", "mean"]).reset_index() if rows else None
    return dg.MaterializeResult(
        value=played,
        metadata={
            "policy": policy_model,
            "tasks": len(chosen),
            "episode_tasks_in_split": len(tasks),
            "episodes": len(played),
            "pass_rate": dg.MetadataValue.float(float(played["passed"].mean()) if rows else 0.0),
            "mean_tool_calls": dg.MetadataValue.float(float(played["tool_calls"].mean()) if rows else 0.0),
            "end_reasons": count_table(played["end_reason"], "end_reason"),
            "fail_reasons": count_table(played.loc[~played["passed"].astype(bool), "reason"], "reason"),
            "pass_rate_by_environment": dg.MetadataValue.md(
                markdown_table(
                    [
                        {"environment": r["environment"], "episodes": r["size"], "pass_rate": f"{r['mean']:.2f}"}
                        for r in (rates.to_dict(orient="records") if rates is not None else [])
                    ],
                    ["environment", "episodes", "pass_rate"],
                )
            ),
            "preview": preview(played, ("task_id", "sample", "end_reason", "tool_calls", "passed", "completion")),
        },
    )


@dg.asset(group_name=groups.TRAINING, pool="gpu")
def grpo_checkpoint(
    context: dg.AssetExecutionContext,
    train_tasks: pd.DataFrame,
    difficulty_profile: pd.DataFrame,
    sft_checkpoint: pd.DataFrame,
    training: TrainingPolicy,
    seeds: SeedRepository,
    storage: StorageRoot,
    pipes: dg.PipesSubprocessClient,
) -> dg.MaterializeResult[pd.DataFrame]:
    """GRPO with the registry's rewards, run by `python -m training.grpo_job` under Dagster Pipes.

    Step metrics stream back while it trains; the same job config runs under a Kubernetes/GPU launcher.
    """
    chosen = set(difficulty_profile.loc[difficulty_profile["in_grpo_set"].astype(bool), "task_id"])
    part = train_tasks[train_tasks["task_id"].isin(chosen)].reset_index(drop=True)
    if part.empty:
        raise ValueError(
            f"no training task is left for GRPO: difficulty_profile kept none of {len(train_tasks)} (the starting "
            "policy solves every profiled task always or never); add tasks within its reach, profile more "
            "(difficulty_max_per_family, difficulty_k), set grpo_unprofiled=True, or set difficulty_profile=False"
        )
    start = str(sft_checkpoint.loc[0, "checkpoint"])
    grpo = {
        **training.grpo,
        "reward_weights_by_verifier": training.reward_weights,
        "max_episode_turns": training.episode_max_turns,
    }
    task_ids = sorted(part["task_id"])
    digest = _digest(start, task_ids, {"runtime": training.runtime, **grpo})
    run = (TRAINING_FOLDER, "grpo", digest)
    with storage.folder(*run) as run_dir:
        exported = export_split(part, run_dir, "train")
        job = GRPOJobConfig(
            model_path=storage.model_dir(start),
            output_dir=str(run_dir / "output"),
            train_file=str(exported.parquet),
            runtime=training.runtime,
            grpo=grpo,
        )
        config_path = run_dir / "job.json"
        with atomic_write(config_path, "w") as handle:
            handle.write(job.to_json())
        context.log.info(f"GRPO on {len(part)} tasks from {start}; job config {config_path}")
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
        # Where each file stays once the folder is committed (on a local root, where it is now).
        checkpoint, output_dir, train_file, job_config = (
            _stored(storage, run, run_dir, path)
            for path in (reported.checkpoint_dir, job.output_dir, job.train_file, config_path)
        )
    steps = [m for m in invocation.get_custom_messages() if m.get("kind") == METRICS_MESSAGE_KIND and "reward" in m]
    filtered = set(reported.filtered_task_ids)
    stored_job = replace(job, model_path=start, output_dir=output_dir, train_file=train_file)
    manifest = _record_checkpoint(
        context,
        storage,
        f"grpo-{digest}",
        inputs=("train_tasks", "difficulty_profile", "sft_checkpoint"),
        checkpoint=checkpoint,
        start=start,
        base=str(sft_checkpoint.loc[0, "base_model"]),
        tasks=[t for t in records_from_frame(part[list(TASK_FIELDS)]) if t["task_id"] not in filtered],
        steps=reported.steps,
        seconds=reported.train_seconds,
        config=stored_job.to_mapping(),
        verifier_versions=reported.verifier_versions,
    )
    return dg.MaterializeResult(
        value=manifest,
        metadata={
            "checkpoint": dg.MetadataValue.path(checkpoint),
            "start_model": start,
            "steps": reported.steps,
            "train_rows": reported.train_rows,
            "filtered_rows": reported.filtered_rows,
            "train_tasks_rows": len(train_tasks),  # the split it was trained from (the corpus_growth sensor reads it)
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
            # The episode tasks' rollouts (training.episode_rollouts): how they ended and the calls they made.
            "episode_end_reasons": dg.MetadataValue.json(reported.episode_end_reasons),
            "episode_tool_calls": reported.episode_tool_calls,
            # What the run measured, for the plan's calibration (`budget_calibration`): TRL's token count and
            # mean completion length over the logged steps.
            "measured": dg.MetadataValue.json(asdict(measured_run(reported.steps, reported.train_seconds, steps))),
        },
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
    profiled = records_from_frame(difficulty_profile.reindex(columns=["task_id", "policy", "rollouts"]))
    rollouts = [
        {**rollout, "task_id": row["task_id"], "model": row["policy"]}
        for row in profiled
        for rollout in row["rollouts"] or []
    ]
    built = {
        "train": build_preference_pairs(
            rollouts,
            train,
            split="train",
            source="difficulty_profile",
            held_out=set(eval_tasks["task_id"]),
            max_pairs_per_task=config.max_pairs_per_task,
        ),
        "eval": build_preference_pairs(
            records_from_frame(checkpoint_eval),
            held_out,
            split="eval",
            source="checkpoint_eval",
            max_pairs_per_task=config.max_pairs_per_task,
        ),
    }
    with storage.folder(EXPORT_FOLDER) as folder:
        exported = {split: export_pairs(part.pairs, folder, split) for split, part in built.items()}
    pairs = frame_from_records([pair for part in built.values() for pair in part.pairs], PAIR_COLUMNS)
    counts = pairs.groupby(["split", "source", "family"]).agg(pairs=("task_id", "size"), tasks=("task_id", "nunique"))
    outcomes = [
        {"split": split, "outcome": outcome, "tasks": n}
        for split, part in built.items()
        for outcome, n in sorted(Counter(part.outcomes.values()).items())
    ]
    texts = pairs.assign(
        chosen_text=[side_text(side) for side in pairs["chosen"]],
        rejected_text=[side_text(side) for side in pairs["rejected"]],
    )
    return dg.MaterializeResult(
        value=pairs,
        metadata={
            # 0 when difficulty_profile is switched off: then there is nothing to make training pairs from.
            "train_rollouts": len(rollouts),
            "eval_rollouts": len(checkpoint_eval),
            # Pairs whose sides are multi-turn episodes (their `turns`), not single completions.
            "episode_pairs": int(
                pairs["task_id"].isin({t["task_id"] for t in train + held_out if is_episode(t)}).sum()
            ),
            **{f"{split}_pairs": len(part.pairs) for split, part in built.items()},
            **{f"{split}_tasks_with_pairs": part.tasks_with_pairs for split, part in built.items()},
            "max_pairs_per_task": config.max_pairs_per_task,
            "pairs_by_family": dg.MetadataValue.md(
                markdown_table(
                    counts.reset_index().to_dict(orient="records"), ["split", "source", "family", "pairs", "tasks"]
                )
            ),
            "task_outcomes": dg.MetadataValue.md(markdown_table(outcomes, ["split", "outcome", "tasks"])),
            "dropped_samples": dg.MetadataValue.json({split: dict(part.dropped) for split, part in built.items()}),
            **{
                f"export_{split}_{kind}": dg.MetadataValue.path(storage.location(EXPORT_FOLDER, path.name))
                for split, e in exported.items()
                for kind, path in (("parquet", e.parquet), ("jsonl", e.jsonl))
            },
            "preview": preview(
                texts, ("split", "task_id", "family", "chosen_text", "rejected_text", "rejected_reason")
            ),
        },
    )


def _profiled(records: list[dict[str, Any]], training: TrainingPolicy) -> list[dict[str, Any]]:
    """The training tasks difficulty_profile profiles, in split order: the `difficulty_max_per_family` easiest of
    each family (`curation.splits.first_per_family`). `episodes` plays the episode tasks among them."""
    return [records[i] for i in first_per_family(records, training.difficulty_max_per_family)]


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


def _record_checkpoint(
    context: dg.AssetExecutionContext,
    storage: StorageRoot,
    name: str,
    *,
    inputs: tuple[str, ...],
    checkpoint: str,
    start: str,
    base: str,
    tasks: list[dict[str, Any]],
    steps: int,
    seconds: float,
    config: dict[str, Any],
    verifier_versions: dict[str, Any] | None = None,
) -> pd.DataFrame:
    """Store a trained checkpoint's manifest for good (`curation.manifests`); returns it as the asset's row.

    The manifest names the split plan in force (the ledger's latest: the one `train_tasks` was made under) and
    the run of each input it read, so lineage questions stay answerable after the tables are replaced.
    """
    state = storage.split_ledger().state()
    versions = {}
    for asset in inputs:
        event = context.instance.get_latest_materialization_event(dg.AssetKey(asset))
        if event is not None:
            versions[asset] = {"run_id": event.run_id, "data_version": (event.tags or {}).get(DATA_VERSION_TAG)}
    manifest = CheckpointManifest(
        name=name,
        stage=name.split("-", 1)[0],
        checkpoint=checkpoint,
        start_model=start,
        base_model=base,
        task_ids=sorted(t["task_id"] for t in tasks),
        split_seq=state.seq,
        split_epoch=state.epoch,
        split_plan_id=state.plan_id,
        run_id=context.run.run_id,
        data_versions=versions,
        verifier_versions=verifier_versions or {},
        config=config,
    )
    with storage.folder(CHECKPOINTS_FOLDER) as folder:
        path = write_manifest(folder, manifest, tasks)
        stored = storage.location(CHECKPOINTS_FOLDER, *path.relative_to(folder).parts)
    row = {**asdict(manifest), "trained": True, "manifest": stored, "steps": steps, "train_seconds": seconds}
    return pd.DataFrame([row], columns=MANIFEST_COLUMNS)


def _stored(storage: StorageRoot, run: tuple[str, ...], working: Path, path: str | Path) -> str:
    """Where `path`, a file in the working copy `working` of run folder `run`, is kept: its `storage.location`."""
    return storage.location(*run, *Path(path).relative_to(working).parts)


def _no_warm_up(base: str, reason: str) -> dg.MaterializeResult[pd.DataFrame]:
    metadata = {"trained": False, "checkpoint": base, "skipped_because": reason}
    return dg.MaterializeResult(value=_untrained(base), metadata=metadata)


def _families(tasks: pd.DataFrame) -> str:
    return ", ".join(sorted(set(tasks["family"])))


def _untrained(base: str) -> pd.DataFrame:
    """The SFT asset's row when SFT is off: the base model, trained on nothing (no manifest is stored)."""
    row = {"stage": "sft", "trained": False, "checkpoint": base, "start_model": base, "base_model": base}
    return pd.DataFrame([row], columns=MANIFEST_COLUMNS)


def _digest(model: str, task_ids: list[str], config: dict[str, Any]) -> str:
    """A name for a training directory: the same inputs give the same directory, so a rerun resumes there."""
    payload = canonical_json({"model": model, "tasks": sorted(task_ids), "config": config})
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


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
