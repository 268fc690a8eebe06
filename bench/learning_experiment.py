"""Does the flywheel learn? Base -> SFT -> GRPO on held-out arithmetic, on CPU.

Run: `.venv/bin/python bench/learning_experiment.py`.

The recipe, end to end with seedwheel's own code:

1. **Data.** Seed tasks are two-operand problems (`What is 7 + 8?`, `What is 9 - 4?`; single digits, no
   negative results by default), built here because the bundled GSM8K slice is out of reach for any model that
   trains in minutes on a CPU. Each seed gets paraphrase variants (`derive_task`, lineage to the seed); every
   record is checked with `validators.tasks.check_tasks` (schema, the reference passes `numeric_answer`, a
   known-wrong answer fails). The split is `validators.splits.plan_splits` by seed lineage, and `lineage_leaks`
   must come back empty: no eval problem, nor any paraphrase of it, is trained on.
2. **Policy.** `training.tiny_model.build_tiny_model`: a random Qwen2-style model whose BPE tokenizer is trained on
   the train split's texts only (digits stay single tokens under Qwen2's pre-tokenizer).
3. **SFT warm-up.** `training.sft.run_sft` on the train tasks' references (`a + b = c` then `#### c`).
4. **GRPO.** `training.grpo.run_grpo` from the SFT model, on the exported train split
   (`validators.export.export_split`), rewarded by the `numeric_answer` verifier.
5. **Evaluation.** `training.evaluation.sample_and_score` (k samples per eval task at temperature 1.0), then
   `evaluate` (pass@1 and pass@k with task-bootstrap 95% intervals) and `compare` (paired differences).

Prints a table, then every figure as one JSON object on the last line. About 5.5 minutes on 2 shared cores
with the defaults; `--quick` is a ~2-minute smoke run of the same pipeline (its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from generators.base import derive_task  # noqa: E402
from training.evaluation import Comparison, EvalReport, SampledVerdicts, compare, evaluate, sample_and_score  # noqa: E402
from validators.splits import SplitConfig, lineage_leaks, plan_splits  # noqa: E402
from validators.tasks import check_tasks, compute_task_id  # noqa: E402

FAMILY = "arithmetic"
SYSTEM = "Compute the result. End with the answer on its own line as '#### <number>'."
# Paraphrases of one problem: they share the seed's lineage, so the split keeps them on one side.
TEMPLATES = ("What is {a} {op} {b}?", "Calculate {a} {op} {b}.", "{a} {op} {b} = ?")
GENERATOR = {"name": "bench_paraphrase", "version": 1, "params": {}}
SPLIT = SplitConfig(eval_fraction=0.2, salt="learning-experiment-v1")


def no_carry(a: int, b: int, op: str) -> bool:
    """Whether `a op b` needs no carry (+) or borrow (-) in any digit: each answer digit depends on two digits."""
    while a or b:
        if (op == "+" and a % 10 + b % 10 > 9) or (op == "-" and a % 10 < b % 10):
            return False
        a, b = a // 10, b // 10
    return True


def arithmetic_tasks(
    digits: int, ops: Sequence[str], seeds: int, variants: int, *, carry: bool = True
) -> list[dict[str, Any]]:
    """`seeds` problems `a op b` with `digits`-digit operands (no negative results), plus `variants - 1` paraphrases.

    With `carry=False` only problems without carry/borrow are drawn: every answer digit is then one of 100
    single-digit facts, so a held-out multi-digit problem is a new combination of seen facts.
    """
    low, high = (0, 9) if digits == 1 else (10 ** (digits - 1), 10**digits - 1)
    candidates = [
        (a, op, b)
        for op in ops
        for a in range(low, high + 1)
        for b in range(low, high + 1)
        if (carry or no_carry(a, b, op)) and (op != "-" or a >= b)
    ]
    chosen = random.Random(0).sample(candidates, min(seeds, len(candidates)))
    tasks = []
    for a, op, b in chosen:
        answer = a + b if op == "+" else a - b
        reference = f"{a} {op} {b} = {answer}\n#### {answer}"
        verifier = {"name": "numeric_answer", "version": 1, "params": {"answer": answer}}

        def prompt(template: str, a: int = a, b: int = b, op: str = op) -> list[dict[str, str]]:
            return [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": template.format(a=a, b=b, op=op)},
            ]

        seed_prompt = prompt(TEMPLATES[0])
        seed_id = compute_task_id(seed_prompt, verifier)
        seed = {
            "task_id": seed_id,
            "family": FAMILY,
            "prompt": seed_prompt,
            "verifier": verifier,
            "reference": reference,
            "lineage": {
                "seed_id": seed_id,
                "parent_id": None,
                "generator": None,
                "source": "seed",
                "failure_id": None,
            },
            "difficulty": 1,
            "tags": ["bench"],
        }
        tasks.append(seed)
        for template in TEMPLATES[1:variants]:
            tasks.append(
                derive_task(
                    seed,
                    prompt=prompt(template),
                    verifier_params=verifier["params"],
                    reference=reference,
                    generator=GENERATOR,
                )
            )
    return tasks


def split_tasks(tasks: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Train and eval by seed lineage; raises if any train task shares a lineage with an eval task."""
    sides = plan_splits(tasks, SPLIT).splits
    train = [t for t, side in zip(tasks, sides, strict=True) if side == "train"]
    held_out = [t for t, side in zip(tasks, sides, strict=True) if side == "eval"]
    leaks = lineage_leaks(train, held_out)
    if leaks:
        raise RuntimeError(f"{len(leaks)} train tasks share a lineage with eval tasks, e.g. {leaks[0]}")
    return train, held_out


