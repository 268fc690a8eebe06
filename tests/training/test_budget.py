"""The GRPO run plan (`training.budget`) on planted data, against figures computed by hand."""

import math
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from training.budget import (
    AdviceLimits,
    BudgetError,
    GateSettings,
    MeasuredRun,
    ModelShape,
    RunSettings,
    Throughput,
    Workload,
    calibrate,
    calibrate_plan,
    detectable_difference,
    eval_tasks_needed,
    load_throughputs,
    measure_workload,
    measured_run,
    parse_model_size,
    plan_budget,
    plan_row,
    throughput_for,
)
from training.promotion import PromotionPolicy
from training.stats import bootstrap_ci

# A planted device: 100 generated and 200 trained tokens/s, fp32, 1 GiB, for a model of one million parameters.
ROW = Throughput("planted", "m", 1_000_000, 100.0, 200.0, "fp32", 1.0, "test", "2026-12-03")
# Two layers of width 64, key/value width 32, gated MLP of 128: the shape the memory figures are checked on.
SHAPE = ModelShape(1_000_000, 2, 64, 32, 128, True, "planted")
# 4 completions per prompt, 8 per step, 2 epochs, completions of at most 48 tokens, prompts of at most 100.
SETTINGS = RunSettings(
    num_generations=4,
    per_device_train_batch_size=8,
    max_steps=-1,
    num_train_epochs=2.0,
    max_completion_length=48,
    max_prompt_tokens=100,
)
WORKLOAD = Workload(
    prompt_tokens=[80, 80, 120, 80, 80],  # the 120-token prompt is over the limit
    completion_lengths=[30, 50, 60],  # clipped to 48: mean (30 + 48 + 48) / 3 = 42
    pass_rates=[0.5, 0.25],
    labels={"learnable": 2, "never_solved": 5, "always_solved": 1},
)


def plan(**overrides):
    arguments = {"workload": WORKLOAD, "settings": SETTINGS, "gpus": 1, "gate": None} | overrides
    rate = throughput_for([ROW], "planted", SHAPE.parameters)
    return plan_budget(arguments.pop("workload"), arguments.pop("settings"), SHAPE, rate, **arguments)


def test_tokens_steps_and_flops_match_the_hand_computed_figures():
    budget = plan()
    assert (budget.prompts, budget.prompts_over_limit, budget.longest_prompt) == (4, 1, 120)
    assert budget.mean_prompt_tokens == 80 and budget.mean_completion_tokens == 42
    # 8 completions a step = 2 prompts; 4 prompts = 2 steps an epoch; 2 epochs = 4 steps.
    assert (budget.rollouts_per_step, budget.completions_per_step, budget.steps, budget.epochs) == (8, 8, 4, 2.0)
    assert budget.prompt_tokens == 4 * 8 * 80 == 2560
    assert budget.completion_tokens == 4 * 8 * 42 == 1344
    assert budget.trained_tokens == 4 * 8 * (80 + 42) == 3904
    assert budget.generation_flops == 2 * 1e6 * (2560 + 1344)
    assert budget.training_flops == 6 * 1e6 * 3904
    # 1344 generated tokens at 100/s; 3904 trained tokens at 200/s.
    assert budget.generation_seconds == pytest.approx(13.44)
    assert budget.training_seconds == pytest.approx(19.52)
    assert budget.wall_seconds == pytest.approx(32.96) and budget.gpu_hours == pytest.approx(32.96 / 3600)


def test_extra_forward_passes_lora_and_gpus_change_the_figures_as_stated():
    # beta > 0 adds a reference forward (2N), num_iterations 2 an old-logprob forward and halves generation.
    reused = plan(settings=RunSettings(**{**SETTINGS.__dict__, "beta": 0.04, "num_iterations": 2}))
    assert reused.rollouts_per_step == 4 and reused.steps == 8  # each group trained twice: twice the steps
    assert reused.training_flops == (6 + 2 + 2) * 1e6 * reused.trained_tokens
    lora = plan(settings=RunSettings(**{**SETTINGS.__dict__, "use_lora": True}))
    assert lora.training_flops == 4 * 1e6 * 3904
    eight = plan(gpus=8, settings=RunSettings(**{**SETTINGS.__dict__, "max_steps": 10}))
    assert eight.completions_per_step == 64 and eight.steps == 10
    assert eight.generation_seconds == pytest.approx(10 * 64 * 42 / (100 * 8))
    assert eight.gpu_hours == pytest.approx(eight.wall_seconds * 8 / 3600)


