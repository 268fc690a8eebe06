"""The split assets across nights: sides stick, checkpoints' training sets stay out of eval, the index rule."""

from core.tables import frame_from_records, read_table, write_table
from curation.curate import dedup_key
from curation.dedup import DedupIndex, MinHashConfig
from curation.manifests import CheckpointManifest, write_manifest
from curation.split_ledger import SplitLedger
from curation.splits import EVAL, task_roots
from generators.base import derive_task
from generators.rewrite import CHECKS_VERSION
from pipeline.runs import materialize
from resources import CHECKPOINTS_FOLDER, SPLITS_FOLDER
from tests.assets.test_curation import judged

SPLIT = "train_tasks"
ACCEPTED_ONLY = {"judge": {"use_labels": "accepted"}}


def split(settings, tasks: list[dict], resources=None):
    write_table(frame_from_records(tasks), settings.home / "judged_tasks.parquet")
    summary = materialize(settings, SPLIT, resources=resources)
    assert summary.success, summary.failures
    return summary


def sides_now(settings) -> dict[str, str]:
    sides = {}
    for name in ("train", "eval"):
        table = read_table(settings.home / f"{name}_tasks.parquet")
        sides.update(dict.fromkeys(task_roots(table), name))
    return sides


def test_roots_keep_their_side_as_nights_add_roots(settings, seed_records):
    half = len(seed_records) // 2
    first = split(settings, judged(seed_records[:half]))
    before = sides_now(settings)
    second = split(settings, judged(seed_records))
    after = sides_now(settings)
    assert {root: after[root] for root in before} == before
    numbers = [next(a for a in s.assets if a.key == SPLIT).metadata for s in (first, second)]
    assert [n["split_plan"] for n in numbers] == [1, 2]
    assert numbers[1]["new_roots"] == len(after) - len(before) > 0
    assert SplitLedger(settings.home / SPLITS_FOLDER).state().sides == after


def test_an_eval_task_a_checkpoint_trained_on_blocks_training(settings, seed_records):
    split(settings, judged(seed_records))
    eval_tasks = read_table(settings.home / "eval_tasks.parquet").to_dict(orient="records")
    leaked = eval_tasks[0]
    # A checkpoint that trained on it (say, before the ledger was restored from an old backup).
    manifest = CheckpointManifest(
        name="grpo-0123",
        stage="grpo",
        checkpoint="/models/old",
        start_model="base",
        base_model="base",
        task_ids=[leaked["task_id"]],
        split_seq=1,
        split_epoch=0,
        split_plan_id="x",
        run_id="old-run",
    )
    write_manifest(settings.home / CHECKPOINTS_FOLDER, manifest, [leaked])
    summary = materialize(settings, SPLIT)
    assert ("no_eval_contamination", False, "ERROR") in summary.checks
    numbers = summary.check_metadata["no_eval_contamination"]
    assert numbers["checkpoint_leaks"] >= 1 and "grpo-0123" in numbers["offenders"]


def test_the_dedup_index_learns_only_what_the_splits_keep(settings, seed_records):
    tasks = judged(seed_records)
    rejected = tasks[0] | {"judge_verdict": "reject"}
    split(settings, [rejected, *tasks[1:]], resources=ACCEPTED_ONLY)
    config = MinHashConfig()
    index = DedupIndex.open(settings.home / "dedup_index" / config.name, config)
    indexed = set(index.keys)
    assert dedup_key(rejected) not in indexed  # a judge-rejected task never marks a later near-copy
    assert {dedup_key(t) for t in tasks[1:]} <= indexed
    assert len(index) == len(tasks) - 1
    assert EVAL in sides_now(settings).values()


def rewrite_of(parent: dict, text: str, checks: str) -> dict:
    """An `llm_rewrite` variant of `parent`'s question, recorded as having passed the rewrite checks `checks`."""
    params = {"kind": "paraphrase", "sample": 0, "model": "m", "template_version": "rewrite-paraphrase-v1"}
    return derive_task(
        parent,
        prompt=[*parent["prompt"][:-1], {"role": "user", "content": text}],
        verifier_params=parent["verifier"]["params"],
        reference=parent["reference"],
        generator={"name": "llm_rewrite", "version": 1, "params": {**params, "checks": checks}},
    )


def test_llm_text_no_current_check_or_judge_in_use_vouches_for_is_held_back_and_shown(settings, seed_records):
    parent = seed_records[0]
    question = parent["prompt"][-1]["content"]
    vouched = rewrite_of(parent, f"Put another way: {question}", CHECKS_VERSION)
    unvouched = rewrite_of(parent, "Um, um, um, um, um, um, um, um, um", "rewrite-checks-v1")  # made before them
    # The quickstart's judge labels are shown, not used: its acceptance vouches for nothing.
    summary = split(settings, judged([*seed_records, vouched, unvouched]))
    kept = {t for name in ("train", "eval") for t in read_table(settings.home / f"{name}_tasks.parquet")["task_id"]}
    assert vouched["task_id"] in kept and unvouched["task_id"] not in kept
    assert len(kept) == len(seed_records) + 1
    numbers = next(a for a in summary.assets if a.key == SPLIT).metadata
    assert numbers["held_back"] == 1
    assert unvouched["task_id"] in numbers["held_back_preview"] and "rewrite-checks-v1" in numbers["held_back_reasons"]
    assert "| checks | 1 |" in numbers["vouched_by"] and f"| not_llm | {len(seed_records)} |" in numbers["vouched_by"]
    # Where the judge's labels are in use (it passed its calibration), its acceptance vouches.
    split(settings, judged([*seed_records, vouched, unvouched]), resources=ACCEPTED_ONLY)
    kept = {t for name in ("train", "eval") for t in read_table(settings.home / f"{name}_tasks.parquet")["task_id"]}
    assert unvouched["task_id"] in kept


def test_a_judge_below_its_floors_neither_filters_nor_vouches_and_the_run_completes(settings, seed_records):
    parent = seed_records[0]
    unvouched = rewrite_of(parent, "Um, um, um, um, um, um, um, um, um", "rewrite-checks-v1")
    rejected = judged([seed_records[1]], calibrated=False)[0] | {"judge_verdict": "reject"}
    tasks = [*judged([parent, *seed_records[2:], unvouched], calibrated=False), rejected]
    summary = split(settings, tasks, resources=ACCEPTED_ONLY)
    kept = {t for name in ("train", "eval") for t in read_table(settings.home / f"{name}_tasks.parquet")["task_id"]}
    assert rejected["task_id"] in kept  # an uncalibrated judge's reject does not filter
    assert unvouched["task_id"] not in kept  # and its accept does not vouch: the LLM text is held back
    numbers = next(a for a in summary.assets if a.key == SPLIT).metadata
    assert numbers["judge_labels_in_use"] is False and numbers["held_back"] == 1
