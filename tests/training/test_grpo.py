"""GRPO runs on the tiny model: config checks, real training, resume, a raising verifier, and the child job."""

from __future__ import annotations

import json
import logging
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.tiers import skip_for_accelerator
from tests.training.tiny import TINY_SIZES, TINY_TEXTS
from training import grpo_job
from training.export import export_split
from training.grpo import (
    GRPOConfigError,
    GRPODataError,
    cpu_defaults,
    grpo_config_class,
    last_complete_checkpoint,
    run_grpo,
    runtime_defaults,
)
from training.tiny_model import build_tiny_model

REPO_ROOT = Path(__file__).resolve().parents[2]
SYSTEM = "Answer with #### <number>."
# Tiny steps: 4 completions per step = 2 prompts x 2 generations, 8 new tokens each (~0.1-0.3 s a step here).
TINY_RUN = {
    "per_device_train_batch_size": 4,
    "num_generations": 2,
    "max_completion_length": 8,
    "learning_rate": 5e-2,  # the default 1e-6 barely moves a tiny model
    "logging_steps": 1,
    "seed": 0,
    "disable_tqdm": True,
}


@pytest.fixture(scope="module")
def arith_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with a tokenizer that also saw arithmetic prompts, so they stay short (~40 tokens)."""
    texts = [*TINY_TEXTS, SYSTEM, *(f"What is {a} + {b}?" for a in range(10) for b in range(10))]
    texts += [f"#### {n}" for n in range(20)]
    return build_tiny_model(tmp_path_factory.mktemp("grpo-model") / "tiny", texts, **TINY_SIZES, seed=0)


def _task(i: int, verifier: str = "numeric_answer", question: str | None = None) -> dict[str, Any]:
    a, b = i % 10, (i * 3) % 10
    return {
        "task_id": f"arith-{verifier}-{i}",
        "family": "arithmetic",
        "prompt": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": question or f"What is {a} + {b}?"},
        ],
        "verifier": {"name": verifier, "version": 1, "params": {"answer": a + b}},
        "reference": f"#### {a + b}",
        "lineage": {"seed_id": f"arith-{i}"},
    }


def _split(tmp_path: Path, tasks: list[dict[str, Any]]) -> Path:
    return export_split(tasks, tmp_path / "export", "train").parquet


def _config(tmp_path: Path, train_file: Path, **overrides: Any) -> Any:
    kwargs = {**cpu_defaults(), **TINY_RUN, "output_dir": str(tmp_path / "run"), "train_file": str(train_file)}
    return grpo_config_class()(**{**kwargs, **overrides})


# ---------------------------------------------------------------------------------------------------------------
# Config: seedwheel checks, and TRL's own fields passing through.


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # 4 completions cannot split into groups of 3: the message offers a batch of 6 or groups of 2.
        ({"num_generations": 3}, "per_device_train_batch_size=6 or num_generations=2"),
        # One completion per prompt leaves nothing to compare within a group.
        ({"num_generations": 1}, "at least 2 completions per prompt"),
        ({"max_prompt_tokens": 0}, "max_prompt_tokens=0 must be >= 1"),
        # A verifier name the registry lacks: the message lists the registered ones.
        ({"reward_weights_by_verifier": {"no_such_verifier": 1.0}}, "registered: "),
        ({"reward_weights_by_verifier": {}}, "reward weights are empty"),
        ({"reward_weights_by_verifier": {"numeric_answer": float("nan")}}, "finite number"),
        # TRL's reward_weights set by hand must not disagree with the per-verifier mapping.
        ({"reward_weights": [0.5]}, "set weights only in reward_weights_by_verifier"),
        # Dropping unused columns would drop the verifier spec the rewards read.
        ({"remove_unused_columns": True}, "would drop the 'verifier' column"),
        # Asking for vLLM on this CPU machine: both problems named, with the install hint for the gpu extra.
        ({"use_vllm": True}, "seedwheel[gpu]"),
        ({"use_vllm": True, "use_cpu": False, "vllm_mode": "remote"}, "vllm_mode='remote'"),
        ({"use_lora": True, "lora_r": 0}, "lora_r=0 must be >= 1"),
    ],
)
def test_config_problems_give_numbers_and_fix(tmp_path: Path, overrides: dict[str, Any], expected: str) -> None:
    with pytest.raises(GRPOConfigError) as caught:
        _config(tmp_path, tmp_path / "train.parquet", **overrides)
    assert expected in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_lora_without_peft_names_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "peft", None)  # peft is installed here: hide it, as if it were not
    with pytest.raises(GRPOConfigError, match="pip install peft"):
        _config(tmp_path, tmp_path / "train.parquet", use_lora=True)


@pytest.mark.parametrize(
    ("variant", "fields"),
    [
        # GSPO: sequence-level importance ratios with the grpo loss.
        ("gspo", {"importance_sampling_level": "sequence", "loss_type": "grpo"}),
        # DAPO: TRL's default loss plus clip-higher and masking of truncated completions.
        ("dapo", {"loss_type": "dapo", "epsilon_high": 0.28, "mask_truncated_completions": True}),
        # Dr. GRPO: constant normalisation, no std scaling of rewards.
        ("dr_grpo", {"loss_type": "dr_grpo", "scale_rewards": "none"}),
        # A KL penalty and bigger groups.
        ("kl", {"beta": 0.04, "num_generations": 4, "per_device_train_batch_size": 8}),
    ],
)
def test_trl_fields_pass_through(tmp_path: Path, variant: str, fields: dict[str, Any]) -> None:
    from trl import GRPOConfig

    config = _config(tmp_path, tmp_path / "train.parquet", **fields)
    assert isinstance(config, GRPOConfig)
    for name, value in fields.items():
        assert getattr(config, name) == value, (variant, name)
    assert (config.use_cpu, config.bf16, config.activation_checkpointing) == (True, False, False)
    assert config.reward_weights == [1.0]
    # The trainer pickles its args into every checkpoint (training_args.bin).
    clone = pickle.loads(pickle.dumps(config))
    assert type(clone) is type(config) and clone.train_file == config.train_file


def test_weights_by_verifier_become_trl_reward_weights(tmp_path: Path) -> None:
    config = _config(
        tmp_path, tmp_path / "t.parquet", reward_weights_by_verifier={"numeric_answer": 1.0, "format_tags": 0.2}
    )
    assert config.reward_weights == [1.0, 0.2]


def test_runtime_defaults_on_a_machine_without_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        skip_for_accelerator("this machine has a GPU")
    assert runtime_defaults() == cpu_defaults()
    with pytest.raises(GRPOConfigError, match="colocate, server"):
        runtime_defaults(vllm_mode="remote")


def test_importing_the_modules_loads_no_heavy_packages() -> None:
    # The Dagster code location imports training.* on every step; trl/torch/dagster must wait until used.
    code = (
        "import sys, training.grpo, training.grpo_job\n"
        "names = ('torch', 'transformers', 'trl', 'datasets', 'dagster', 'dagster_pipes')\n"
        "heavy = [m for m in names if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True, timeout=60)


def test_last_complete_checkpoint_skips_cut_off_saves(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert last_complete_checkpoint(tmp_path / "missing") is None
    for step, complete in [(2, True), (10, True), (12, False)]:
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        if complete:
            (folder / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-x").mkdir()  # not a checkpoint name
    with caplog.at_level(logging.WARNING, logger="training.grpo"):
        # 10 beats 2 numerically (not as text); 12 has no trainer state, so its save was cut off.
        assert last_complete_checkpoint(tmp_path) == tmp_path / "checkpoint-10"
    assert "checkpoint-12" in caplog.text


def test_missing_train_file_is_a_data_error(tmp_path: Path, arith_model_dir: Path) -> None:
    config = _config(tmp_path, tmp_path / "nope.parquet", max_steps=1)
    with pytest.raises(GRPODataError, match="does not exist"):
        run_grpo(arith_model_dir, config)


def test_all_prompts_too_long_is_a_data_error(tmp_path: Path, arith_model_dir: Path) -> None:
    config = _config(tmp_path, _split(tmp_path, [_task(i) for i in range(4)]), max_steps=1, max_prompt_tokens=5)
    with pytest.raises(GRPODataError, match="max_prompt_tokens=5"):
        run_grpo(arith_model_dir, config)


def test_fewer_prompts_than_a_generation_round_takes_is_a_data_error(tmp_path: Path, arith_model_dir: Path) -> None:
    # 8 completions a round in groups of 2 take 4 distinct prompts; TRL's sampler would drop every short round and
    # run 0 steps without a word.
    config = _config(
        tmp_path,
        _split(tmp_path, [_task(i) for i in range(3)]),
        max_steps=1,
        per_device_train_batch_size=8,
        num_generations=2,
    )
    with pytest.raises(
        GRPODataError, match=r"3 training prompt\(s\) .* takes 4 prompts .* per_device_train_batch_size to 6"
    ):
        run_grpo(arith_model_dir, config)


# ---------------------------------------------------------------------------------------------------------------
# Real training on the tiny model.


@pytest.mark.slow
@pytest.mark.usefixtures("test_verifiers")
def test_grpo_trains_streams_metrics_and_saves_final(
    tmp_path: Path, arith_model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # Half the rows are scored by numeric_answer (a random model scores 0), half by a digit-share verifier whose
    # rewards differ within a group, so the advantages are non-zero and the weights must move.
    tasks = [_task(i, "numeric_answer" if i % 2 else "test_digit_share") for i in range(16)]
    tasks.append(_task(99, question="What is " + " + ".join(["1"] * 200) + "?"))  # far over max_prompt_tokens
    config = _config(
        tmp_path,
        _split(tmp_path, tasks),
        max_steps=3,
        max_prompt_tokens=64,
        beta=0.04,  # a KL term, so `kl` is logged; the reference model loads from the model path
        reward_weights_by_verifier={"numeric_answer": 1.0, "test_digit_share": 1.0},
    )
    received: list[dict[str, Any]] = []
    with caplog.at_level(logging.WARNING, logger="training.grpo"):
        result = run_grpo(arith_model_dir, config, on_metrics=received.append)

    assert result.steps == 3 and result.resumed_from is None
    assert (result.train_rows, result.filtered_rows) == (16, 1)
    assert "Dropped 1 of 17 prompts" in caplog.text and "arith-numeric_answer-99" in caplog.text
    assert result.verifier_versions == {"numeric_answer": [1], "test_digit_share": [1]}
    # Every logged step reached the callback as it happened, with TRL's per-reward metric names.
    step_logs = [m for m in received if "reward" in m]
    assert [m["step"] for m in step_logs] == [1, 2, 3]
    for key in ("rewards/numeric_answer/mean", "rewards/test_digit_share/mean", "frac_reward_zero_std", "kl"):
        assert key in step_logs[0], key
    assert "completions/mean_length" in step_logs[0]
    assert any("tokens_per_second" in m for m in step_logs[1:])
    assert received == result.metrics_history
    assert "train_runtime" in received[-1]
    assert result.summary()["final_reward_mean"] == result.last_metric("reward")

    # The final folder is a plain model directory, and training changed the weights.
    assert result.checkpoint_dir == tmp_path / "run" / "final"
    trained = AutoModelForCausalLM.from_pretrained(result.checkpoint_dir)
    AutoTokenizer.from_pretrained(result.checkpoint_dir)
    initial = AutoModelForCausalLM.from_pretrained(arith_model_dir)
    before, after = initial.state_dict(), trained.state_dict()
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[name], after[name]) for name in before)


@pytest.mark.slow
def test_grpo_resumes_from_last_complete_checkpoint(
    tmp_path: Path, arith_model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    train_file = _split(tmp_path, [_task(i) for i in range(8)])
    first = run_grpo(arith_model_dir, _config(tmp_path, train_file, max_steps=2, save_steps=1))
    assert first.steps == 2 and first.resumed_from is None
    run_dir = tmp_path / "run"
    assert (run_dir / "checkpoint-1").is_dir() and (run_dir / "checkpoint-2").is_dir()

    # A later save that was cut off (no trainer_state.json) must not be resumed from.
    (run_dir / "checkpoint-3").mkdir()
    (run_dir / "checkpoint-3" / "model.safetensors").write_bytes(b"half")
    with caplog.at_level(logging.INFO, logger="training.grpo"):
        second = run_grpo(arith_model_dir, _config(tmp_path, train_file, max_steps=3, save_steps=1))
    assert second.resumed_from == run_dir / "checkpoint-2"
    assert second.steps == 3
    assert [m["step"] for m in second.metrics_history if "reward" in m] == [3]
    assert "Resuming GRPO from" in caplog.text and "checkpoint-3" in caplog.text
    assert json.loads((run_dir / "checkpoint-3" / "trainer_state.json").read_text())["global_step"] == 3

    # A rerun of a finished run (a retried asset, killed before its final folder) trains nothing and rewrites the
    # same final model, also mid-epoch, where transformers alone would run one step past max_steps.
    third = run_grpo(arith_model_dir, _config(tmp_path, train_file, max_steps=3, save_steps=1))
    assert (third.resumed_from, third.steps) == (run_dir / "checkpoint-3", 3)
    assert not [m for m in third.metrics_history if "reward" in m]
    assert not (run_dir / "checkpoint-4").exists()
    assert (third.checkpoint_dir / "model.safetensors").is_file()


@pytest.mark.slow
@pytest.mark.usefixtures("test_verifiers")
def test_raising_verifier_gives_none_rewards_not_a_crash(
    tmp_path: Path, arith_model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = _config(
        tmp_path,
        _split(tmp_path, [_task(i, "test_exploding") for i in range(8)]),
        max_steps=1,
        reward_weights_by_verifier={"test_exploding": 1.0},
    )
    with caplog.at_level(logging.WARNING, logger="validators.rewards"):
        result = run_grpo(arith_model_dir, config)
    assert result.steps == 1
    assert "verifier raised RuntimeError: deliberately broken verifier" in caplog.text
    step_log = next(m for m in result.metrics_history if "rewards/test_exploding/mean" in m)
    assert step_log["rewards/test_exploding/mean"] is None  # every reward was None (NaN): nothing to average
    assert (result.checkpoint_dir / "config.json").is_file()


# ---------------------------------------------------------------------------------------------------------------
# The child entry point.


def _job_config(tmp_path: Path, model_dir: Path, train_file: Path, **grpo: Any) -> Path:
    path = tmp_path / "job.json"
    params = {
        "reward_weights_by_verifier": {"numeric_answer": 1.0},
        "max_steps": 1,
        **{k: v for k, v in TINY_RUN.items() if k != "disable_tqdm"},
        **grpo,
    }
    job = {
        "model_path": str(model_dir),
        "output_dir": str(tmp_path / "job-run"),
        "train_file": str(train_file),
        "runtime": "cpu",
        "grpo": params,
    }
    path.write_text(json.dumps(job))
    return path


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read config"),
        ("{not json", "not valid JSON"),
        (json.dumps({"model_path": "m", "output_dir": "o"}), "train_file must be given"),
        (json.dumps({"model_path": "m", "output_dir": "o", "train_file": "t", "steps": 3}), "unknown key(s) steps"),
        (json.dumps({"model_path": "m", "output_dir": "o", "train_file": "t", "runtime": "tpu"}), "runtime must be"),
        # A typo in a GRPO parameter: the message suggests the real field.
        (
            json.dumps({"model_path": "m", "output_dir": "o", "train_file": "t", "grpo": {"num_generation": 4}}),
            "did you mean num_generations",
        ),
        # The config class's own checks surface as a bad config too.
        (
            json.dumps({"model_path": "m", "output_dir": "o", "train_file": "t", "grpo": {"num_generations": 1}}),
            "at least 2 completions",
        ),
    ],
)
def test_job_bad_config_exits_2(
    tmp_path: Path,
    content: str | None,
    expected: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DAGSTER_PIPES_CONTEXT", raising=False)
    path = tmp_path / "job.json"
    if content is not None:
        path.write_text(content)
    with caplog.at_level(logging.ERROR, logger="training.grpo_job"):
        assert grpo_job.main(["--config", str(path)]) == grpo_job.EXIT_BAD_CONFIG
    assert expected in caplog.text


@pytest.mark.slow
def test_job_runs_as_plain_cli_and_prints_a_summary(tmp_path: Path, arith_model_dir: Path) -> None:
    config = _job_config(tmp_path, arith_model_dir, _split(tmp_path, [_task(i) for i in range(8)]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_PIPES")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "training.grpo_job", "--config", str(config)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 1
    assert Path(summary["checkpoint_dir"]) == tmp_path / "job-run" / "final"
    assert (Path(summary["checkpoint_dir"]) / "model.safetensors").is_file()
    assert summary["verifier_versions"] == {"numeric_answer": [1]}
    assert "rewards/numeric_answer/mean" in summary["reward_means"]
    assert "GRPO step 1" in proc.stderr  # the metrics went to the log as they came


@pytest.mark.slow
def test_job_under_pipes_streams_metrics_and_reports_materialization(
    tmp_path: Path, arith_model_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Dagster's side of Pipes is simulated with the dagster_pipes wire format: context inline, messages to a file.
    from dagster_pipes import PipesContext, encode_param

    config = _job_config(tmp_path, arith_model_dir, _split(tmp_path, [_task(i) for i in range(8)]), max_steps=2)
    messages = tmp_path / "messages.jsonl"
    context = {
        "asset_keys": ["grpo_checkpoint"],
        "code_version_by_asset_key": None,
        "provenance_by_asset_key": None,
        "partition_key": None,
        "partition_key_range": None,
        "partition_time_window": None,
        "run_id": "test-run",
        "job_name": "training_job",
        "retry_number": 0,
        "extras": {},
    }
    monkeypatch.setenv("DAGSTER_PIPES_CONTEXT", encode_param({"data": context}))
    monkeypatch.setenv("DAGSTER_PIPES_MESSAGES", encode_param({"path": str(messages)}))
    monkeypatch.setattr(PipesContext, "_instance", None)  # the context is a per-process singleton
    caplog.set_level(logging.INFO, logger="training")  # as the job's own logging.basicConfig does in a child

    assert grpo_job.main(["--config", str(config)]) == grpo_job.EXIT_OK

    sent = [json.loads(line) for line in messages.read_text().splitlines()]
    methods = [m["method"] for m in sent]
    assert methods[0] == "opened" and methods[-1] == "closed"
    assert sent[-1]["params"] == {}  # closed without an exception
    metrics = [m["params"]["payload"] for m in sent if m["method"] == "report_custom_message"]
    steps = [p for p in metrics if p.get("kind") == grpo_job.METRICS_MESSAGE_KIND and "reward" in p]
    assert [p["step"] for p in steps] == [1, 2]
    assert any(m["method"] == "log" and "GRPO step 2" in m["params"]["message"] for m in sent)
    (materialization,) = [m["params"] for m in sent if m["method"] == "report_asset_materialization"]
    metadata = materialization["metadata"]
    assert materialization["asset_key"] == "grpo_checkpoint"
    assert metadata["checkpoint_dir"] == {"raw_value": str(tmp_path / "job-run" / "final"), "type": "path"}
    assert metadata["steps"]["raw_value"] == 2
    assert metadata["verifier_versions"] == {"raw_value": {"numeric_answer": [1]}, "type": "json"}
    assert metadata["filtered_rows"]["raw_value"] == 0
    # The last step's mean reward, as its metrics message reported it.
    assert metadata["final_reward_mean"] == {"raw_value": steps[-1]["reward"], "type": "float"}
    # What went over the wire reads back as the job's result, as the asset reads it.
    reported = grpo_job.GRPOJobResult.from_metadata(metadata)
    assert (reported.steps, reported.final_reward_mean) == (2, steps[-1]["reward"])
