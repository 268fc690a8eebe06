"""`seedwheel plan`: a what-if from flags alone, and clear errors for flags that name nothing known."""

from click.testing import CliRunner

from pipeline.cli import main


def test_a_what_if_without_stored_splits_plans_from_the_flags_and_says_what_it_assumed(tmp_path):
    args = ["plan", "--model-size", "8B", "--gpu", "h100", "--gpus", "8", "--home", str(tmp_path / "empty")]
    result = CliRunner().invoke(main, [*args, "--grpo", "max_steps=100", "--eval-tasks", "200"])
    assert result.exit_code == 0, result.output
    assert "8 x h100" in result.output and "memory, full, sharded over 8" in result.output
    # The profile's GRPO: 8 GPUs x 8 completions = 8 prompts of 8 a step, so 1000 assumed prompts are 125 steps
    # and 100 steps 0.8 epochs.
    assert "64 generated, 64 trained" in result.output and "100 / 0.80" in result.output
    assert "1000 prompts of 256 tokens" in result.output and "approximated from 8B parameters" in result.output
    assert "full fine-tuning needs" in result.output  # 8B with Adam does not fit one 80 GiB H100 unsharded
    assert "on 200 eval tasks" in result.output


def test_an_unknown_gpu_lists_the_known_ones(tmp_path):
    result = CliRunner().invoke(main, ["plan", "--model-size", "8B", "--gpu", "b200", "--home", str(tmp_path)])
    assert result.exit_code == 2
    assert "unknown GPU 'b200': the throughput table knows a100, cpu-2core, h100" in result.output


def test_a_bad_model_size_or_setting_names_the_flag_and_the_format(tmp_path):
    result = CliRunner().invoke(main, ["plan", "--model-size", "8GB", "--home", str(tmp_path)])
    assert result.exit_code == 2 and "--model-size '8GB'" in result.output and "e.g. 135M, 0.5B, 8B" in result.output
    result = CliRunner().invoke(main, ["plan", "--model-size", "8B", "--grpo", "max_steps", "--home", str(tmp_path)])
    assert result.exit_code == 2 and "--grpo" in result.output and "KEY=VALUE" in result.output


def test_home_takes_an_object_store_url_as_it_is():
    # --home is the storage root as SEEDWHEEL_HOME takes it: a URL stays a URL (not the local folder "s3:/bucket").
    result = CliRunner().invoke(main, ["plan", "--model-size", "8B", "--home", "s3://bucket/flywheel"])
    assert result.exit_code == 2
    assert "--home s3://bucket/flywheel: seedwheel plan reads a local storage root" in result.output
