"""Four nights of regeneration on one storage root, each adding something, with the invariants checked after each.

Night 1: a first seed set, then a checkpoint trained on its train split (SFT on the tiny model: a real manifest).
Night 2: new seeds (a new family) and a production failure log with planted secrets and PII.
Night 3: an edited seed, whose task_id changes.
Night 4: a verifier version bump (sql_result), which must re-validate exactly its tasks.

After each night: no lineage root changed side; no eval task is in any checkpoint's manifest; no planted value is
stored anywhere; LLM calls and validations happen for new content only; and every input row is in a table or
in a rejects table. The real bundled model judges (one task per family), so the LLM calls are few.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field, replace

import pytest
import yaml

from core.tables import read_table, records_from_frame
from curation.manifests import load_manifests
from curation.split_ledger import SplitLedger
from curation.splits import task_roots
from pipeline.runs import RunSummary, materialize
from resources import CHECKPOINTS_FOLDER, SPLITS_FOLDER
from tests.assets.test_failures import assert_no_planted_value_kept, ingest, planted_log
from tests.paths import SEEDS, copy_seeds
from validators.registry import REGISTRY
from validators.seeds import AUDIT_DIR
from validators.tasks import TASK_FIELDS, canonical_json
from validators.verifiers.sql import SqlResult

pytestmark = pytest.mark.slow

REGENERATION = "group:seeds or group:failures or group:generation or group:curation or group:judging"
SMALL = {"plan": {"per_seed": 1}}
ARITHMETIC = "arithmetic/gsm8k_train_slice.jsonl"


class SqlResultBumped(SqlResult):
    """The SQL verifier after a fix that changes verdicts: its version goes up."""

    version = SqlResult.version + 1


@dataclass
class History:
    """What earlier nights did, to tell new content from old."""

    sides: dict[str, str] = field(default_factory=dict)
    validated: set[str] = field(default_factory=set)  # canonical records of checked variants and failure tasks
    seeds: set[str] = field(default_factory=set)  # canonical records of the valid seeds
    judged: set[str] = field(default_factory=set)  # task ids the judge scored


def night(settings, history: History, *, new_content: bool = True) -> RunSummary:
    summary = materialize(settings, REGENERATION, resources=SMALL)
    assert summary.success, summary.failures
    meta = {a.key: a.metadata for a in summary.assets}
    home = settings.home

    # 1. No root changed side: the ledger only grows, and the tables follow it.
    ledger = SplitLedger(home / SPLITS_FOLDER).state().sides
    assert {root: ledger[root] for root in history.sides} == history.sides
    for side in ("train", "eval"):
        table = read_table(home / f"{side}_tasks.parquet")
        assert {ledger[root] for root in task_roots(table)} <= {side}
    history.sides = ledger

    # 2. No eval task, nor its lineage root, is in any checkpoint's manifest.
    evaluation = read_table(home / "eval_tasks.parquet")
    eval_roots = set(task_roots(evaluation)) if len(evaluation) else set()
    for manifest in load_manifests(home / CHECKPOINTS_FOLDER):
        assert not set(manifest.task_ids) & set(evaluation["task_id"]), manifest.name
        trained = read_table(home / CHECKPOINTS_FOLDER / manifest.name / "tasks.parquet")
        assert not set(trained["root"]) & eval_roots, manifest.name
    assert ("no_eval_contamination", True, "passed") in summary.checks

    # 3. Nothing planted is stored anywhere the project keeps.
    assert_no_planted_value_kept(settings)

    # 4. Validation and LLM calls for new content only.
    checked = records_from_frame(read_table(home / "failure_tasks.parquet")) + records_from_frame(
        read_table(home / "task_variants.parquet")
    )
    records = {canonical_json({k: t[k] for k in TASK_FIELDS}) for t in checked}
    fresh = records - history.validated
    assert meta["validated_tasks"]["cache_misses"] == len(fresh), "validation redid unchanged tasks"
    history.validated |= records
    seeds = {
        canonical_json({k: t[k] for k in TASK_FIELDS})
        for t in records_from_frame(read_table(home / "seed_tasks.parquet"))
    }
    assert meta["seed_tasks"]["cache_misses"] == len(seeds - history.seeds), "seed checks redid unchanged seeds"
    history.seeds |= seeds
    judged = read_table(home / "judged_tasks.parquet")
    scored = set(judged.loc[judged["judge_verdict"] != "not_judged", "task_id"])
    new_judged = scored - history.judged
    assert meta["judged_tasks"]["llm_calls_made"] <= len(new_judged)
    history.judged |= scored
    if not new_content:
        assert meta["task_variants"]["llm_calls_made"] == 0 == meta["judged_tasks"]["llm_calls_made"]

    # 5. No row is lost: every input is in a table or in a rejects table with a reason.
    assert_rows_accounted(settings)
    return summary


def assert_rows_accounted(settings) -> None:
    home = settings.home

    def rows(name: str) -> int:
        return len(read_table(home / f"{name}.parquet"))

    records = 0
    for path in settings.seeds_dir.rglob("*"):
        if path.parent.name == AUDIT_DIR or path.suffix not in (".jsonl", ".yaml"):
            continue
        text = path.read_text(encoding="utf-8")
        records += len(text.splitlines()) if path.suffix == ".jsonl" else len(yaml.safe_load(text))
    assert rows("seed_tasks") + rows("seed_rejects") == records
    for stored in (home / "failure_logs").glob("*.parquet"):
        rejects = read_table(home / "failure_rejects" / stored.name)
        lines = len(read_table(stored)) + len(rejects)
        assert lines == sum(
            1 for line in (settings.home.parent / "logs" / stored.stem).read_text().splitlines() if line
        )
        assert rejects["reason"].astype(bool).all()
    assert rows("failure_tasks") + rows("task_variants") == rows("validated_tasks") - rows("seed_tasks") + rows(
        "task_rejects"
    )
    assert read_table(home / "task_rejects.parquet")["reason"].astype(bool).all()
    deduplicated = read_table(home / "deduplicated_tasks.parquet")
    assert len(deduplicated) == rows("validated_tasks")
    assert rows("judged_tasks") == int((~deduplicated["is_duplicate"].astype(bool)).sum())
    assert rows("train_tasks") + rows("eval_tasks") == rows("judged_tasks")  # the quickstart keeps every label


def test_four_nights_keep_every_invariant(settings, tmp_path, tiny_model_dir, monkeypatch):
    seeds = copy_seeds(tmp_path / "seeds", ["arithmetic"], audit=["arithmetic"])
    settings = replace(settings, seeds_dir=seeds)
    history = History()

    # Night 1, and a checkpoint trained on its split.
    first = night(settings, history)
    assert {a.key: a.metadata for a in first.assets}["judged_tasks"]["llm_calls_made"] > 0
    # The warm-up on every family of this arithmetic split (the quickstart's sft_families are others).
    training = {
        "training": {"base_model": str(tiny_model_dir), "sft_max_steps": 1, "sft_batch_size": 2, "sft_families": None}
    }
    trained = materialize(settings, "sft_checkpoint", resources=training)
    assert trained.success, trained.failures
    [manifest] = load_manifests(settings.home / CHECKPOINTS_FOLDER)
    assert manifest.split_seq == 1 and manifest.task_ids

    # An unchanged night costs nothing: no validation, no LLM call, no new root.
    quiet = night(settings, history, new_content=False)
    assert {a.key: a.metadata for a in quiet.assets}["train_tasks"]["new_roots"] == 0

    # Night 2: a new family of seeds and a failure log with planted values.
    shutil.copytree(SEEDS / "sql", seeds / "sql")
    log = planted_log(settings.home.parent / "logs" / "planted.jsonl")
    assert ingest(settings, log).exit_code == 0
    second = night(settings, history)
    assert {a.key: a.metadata for a in second.assets}["train_tasks"]["new_roots"] > 0

    # Night 3: a seed edited in place gets a new task_id; the old one leaves the tables, its side stays recorded.
    lines = (seeds / ARITHMETIC).read_text().splitlines()
    edited = json.loads(lines[0])
    edited["prompt"][-1]["content"] = edited["prompt"][-1]["content"].replace("friends", "classmates")
    (seeds / ARITHMETIC).write_text("\n".join([json.dumps(edited), *lines[1:]]) + "\n")
    night(settings, history)

    # Night 4: the SQL verifier's version goes up: exactly the SQL tasks are validated again.
    REGISTRY.names()  # the built-ins are loaded before the registry is copied
    monkeypatch.setattr(REGISTRY, "_verifiers", dict(REGISTRY._verifiers))
    REGISTRY.register(SqlResultBumped)
    fourth = night(settings, history)
    validated = {a.key: a.metadata for a in fourth.assets}["validated_tasks"]
    sql_checked = read_table(settings.home / "task_variants.parquet")["family"].eq("sql").sum()
    assert validated["cache_misses"] == sql_checked > 0
