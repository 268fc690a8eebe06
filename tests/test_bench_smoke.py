"""Every script in bench/ runs, at its smallest size, as its one command does (`python bench/<script>.py`, from the
repository root, in a child process): it exits as it says and ends, as every bench must, with one JSON line of its
figures. The figures at these sizes mean nothing; what is checked is that the bench still runs.

A script that needs the real model, a training run or minutes at any size (`help_only`, with the reason) is
imported and parses `--help` instead. `test_every_bench_script_has_a_smoke_run` fails on a script in bench/ that
`SMOKES` does not list, so a new bench comes with its smoke run.
"""

import json
import subprocess
import sys
from dataclasses import dataclass

import pytest

from core.cache_store import COMMIT_EVERY, COMPACT_AFTER
from tests.bfcl import require_bfcl_data
from tests.paths import GSM8K, REPO

BENCH = REPO / "bench"
TINY_MODEL = "{tiny_model}"  # an argument the `tiny_model_dir` fixture's folder replaces


@dataclass(frozen=True)
class Smoke:
    """How one bench script is smoke-run."""

    args: tuple[str, ...] = ()  # after the script: its smallest size
    verdict: str | None = None  # its JSON key for "every target met": false exits 1 (these sizes may miss targets)
    gsm8k: bool = False  # it reads the shared GSM8K data
    bfcl: bool = False  # it reads bfcl-eval's data
    help_only: str = ""  # why it only parses --help: what it needs at any size


def help_only(reason: str) -> Smoke:
    return Smoke(("--help",), help_only=reason)


# Smallest sizes: 1-8 s of CPU each (2 shared cores); their wall times: `pytest --durations=0`.
SMOKES = {
    "bench_adversarial_inputs.py": Smoke(("--quick", "--repeat", "1")),
    "bench_bootstrap.py": Smoke(("--tasks", "100", "--naive-loops", "20")),
    # The fewest entries whose cold night leaves more segments than COMPACT_AFTER: the compacting commit is checked.
    "bench_cache_store.py": Smoke(
        ("--existing", str(COMPACT_AFTER * COMMIT_EVERY + 1), "--new", "100", "--repeats", "1"), verdict="met"
    ),
    "bench_dedup.py": Smoke(("--docs", "300", "--tasks", "5000"), verdict="pass", gsm8k=True),
    "bench_incremental_generation.py": Smoke(("--seeds", "100", "--latency-ms", "1"), verdict="passed", gsm8k=True),
    "bench_incremental_validation.py": Smoke(
        ("--families", "arithmetic", "--rounds", "0", "--gsm8k", "10", "--per-seed", "1"), verdict="passed", gsm8k=True
    ),
    "bench_judge.py": Smoke(("--quick", "--latency-ms", "20", "--cache-entries", "1000"), verdict="passed"),
    "bench_llm_client.py": Smoke(("--quick", "--latency-ms", "20", "--cache-entries", "1000"), verdict="passed"),
    "bench_local_server.py": help_only("3 judge cases of 16 long prompts: 4 minutes on the tiny model"),
    "bench_plan_throughput.py": Smoke(("--model", TINY_MODEL, "--batch", "2", "--new-tokens", "4", "--repeats", "1")),
    "bench_sft_loss.py": Smoke(("--model", TINY_MODEL, "--steps", "1", "--batch", "2", "--repeats", "1")),
    "bench_shards.py": help_only("three Dagster runs through the multiprocess executor: minutes at any size"),
    "bench_verifiers.py": Smoke(("--quick", "--batch", "8")),
    "bfcl_agreement.py": Smoke(("--categories", "simple_python"), bfcl=True),
    "flywheel_nights.py": help_only("nights of serving, training and gating: 6 minutes for 1 tiny night"),
    "gpu_grpo.py": help_only("GRPO on a GPU; --allow-cpu trains for about a minute"),
    "learning_experiment.py": help_only("SFT, GRPO, evaluation: --setup digits --quick takes 20 s of CPU"),
    "math_agreement.py": Smoke(("--limit", "5"), verdict="met", gsm8k=True),
    "measure_dedup_recall.py": Smoke(("--limit", "100"), verdict="pass", gsm8k=True),
}
# Slower than the fast tier's 10 s: importing torch, transformers and TRL takes most of it on 2 cores; one of
# NeMo Gym's math rollouts compares two expressions in (2 + sqrt 3)^2016 symbolically (~9 s).
SLOW = {"bench_local_server.py", "bench_plan_throughput.py", "bench_sft_loss.py", "math_agreement.py"}


def run_bench(script: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(BENCH / script), *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize(
    ("script", "smoke"),
    [
        pytest.param(name, smoke, id=name, marks=pytest.mark.slow if name in SLOW else ())
        for name, smoke in SMOKES.items()
    ],
)
def test_bench_runs_at_its_smallest_size(script: str, smoke: Smoke, request: pytest.FixtureRequest) -> None:
    if smoke.gsm8k and not (GSM8K / "test.jsonl").exists():
        pytest.skip(f"shared GSM8K data not found at {GSM8K}")
    if smoke.bfcl:
        require_bfcl_data()
    args = list(smoke.args)
    if TINY_MODEL in args:
        args[args.index(TINY_MODEL)] = str(request.getfixturevalue("tiny_model_dir"))
    done = run_bench(script, args)
    output = f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    if smoke.help_only:
        assert done.returncode == 0, output
        assert done.stdout.startswith("usage: "), output
        return
    lines = done.stdout.splitlines()
    assert len(lines) > 1, f"no table before the JSON line\n{output}"
    try:
        figures = json.loads(lines[-1])
    except ValueError:
        pytest.fail(f"the last line is not JSON\n{output}")
    assert isinstance(figures, dict), f"the last line is not one JSON object\n{output}"
    expected = 0 if smoke.verdict is None or figures[smoke.verdict] else 1
    assert done.returncode == expected, output


def test_every_bench_script_has_a_smoke_run() -> None:
    scripts = {path.name for path in BENCH.glob("*.py")}
    missing, gone = sorted(scripts - SMOKES.keys()), sorted(SMOKES.keys() - scripts)
    assert not missing, f"bench scripts without a smoke run (add them to SMOKES): {missing}"
    assert not gone, f"SMOKES names scripts bench/ does not have: {gone}"
