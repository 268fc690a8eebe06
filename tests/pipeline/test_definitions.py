"""The code location loads, with every asset, check and job, as `dagster dev -w workspace.yaml` sees it."""

import os
import subprocess
import sys
from dataclasses import replace

import dagster as dg

from pipeline.definitions import build_definitions, defs
from pipeline.runs import open_instance
from tests.paths import REPO

ASSETS = {
    *("seed_tasks", "seed_rejects", "task_variants", "variant_rejects", "validated_tasks", "task_rejects"),
    *("deduplicated_tasks", "judge_calibration", "judged_tasks", "train_tasks", "eval_tasks"),
}
CHECKS = {
    ("seed_rejects", "seed_files_clean"),
    ("judge_calibration", "judge_agreement"),
    ("validated_tasks", "family_validity_floor"),
    ("train_tasks", "no_eval_contamination"),
}
JOBS = {"flywheel_job"}


def test_every_asset_check_and_job_is_present(settings):
    definitions = build_definitions(settings)
    graph = definitions.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} == ASSETS
    assert {(k.asset_key.to_user_string(), k.name) for k in graph.asset_check_keys} == CHECKS
    assert {job.name for job in definitions.resolve_all_job_defs()} >= JOBS


def test_every_asset_has_a_group_and_a_description(settings):
    graph = build_definitions(settings).resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.group_name != "default", key
        assert node.description, key


def test_lazy_definitions_read_settings_at_load_time(monkeypatch, tmp_path):
    monkeypatch.setenv("SEEDWHEEL_HOME", str(tmp_path / "from-env"))
    loaded = dg.Definitions.merge(defs())
    io_manager = loaded.resources["io_manager"]
    assert io_manager.root == str(tmp_path / "from-env")


def test_dagster_validates_the_workspace(settings):
    open_instance(settings).dispose()
    env = {**os.environ, **settings.environ()}
    dagster = os.path.join(os.path.dirname(sys.executable), "dagster")
    result = subprocess.run(
        [dagster, "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_judge_gate_blocks_only_in_production(settings):
    for profile, blocking in (("quickstart", False), ("production", True)):
        definitions = build_definitions(replace(settings, profile=profile))
        [spec] = [s for s in definitions.resolve_asset_graph().asset_check_keys if s.name == "judge_agreement"]
        assert definitions.resolve_asset_graph().get_check_spec(spec).blocking is blocking