def scored(
    label: str, model: Path, tasks: list[dict[str, Any]], args: argparse.Namespace
) -> tuple[SampledVerdicts, EvalReport, dict[str, Any]]:
    from transformers import AutoTokenizer

    started = time.perf_counter()
    sampled = sample_and_score(
        model, tasks, k=args.k, max_new_tokens=args.max_new_tokens, temperature=1.0, seed=1, batch_size=64
    )
    seconds = time.perf_counter() - started
    report = evaluate(sampled.passed, sampled.families, ks=sorted({1, args.k}), seed=0)
    tokenizer = AutoTokenizer.from_pretrained(model)
    generated = sum(len(tokenizer(row["completion"], add_special_tokens=False)["input_ids"]) for row in sampled.rows)
    reasons: dict[str, int] = {}
    for row in sampled.rows:
        code = row["reason"].split(":")[0]
        reasons[code] = reasons.get(code, 0) + 1
    timing = {
        "eval_seconds": round(seconds, 1),
        "eval_tokens_per_second": round(generated / seconds, 1),
        "reasons": reasons,
    }
    logging.getLogger("bench").info("%s: pass@1 %s in %.1f s", label, report.overall["pass@1"], seconds)
    return sampled, report, timing


def estimate_row(report: EvalReport, metric: str) -> dict[str, float]:
    estimate = report.overall[metric]
    return {"value": round(estimate.value, 4), "low": round(estimate.low, 4), "high": round(estimate.high, 4)}