def test_memory_per_device_full_lora_and_sharded():
    full, lora = plan().memory
    # fp32: 4 bytes of weights and of gradients, 8 of Adam moments per parameter.
    assert (full.weights, full.gradients, full.optimizer) == (4e6, 4e6, 8e6)
    # KV cache: 2 (K, V) x 2 layers x width 32 x 4 bytes x 8 completions x (80 longest kept prompt + 48).
    assert full.kv_cache == 2 * 2 * 32 * 4 * 8 * 128 == 524_288
    assert full.total == 16e6 + 524_288 and full.fits  # of 1 GiB
    # LoRA r=16 on every linear: 16 x 2 layers x (q, o: 64+64 each; k, v: 64+32 each; gate, up, down: 64+128 each).
    adapters = 16 * 2 * (2 * 128 + 2 * 96 + 3 * 192)
    assert adapters == 32_768 == SHAPE.lora_parameters(16)
    assert (lora.weights, lora.gradients, lora.optimizer) == ((1e6 + adapters) * 4, adapters * 4, adapters * 8)
    sharded = plan(gpus=4).memory[2]
    assert sharded.mode == "full, sharded over 4" and sharded.weights == 1e6 and sharded.optimizer == 2e6
    tight = Throughput(**{**ROW.__dict__, "memory_gib": 0.01})
    assert not plan_budget(WORKLOAD, SETTINGS, SHAPE, throughput_for([tight], "planted", 10**6)).memory[0].fits


def test_a_model_shape_from_its_config_counts_the_parameters():
    # SmolLM2-135M-Instruct's config: 134,515,008 parameters, as loading the checkpoint counts them.
    config = {
        "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "head_dim": 64, "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": True,
    }  # fmt: skip
    shape = ModelShape.from_config(config, "smollm2")
    assert shape.parameters == 134_515_008 and shape.kv_dim == 192
    with pytest.raises(BudgetError, match=r"lacks 'intermediate_size'.*--model-size"):
        ModelShape.from_config({k: v for k, v in config.items() if k != "intermediate_size"}, "smollm2")


def test_signal_fraction_is_the_mean_chance_of_a_mixed_group():
    # p = 0.5, G = 4: 1 - 1/16 - 1/16; p = 0.25: 1 - 0.25^4 - 0.75^4.
    assert plan().signal_fraction == pytest.approx(((1 - 2 / 16) + (1 - 0.25**4 - 0.75**4)) / 2)
    assert plan(workload=Workload(prompt_tokens=[80])).signal_fraction is None  # nothing profiled: unknown


def test_the_detectable_difference_follows_the_paired_bootstrap():
    gate = GateSettings(eval_tasks=50, samples=4)
    # (z_0.975 + z_0.8) x sqrt(2 x 0.25 / 4) / sqrt(50)
    assert detectable_difference(gate, 0.8) == pytest.approx((1.959964 + 0.841621) * math.sqrt(0.125) / math.sqrt(50))
    # At power 0.5 it is the bootstrap interval's half width for per-task differences with that spread.
    spread = math.sqrt(0.125)
    interval = bootstrap_ci([spread, -spread] * 25, seed=0)
    assert interval.value - interval.low == pytest.approx(detectable_difference(gate, 0.5), rel=0.05)
    assert eval_tasks_needed(gate, 0.8, detectable_difference(gate, 0.8)) == 50


def test_advice_names_what_is_wasteful_with_numbers():
    gate = GateSettings(eval_tasks=5, samples=4, min_tasks=20)
    advice = plan(gate=gate, settings=RunSettings(**{**SETTINGS.__dict__, "max_completion_length": 512})).advice
    text = "\n".join(advice)
    assert "6 of 8 profiled tasks (75%) were never or always solved" in text
    assert "1 prompts are longer than max_prompt_tokens=100 (longest 120)" in text
    assert "max_completion_length=512 is 11.0x the samples' mean length (47 tokens)" in text
    assert "5 eval tasks < the gate's min_tasks=20" in text
    needed = eval_tasks_needed(gate, 0.8, 0.05)
    assert f"showing +0.050 needs about {needed} eval tasks" in text
    low_signal = plan(workload=Workload(prompt_tokens=[80], pass_rates=[0.02]), limits=AdviceLimits())
    assert any(line.startswith("only 8% of groups are expected to carry signal") for line in low_signal.advice)
    calm = plan(workload=Workload(prompt_tokens=[80], completion_lengths=[40], pass_rates=[0.5]))
    assert calm.advice == []


