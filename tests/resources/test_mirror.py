"""Each setting has one home: a resource's defaults are the library's, and a choice is offered, not typed."""

import dataclasses
from dataclasses import replace
from typing import Any, get_args

import dagster as dg
import pytest

from curation.dedup import MinHashConfig
from curation.splits import SplitConfig
from curation.validation_shards import ShardConfig
from judge import AcceptanceRule, CalibrationFloors, TokenPrices
from langmodels import EndpointConfig
from pipeline.definitions import build_definitions
from pipeline.profiles import PROFILES, profile_resources
from pipeline.settings import Profile
from resources import MIRRORS, CurationPolicy, JudgePolicy, LLMEndpoint, PromotionGate, TrainingPolicy
from training.grpo_job import GRPOJobConfig
from training.promotion import PromotionPolicy
from training.reward_audit import RewardAuditPolicy
from training.sft import SFTSettings


def _library_default(field):
    """A dataclass field's default, from its factory where it has one."""
    return field.default if field.default is not dataclasses.MISSING else field.default_factory()


def _plain(value: Any) -> Any:
    """A tuple default (a frozen dataclass's) and a list default (a launchpad field's) compare equal."""
    return list(value) if isinstance(value, tuple) else value


@pytest.mark.parametrize(
    ("resource", "mirror"), MIRRORS, ids=[f"{r.__name__}-{m.library.__name__}" for r, m in MIRRORS]
)
def test_a_mirrored_default_is_the_library_default(resource, mirror):
    library_fields = {field.name: field for field in dataclasses.fields(mirror.library)}
    for name, library_name in mirror.fields.items():
        assert name in resource.model_fields, f"{resource.__name__} has no field {name!r}"
        assert library_name in library_fields, f"{mirror.library.__name__} has no field {library_name!r}"
        ours = resource.model_fields[name].get_default(call_default_factory=True)
        theirs = _library_default(library_fields[library_name])
        assert _plain(ours) == _plain(theirs), (
            f"{resource.__name__}.{name} defaults to {ours!r} but {mirror.library.__name__}.{library_name} to "
            f"{theirs!r}: read the default from the library (resources.Mirror) instead of writing it twice"
        )


def test_a_resource_left_at_its_defaults_builds_the_library_defaults(tmp_path):
    # Every builder at once: a field mapped to the wrong library field, or left out, shows up here.
    policy = CurationPolicy()
    assert policy.minhash_config() == MinHashConfig()
    assert policy.split_config() == SplitConfig()
    assert policy.shard_config() == ShardConfig()
    judge = JudgePolicy()
    assert (judge.rule(), judge.floors(), judge.prices()) == (AcceptanceRule(), CalibrationFloors(), TokenPrices())
    training = TrainingPolicy(models_dir=str(tmp_path))
    assert training.audit_policy() == RewardAuditPolicy()
    assert training.sft_settings() == SFTSettings()
    assert training.runtime == GRPOJobConfig(model_path="m", output_dir="o", train_file="t").runtime
    assert PromotionGate(registry_path=str(tmp_path / "r.json")).policy() == PromotionPolicy()
    folders = {name: str(tmp_path / name) for name in ("cache_dir", "models_dir", "log_dir")}
    endpoint = LLMEndpoint(base_url="http://10.0.0.5:8000/v1", model="m", **folders).endpoint()
    assert endpoint.config == EndpointConfig(base_url="http://10.0.0.5:8000/v1", model="m")


@pytest.mark.parametrize(
    ("resource", "field", "good", "bad"),
    [
        ("judge", "use_labels", "all", "some"),
        ("training", "runtime", "none", "tpu"),
        ("gate", "family_rule", "ci", "median"),
        ("llm", "local_backend", "vllm", "ollama"),
    ],
)
def test_the_launchpad_offers_a_choice_and_refuses_any_other(settings, resource, field, good, bad):
    definitions = build_definitions(settings)
    job = definitions.resolve_job_def("flywheel_job")
    configured = definitions.resources[resource]
    # Run config replaces the resource's config: the fields without a default (folders) must come along.
    required = {
        name: getattr(configured, name) for name, f in type(configured).model_fields.items() if f.is_required()
    }

    def run_config(value: str) -> dict:
        return {"resources": {resource: {"config": {**required, field: value}}}}

    assert dg.validate_run_config(job, run_config(good))["resources"][resource]["config"][field] == good
    with pytest.raises(dg.DagsterInvalidConfigError, match=rf"{field} not in enum type .* got {bad}"):
        dg.validate_run_config(job, run_config(bad))


def test_a_choice_outside_the_literal_fails_in_code_too(tmp_path):
    with pytest.raises(ValueError, match="use_labels"):
        JudgePolicy(use_labels="some")
    with pytest.raises(ValueError, match="family_rule"):
        PromotionGate(registry_path=str(tmp_path / "r.json"), family_rule="median")


def test_every_profile_has_one_mapping_and_definitions_use_it(settings):
    assert set(PROFILES) == set(get_args(Profile))
    for profile in PROFILES:
        chosen = replace(settings, profile=profile)
        resources = build_definitions(chosen).resources
        for name, resource in profile_resources(chosen).resources().items():
            assert resources[name] == resource, (profile, name)
    # The two profiles sample the endpoint alike (the LLM cache keys on it), whatever else differs.
    quickstart, production = (profile_resources(replace(settings, profile=p)).llm for p in PROFILES)
    assert (quickstart.temperature, quickstart.max_tokens) == (production.temperature, production.max_tokens)