def diff_row(comparison: Comparison) -> dict[str, float]:
    d = comparison.overall.difference
    return {"value": round(d.value, 4), "low": round(d.low, 4), "high": round(d.high, 4)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a ~2-minute smoke run (few steps, few tasks)")
    parser.add_argument("--digits", type=int, default=1, help="digits per operand")
    parser.add_argument("--no-carry", action="store_true", help="only problems without carry/borrow")
    parser.add_argument("--seeds", type=int, default=1000, help="distinct problems (lineage roots), at most")
    parser.add_argument("--ops", default="+-", help="operators, e.g. '+' or '+-'")
    parser.add_argument("--variants", type=int, default=2, help="prompts per seed (1 = seeds only)")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--sft-steps", type=int, default=150)
    parser.add_argument("--sft-lr", type=float, default=3e-3)
    parser.add_argument("--sft-batch", type=int, default=32)
    parser.add_argument("--grpo-steps", type=int, default=200)
    parser.add_argument("--grpo-lr", type=float, default=5e-4)
    parser.add_argument("--grpo-batch", type=int, default=64, help="completions per step")
    parser.add_argument("--group", type=int, default=8, help="num_generations (completions per prompt)")
    parser.add_argument("--k", type=int, default=16, help="samples per eval task")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--eval-limit", type=int, default=0, help="evaluate on at most this many tasks (0 = all)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads; 1 is ~6x faster than 2 on a shared 2-core machine (no oversubscribed spinning)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="keep models here (default: a temp folder)")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.sft_steps, args.grpo_steps, args.k, args.eval_limit = 100, 20, 10, 2, 40

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("bench").setLevel(logging.INFO)
    for noisy in ("transformers", "trl", "datasets", "httpx"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    started = time.perf_counter()

    import torch
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()

    from training.grpo import cpu_defaults, grpo_config_class, run_grpo
    from training.sft import run_sft
    from training.tiny_model import build_tiny_model
    from validators.export import export_split

    tasks = arithmetic_tasks(args.digits, list(args.ops), args.seeds, args.variants, carry=not args.no_carry)
    problems = [(t["task_id"], p) for t, p in zip(tasks, check_tasks(tasks), strict=True) if p]
    if problems:
        raise RuntimeError(f"{len(problems)} generated tasks failed validation, e.g. {problems[0]}")
    train, held_out = split_tasks(tasks)
    if args.eval_limit:
        held_out = random.Random(0).sample(held_out, min(args.eval_limit, len(held_out)))
    seeds_train = len({t["lineage"]["seed_id"] for t in train})
    seeds_eval = len({t["lineage"]["seed_id"] for t in held_out})

    with tempfile.TemporaryDirectory(prefix="seedwheel-learning-") as scratch:
        work = args.workdir or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        texts = [m["content"] for t in train for m in t["prompt"]] + [t["reference"] for t in train]
        base = build_tiny_model(
            work / "base",
            texts,
            vocab_size=512,
            hidden_size=args.hidden,
            num_layers=args.layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=args.hidden * 4,
            max_position_embeddings=256,
            seed=0,
        )
        stages: dict[str, dict[str, Any]] = {}
        verdicts: dict[str, SampledVerdicts] = {}
        reports: dict[str, EvalReport] = {}

        verdicts["base"], reports["base"], stages["base"] = scored("base", base, held_out, args)

        sft = run_sft(
            base,
            train,
            work / "sft",
            max_steps=args.sft_steps,
            learning_rate=args.sft_lr,
            batch_size=args.sft_batch,
            max_length=128,
            seed=0,
            overrides={"logging_steps": 25, "save_strategy": "no", "disable_tqdm": True},
        )
        sft_summary = sft.summary()
        verdicts["sft"], reports["sft"], stages["sft"] = scored("sft", sft.checkpoint_dir, held_out, args)
        stages["sft"].update(
            train_seconds=round(sft.train_seconds, 1),
            train_tokens_per_second=round(sft_summary["tokens_per_second"] or 0, 1),
            steps=sft.steps,
            final_loss=sft_summary["final_loss"],
        )

        exported = export_split(train, work / "export", "train")
        config = grpo_config_class()(
            output_dir=str(work / "grpo"),
            train_file=str(exported.parquet),
            reward_weights_by_verifier={"numeric_answer": 1.0},
            per_device_train_batch_size=args.grpo_batch,
            num_generations=args.group,
            max_completion_length=args.max_new_tokens,
            max_steps=args.grpo_steps,
            learning_rate=args.grpo_lr,
            logging_steps=10,
            save_strategy="no",
            seed=0,
            disable_tqdm=True,
            **cpu_defaults(),
        )
        rewards: list[float] = []
        grpo = run_grpo(
            sft.checkpoint_dir, config, on_metrics=lambda m: rewards.append(m["reward"]) if "reward" in m else None
        )
        verdicts["grpo"], reports["grpo"], stages["grpo"] = scored("grpo", grpo.checkpoint_dir, held_out, args)
        tokens = grpo.last_metric("num_tokens") or 0
        stages["grpo"].update(
            train_seconds=round(grpo.train_seconds, 1),
            train_tokens_per_second=round(tokens / grpo.train_seconds, 1) if grpo.train_seconds else None,
            steps=grpo.steps,
            reward_first=round(rewards[0], 3) if rewards else None,
            reward_last=round(rewards[-1], 3) if rewards else None,
        )

    families = verdicts["base"].families
    sft_vs_base = compare(verdicts["sft"].passed, verdicts["base"].passed, families)
    grpo_vs_sft = compare(verdicts["grpo"].passed, verdicts["sft"].passed, families)
    grpo_vs_base = compare(verdicts["grpo"].passed, verdicts["base"].passed, families)
    wall = time.perf_counter() - started

    pass_k = f"pass@{args.k}"
    print()
    print(
        f"Held-out {FAMILY}: {len(held_out)} eval tasks ({seeds_eval} seeds), {len(train)} train tasks "
        f"({seeds_train} seeds), k={args.k} samples per task at temperature 1.0; 95% task-bootstrap intervals"
    )
    header = f"{'stage':<6} {'pass@1':<22} {pass_k:<22} {'train s':>8} {'train tok/s':>12} {'eval s':>7}"
    print(header)
    print("-" * len(header))
    for name in ("base", "sft", "grpo"):
        report, stage = reports[name], stages[name]
        print(
            f"{name:<6} {report.overall['pass@1']!s:<22} {report.overall[pass_k]!s:<22} "
            f"{stage.get('train_seconds', '-')!s:>8} {stage.get('train_tokens_per_second', '-')!s:>12} "
            f"{stage['eval_seconds']:>7}"
        )
    print()
    print(f"SFT  - base: {sft_vs_base.overall.difference.signed()}")
    print(f"GRPO - SFT : {grpo_vs_sft.overall.difference.signed()}")
    print(f"GRPO - base: {grpo_vs_base.overall.difference.signed()}")
    print(f"GRPO reward (train batches): {stages['grpo']['reward_first']} -> {stages['grpo']['reward_last']}")
    print(f"wall time: {wall:.0f} s")

    recipe = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    figures = {
        "experiment": "learning_experiment",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs visible",
        "recipe": recipe,
        "train_tasks": len(train),
        "eval_tasks": len(held_out),
        "train_seeds": seeds_train,
        "eval_seeds": seeds_eval,
        "stages": {
            name: {
                "pass@1": estimate_row(reports[name], "pass@1"),
                pass_k: estimate_row(reports[name], pass_k),
                **stages[name],
            }
            for name in ("base", "sft", "grpo")
        },
        "sft_minus_base": diff_row(sft_vs_base),
        "grpo_minus_sft": diff_row(grpo_vs_sft),
        "grpo_minus_base": diff_row(grpo_vs_base),
        "wall_seconds": round(wall, 1),
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