def test_measure_workload_reads_the_grpo_set_with_the_policys_tokenizer(tiny_model_dir: Path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tasks = [{"task_id": t, "prompt": [{"role": "user", "content": f"what is {t} plus {t}?"}]} for t in "abc"]
    profile = [
        {"task_id": "a", "solved": 2, "samples": 4, "label": "learnable", "in_grpo_set": True,
         "rollouts": [{"completion": "4"}, {"completion": "four and more"}]},
        {"task_id": "b", "solved": 0, "samples": 4, "label": "never_solved", "in_grpo_set": False,
         "rollouts": [{"completion": "no idea at all, really"}]},
        {"task_id": "c", "solved": None, "samples": 0, "label": "not_profiled", "in_grpo_set": True, "rollouts": None},
    ]  # fmt: skip
    workload = measure_workload(tasks, profile, tokenizer)
    # The prompts as the trainer sees them: the chat template with the generation prompt, in tokens.
    templated = [tokenizer.apply_chat_template(tasks[i]["prompt"], add_generation_prompt=True) for i in (0, 2)]
    assert workload.prompt_tokens == [len(t["input_ids"]) for t in templated] and min(workload.prompt_tokens) > 10
    lengths = [len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in ("4", "four and more")]
    assert workload.completion_lengths == lengths  # only the GRPO set's samples
    assert (workload.pass_rates, workload.unprofiled) == ([0.5], 1)
    assert workload.labels == {"learnable": 1, "never_solved": 1, "not_profiled": 1}
    unprofiled = measure_workload(tasks, None, tokenizer)
    assert len(unprofiled.prompt_tokens) == 3 and "no difficulty profile" in unprofiled.assumed[0]
    with pytest.raises(BudgetError, match="no training task is in the GRPO set"):
        measure_workload(tasks, [{**row, "in_grpo_set": False} for row in profile], tokenizer)


def test_the_table_and_its_lookups():
    table = load_throughputs()
    assert all(row.source and row.as_of for row in table)
    assert "cpu-2core" in {row.device for row in table}
    rate = throughput_for(table, "H100", 16_060_522_496)  # twice the 8B row's size: half its rates
    assert rate.training_tokens_per_s == pytest.approx(6158 / 2, rel=1e-3) and "scaled" in rate.note
    with pytest.raises(BudgetError, match=r"unknown GPU 'b200': the throughput table knows a100, cpu-2core, h100"):
        throughput_for(table, "b200", 10**9)


def test_a_broken_table_names_the_file_and_line(tmp_path: Path):
    path = tmp_path / "throughputs.csv"
    path.write_text("device,model,parameters\nh100,x,lots\n")
    with pytest.raises(BudgetError, match=r"throughputs.csv line 2: .*every row needs device, model, parameters"):
        load_throughputs(path)


@pytest.mark.parametrize(
    ("text", "parameters"), [("8B", 8 * 10**9), ("0.5b", 5 * 10**8), ("135M", 135 * 10**6), ("7000", 7000)]
)
def test_model_sizes_parse(text: str, parameters: int):
    assert parse_model_size(text) == parameters


@pytest.mark.parametrize("text", ["8GB", "eight", "", "-1B", "0B"])
def test_a_bad_model_size_says_the_format(text: str):
    with pytest.raises(BudgetError, match=r"--model-size .*e.g. 135M, 0.5B, 8B or 70B"):
        parse_model_size(text)


def test_run_settings_take_trls_defaults_for_what_is_not_set():
    settings = RunSettings.from_grpo({"num_generations": 4, "max_steps": 2})
    assert (settings.num_generations, settings.max_steps) == (4, 2)
    assert settings.per_device_train_batch_size == 8 and settings.max_completion_length == 512  # GRPOConfig's
    with pytest.raises(BudgetError, match="GRPO settings"):
        RunSettings.from_grpo({"num_generations": "many"})


def test_calibration_compares_the_plan_with_the_trainers_log():
    log = [
        {"step": 1, "num_tokens": 1000.0, "completions/mean_length": 40.0},
        {"step": 2, "num_tokens": 2000.0, "completions/mean_length": 44.0},
    ]
    measured = measured_run(2, 40.0, log)
    assert measured == MeasuredRun(2, 40.0, 2000.0, 42.0)
    # With TRL's step times, the wall time compared is the steps' own (loading and saving are not planned).
    timed = measured_run(2, 40.0, [{**entry, "step_time": 16.0} for entry in log])
    assert timed.step_seconds == 32.0
    assert calibrate(plan().as_metadata(), timed)["wall_time_ratio"] == pytest.approx(32.96 / 4 * 2 / 32.0)
    assert measured_run(2, 40.0, [{**log[0], "step_time": 16.0}, log[1]]).step_seconds is None  # one not timed
    budget = plan()  # 4 steps of 8.24 s, 976 tokens each
    ratios = calibrate(budget.as_metadata(), measured)
    assert ratios["wall_time_ratio"] == pytest.approx(32.96 / 4 * 2 / 40.0)
    assert ratios["tokens_ratio"] == pytest.approx((2560 + 1344) / 4 * 2 / 2000)
    assert ratios["completion_length_ratio"] == pytest.approx(42 / 42)
    assert calibrate(budget.as_metadata(), MeasuredRun(2, 40.0)).keys() == {"wall_time_ratio"}
    assert measured_run(2, 40.0, [{"step": 1, "loss": 0.1}]) == MeasuredRun(2, 40.0)  # nothing logged to compare


def test_a_plan_row_holds_what_the_calibration_compares():
    budget = plan()
    row = plan_row(budget, model="m", device="H100", grpo={"num_generations": 4})
    assert row == {**budget.as_metadata(), "model": "m", "device": "H100", "grpo": {"num_generations": 4},
                   "advice": budget.advice}  # fmt: skip
    gate = GateSettings.from_policy(PromotionPolicy(min_improvement=0.02, min_tasks=30), 40, 4)
    assert gate == GateSettings(eval_tasks=40, samples=4, min_improvement=0.02, min_tasks=30)


# The plan of `plan()` as `training_budget` stores it: 4 steps of 8.24 s over 4 prompts.
PLANNED = plan_row(plan(), model="m", device="planted", grpo={"num_generations": 4, "max_steps": 4})
RUN = {"config": {"grpo": {"num_generations": 4, "max_steps": 4}}, "task_ids": list("abcd"), "steps": 4}


@pytest.mark.parametrize(
    ("run", "resumed", "problems", "within"),
    [
        # The run the plan priced, 25% slower than planned: compared, within 2x.
        ({**RUN, "train_seconds": 41.2}, "", [], True),
        # Exactly 2x slower or faster is still within; more is not.
        ({**RUN, "train_seconds": 2 * PLANNED["predicted_wall_seconds"]}, "", [], True),
        ({**RUN, "train_seconds": PLANNED["predicted_wall_seconds"] / 2}, "", [], True),
        ({**RUN, "train_seconds": 66.0}, "", [], False),
        ({**RUN, "train_seconds": 16.0}, "", [], False),
        # Other settings, other tasks or a resumed run: not the run planned, no ratios, never within.
        (
            {**RUN, "config": {"grpo": {"num_generations": 8, "max_steps": 4}}, "train_seconds": 33.0},
            "",
            ["the run's GRPO settings differ from the plan's"],
            False,
        ),
        (
            {**RUN, "task_ids": ["a"], "train_seconds": 33.0},
            "",
            ["the run trained 1 tasks, the plan counted 4"],
            False,
        ),
        (
            {**RUN, "train_seconds": 33.0},
            "ckpt-2",
            ["the run resumed from ckpt-2: its wall time covers part of it"],
            False,
        ),
    ],
)
def test_calibrate_plan_compares_only_the_run_planned(run, resumed, problems, within):
    calibration = calibrate_plan(PLANNED, run, resumed=resumed)
    assert calibration.problems == problems and calibration.comparable == (not problems)
    assert calibration.within_tolerance == within
    assert calibration.measured == MeasuredRun(4, run["train_seconds"])  # the row's own, nothing logged
    assert (calibration.ratios == {}) == bool(problems)
    assert calibration.predicted_seconds_for_measured_steps == pytest.approx(32.96)
    assert calibration.as_row() == {"comparable": not problems, "within_tolerance": within, **calibration.ratios,
                                    "problems": problems}  # fmt: skip


def test_calibrate_plan_prefers_what_the_trainer_logged():
    logged = {
        "steps": 2,
        "train_seconds": 40.0,
        "tokens": 1952.0,
        "mean_completion_tokens": 42.0,
        "step_seconds": 16.48,
    }
    calibration = calibrate_plan(PLANNED, {**RUN, "train_seconds": 99.0}, logged=logged)
    assert calibration.measured == MeasuredRun(**logged)
    assert calibration.ratios == pytest.approx(
        {"wall_time_ratio": 1.0, "tokens_ratio": 1.0, "completion_length_ratio": 1.0}
    )
    assert calibration.predicted_seconds_for_measured_steps == pytest.approx(32.96 / 2)  # the plan at the run's steps
