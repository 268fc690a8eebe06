"""The code location loads, with every asset, check and job, as `dagster dev -w workspace.yaml` sees it."""

import os
import subprocess
import sys
from dataclasses import replace
from datetime import datetime

import dagster as dg
import pytest

from core.signals import dispositions_kept
from pipeline.definitions import build_definitions, defs
from pipeline.instance import EXCLUSIVE_TAG, open_instance
from tests.paths import REPO

ASSETS = {
    *("seed_tasks", "seed_rejects", "task_variants", "variant_rejects", "validated_tasks", "task_rejects"),
    *("deduplicated_tasks", "judge_calibration", "judged_tasks", "train_tasks", "eval_tasks"),
    *("reward_audit", "sft_checkpoint", "difficulty_profile", "grpo_checkpoint", "checkpoint_eval", "promotion"),
    *("training_budget", "budget_calibration", "episodes"),
    *(
        "failure_logs",
        "production_traffic",
        "failure_rates",
        "failure_rejects",
        "failure_tasks",
        "review_queue",
        "failure_eval",
        "preference_pairs",
    ),
}
CHECKS = {
    ("seed_rejects", "seed_files_clean"),
    ("judge_calibration", "judge_agreement"),
    ("validated_tasks", "family_validity_floor"),
    ("train_tasks", "no_eval_contamination"),
    ("reward_audit", "reward_sound"),
}
JOBS = {"flywheel_job", "regeneration_job", "training_job"}


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


def test_training_assets_share_the_gpu_pool(settings):
    graph = build_definitions(settings).resolve_asset_graph()
    pools = {key.to_user_string(): graph.get(key).pools for key in graph.get_all_asset_keys()}
    assert pools["grpo_checkpoint"] == pools["sft_checkpoint"] == {"gpu"}  # two trainings never share a GPU
    assert pools["seed_tasks"] == set()


def test_lazy_definitions_read_settings_at_load_time(monkeypatch, tmp_path):
    monkeypatch.setenv("SEEDWHEEL_HOME", str(tmp_path / "from-env"))
    loaded = dg.Definitions.merge(defs())
    io_manager = loaded.resources["io_manager"]
    assert io_manager.root == str(tmp_path / "from-env")


@pytest.mark.slow
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


def test_the_judge_gate_never_blocks(settings):
    # A judge below its floors loses its say in the splits (JudgePolicy.labels_in_use); the run goes on.
    for profile in ("quickstart", "production"):
        definitions = build_definitions(replace(settings, profile=profile))
        [spec] = [s for s in definitions.resolve_asset_graph().asset_check_keys if s.name == "judge_agreement"]
        assert definitions.resolve_asset_graph().get_check_spec(spec).blocking is False


def test_the_nightly_schedule_regenerates_data_without_training(settings):
    definitions = build_definitions(replace(settings, nightly_cron="30 3 * * *", timezone="Europe/Berlin"))
    schedule = definitions.resolve_schedule_def("nightly_regeneration")
    assert (schedule.cron_schedule, schedule.execution_timezone) == ("30 3 * * *", "Europe/Berlin")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED  # the quickstart: switched on in the UI
    with open_instance(settings) as instance:
        tick = datetime(2026, 12, 2, 3, 30)
        # As context managers: a context left open keeps the (then disposed) instance as Dagster's current one.
        with (
            dispositions_kept(),  # a tick rewrites the stop signals' handlers
            dg.build_schedule_context(instance=instance, scheduled_execution_time=tick) as context,
        ):
            [request] = schedule.evaluate_tick(context).run_requests
    job = definitions.resolve_job_def(schedule.job_name)
    keys = {key.to_user_string() for key in job.asset_layer.selected_asset_keys}
    assert {"seed_tasks", "judged_tasks", "train_tasks", "eval_tasks"} <= keys
    assert not keys & {"reward_audit", "sft_checkpoint", "grpo_checkpoint", "checkpoint_eval", "promotion"}
    assert {"failure_tasks", "failure_rates"} <= keys
    assert not keys & {"failure_logs", "production_traffic"}  # per-file partitions come from the sensor
    assert job.tags[EXCLUSIVE_TAG] == "regeneration"  # the run queue holds a second overlapping regeneration
    # Every tick starts a run (no run key that would de-duplicate a night away), tagged with its schedule.
    assert request.run_key is None
    assert request.tags["dagster/schedule_name"] == "nightly_regeneration"


def test_the_schedule_runs_by_default_in_production(settings):
    production = replace(settings, profile="production")
    schedule = build_definitions(production).resolve_schedule_def("nightly_regeneration")
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING


def test_the_instance_queues_exclusive_runs_and_limits_the_gpu_pool(settings):
    with open_instance(settings) as instance:
        config = instance.get_concurrency_config()
        assert config.pool_config.default_pool_limit == 1
        [limit] = config.run_queue_config.tag_concurrency_limits
        assert limit["key"] == EXCLUSIVE_TAG and limit["limit"] == 1


def _tick(sensor: dg.SensorDefinition, instance: dg.DagsterInstance) -> dg.RunRequest | dg.SkipReason:
    with dispositions_kept(), dg.build_sensor_context(instance=instance) as context:  # a tick rewrites them
        result = sensor.evaluate_tick(context)
    return result.run_requests[0] if result.run_requests else dg.SkipReason(result.skip_message)


def _materialized(instance: dg.DagsterInstance, asset: str, **metadata: int) -> None:
    instance.report_runless_asset_event(dg.AssetMaterialization(asset, metadata=metadata))


def test_training_follows_corpus_growth_when_a_policy_is_set(settings):
    definitions = build_definitions(replace(settings, retrain_growth=0.25))
    sensor = definitions.resolve_sensor_def("corpus_growth")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    job = definitions.resolve_job_def(sensor.job_name)
    assert job.tags[EXCLUSIVE_TAG] == "training"  # a second training waits in the queue
    keys = {key.to_user_string() for key in job.asset_layer.selected_asset_keys}
    assert {"reward_audit", "grpo_checkpoint", "checkpoint_eval", "promotion"} <= keys
    assert not keys & {"seed_tasks", "judged_tasks", "train_tasks"}  # trains on the stored split, regenerates nothing
    with open_instance(settings) as instance:
        assert "no train_tasks yet" in _tick(sensor, instance).skip_message
        _materialized(instance, "train_tasks", rows=100)
        first = _tick(sensor, instance)  # no checkpoint yet: the first training
        assert isinstance(first, dg.RunRequest) and "no checkpoint" in first.tags["seedwheel/trigger"]
        assert _tick(sensor, instance).run_key == first.run_key  # the same split never trains twice
        _materialized(instance, "grpo_checkpoint", train_tasks_rows=100)
        _materialized(instance, "train_tasks", rows=124)  # +24%: not yet
        assert "training again at 125 (+25%)" in _tick(sensor, instance).skip_message
        _materialized(instance, "train_tasks", rows=125)
        grown = _tick(sensor, instance)
        assert grown.run_key != first.run_key
        assert grown.tags["seedwheel/trigger"] == "train_tasks grew from 100 to 125 rows since the last checkpoint"


def test_training_is_on_demand_unless_a_policy_is_set(settings):
    sensor = build_definitions(settings).resolve_sensor_def("corpus_growth")
    assert settings.retrain_growth is None and sensor.default_status == dg.DefaultSensorStatus.STOPPED
