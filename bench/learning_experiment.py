"""Does the flywheel learn? Base -> SFT -> GRPO on held-out tasks, on CPU, with seedwheel's own code.

Run: `.venv/bin/python bench/learning_experiment.py` (the bundled model on the contact-extraction seeds), or
`--setup digits` (a random tiny model on generated one-digit sums, the earlier experiment).

**`contacts` (default).** The policy is the bundled SmolLM2-135M-Instruct (`langmodels.models.bundled_model`), the
tasks the `json_extraction` seeds tagged `contacts` (`seeds/json_extraction/contacts.yaml`: name, age and city
from a one-line message, the bundled seeds within its reach) plus their programmatic variants
(`json_extraction_resample`: new person names). The split is the pipeline's own: `plan_splits` with the
pipeline's `CurationPolicy` split config over *all* bundled seeds, so the held-out contact lineages are the
ones the pipeline holds out; `lineage_leaks` must come back empty.

**`digits`.** Seed tasks are two-operand problems (`What is 7 + 8?`), each with paraphrase variants, split by
lineage with a salt of its own; the policy is `training.tiny_model.build_tiny_model`, a random Qwen2-style
model with a BPE tokenizer trained on the train split's texts only.

Then, for both:

1. **SFT warm-up.** `training.sft.run_sft` on the train tasks' references.
2. **GRPO.** `training.grpo.run_grpo` from the SFT model, on the exported train split
   (`training.export.export_split`), rewarded by the tasks' verifiers through the registry.
3. **Evaluation.** `training.evaluation.sample_and_score` (k samples per eval task), then `training.stats`:
   `evaluate` (pass@1 and pass@k with task-bootstrap 95% intervals) and `compare` (paired differences per task).

Prints a table, then every figure as one JSON object on the last line. `--quick` is a smoke run of the same
pipeline (few steps, few samples; its numbers mean nothing).
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
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from curation.splits import SplitConfig, lineage_leaks, plan_splits  # noqa: E402
from generators.base import derive_task  # noqa: E402
from generators.programmatic import generate_variants  # noqa: E402
from training.evaluation import SampledVerdicts, sample_and_score  # noqa: E402
from training.stats import Comparison, EvalReport, compare, evaluate  # noqa: E402
from validators.records import ChatMessage, GeneratorSpec, TaskRecord, VerifierSpec  # noqa: E402
from validators.seeds import load_seeds  # noqa: E402
from validators.tasks import check_tasks, compute_task_id  # noqa: E402

FAMILY = "arithmetic"
CONTACTS_TAG = "contacts"
# Per setup: the recipe's defaults (flags override them), measured to fit ~30 minutes on 2 cores.
DEFAULTS: dict[str, dict[str, Any]] = {
    "contacts": {
        "sft_steps": 5, "sft_lr": 1e-5, "sft_batch": 8, "grpo_steps": 30, "grpo_lr": 2e-5, "grpo_batch": 16,
        "group": 8, "k": 8, "max_new_tokens": 48, "temperature": 0.7, "variants": 4, "threads": 2,
    },
    "digits": {
        "sft_steps": 150, "sft_lr": 3e-3, "sft_batch": 32, "grpo_steps": 200, "grpo_lr": 5e-4, "grpo_batch": 64,
        "group": 8, "k": 16, "max_new_tokens": 16, "temperature": 1.0, "variants": 2, "threads": 1,
    },
}  # fmt: skip
SYSTEM = "Compute the result. End with the answer on its own line as '#### <number>'."
# Paraphrases of one problem: they share the seed's lineage, so the split keeps them on one side.
TEMPLATES = ("What is {a} {op} {b}?", "Calculate {a} {op} {b}.", "{a} {op} {b} = ?")
GENERATOR: GeneratorSpec = {"name": "bench_paraphrase", "version": 1, "params": {}}
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
) -> list[TaskRecord]:
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
    tasks: list[TaskRecord] = []
    for a, op, b in chosen:
        answer = a + b if op == "+" else a - b
        reference = f"{a} {op} {b} = {answer}\n#### {answer}"
        verifier: VerifierSpec = {"name": "numeric_answer", "version": 1, "params": {"answer": answer}}

        def prompt(template: str, a: int = a, b: int = b, op: str = op) -> list[ChatMessage]:
            return [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": template.format(a=a, b=b, op=op)},
            ]

        seed_prompt = prompt(TEMPLATES[0])
        seed_id = compute_task_id(seed_prompt, verifier)
        seed: TaskRecord = {
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


def contact_tasks(variants: int) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """The contact seeds and `variants - 1` variants of each, split as the pipeline splits the bundled seeds."""
    from resources import CurationPolicy

    seeds = [{k: v for k, v in t.items() if k != "origin"} for t in load_seeds([REPO / "seeds"]).tasks]
    sides = dict(
        zip((t["task_id"] for t in seeds), plan_splits(seeds, CurationPolicy().split_config()).splits, strict=True)
    )
    contacts = [t for t in seeds if CONTACTS_TAG in t["tags"]]
    tasks: list[Mapping[str, Any]] = [
        *contacts,
        *generate_variants(contacts, per_seed=variants - 1, random_seed=0).tasks,
    ]
    train = [t for t in tasks if sides[t["lineage"]["seed_id"]] == "train"]
    held_out = [t for t in tasks if sides[t["lineage"]["seed_id"]] == "eval"]
    return checked_split(train, held_out)


def split_tasks(tasks: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """Train and eval by seed lineage; raises if any train task shares a lineage with an eval task."""
    sides = plan_splits(tasks, SPLIT).splits
    train = [t for t, side in zip(tasks, sides, strict=True) if side == "train"]
    held_out = [t for t, side in zip(tasks, sides, strict=True) if side == "eval"]
    return checked_split(train, held_out)


def checked_split(
    train: list[Mapping[str, Any]], held_out: list[Mapping[str, Any]]
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    leaks = lineage_leaks(train, held_out)
    if leaks:
        raise RuntimeError(f"{len(leaks)} train tasks share a lineage with eval tasks, e.g. {leaks[0]}")
    return train, held_out


def scored(
    label: str, model: Path, tasks: Sequence[Mapping[str, Any]], args: argparse.Namespace
) -> tuple[SampledVerdicts, EvalReport, dict[str, Any]]:
    from transformers import AutoTokenizer

    started = time.perf_counter()
    sampled = sample_and_score(
        model, tasks, k=args.k, max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=1, batch_size=64
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
    parser.add_argument("--setup", choices=sorted(DEFAULTS), default="contacts", help="policy and tasks (see above)")
    parser.add_argument("--quick", action="store_true", help="a smoke run (few steps, few samples)")
    parser.add_argument("--models-dir", type=Path, default=Path.home() / ".cache" / "seedwheel-tests" / "models")
    parser.add_argument("--digits", type=int, default=1, help="digits: digits per operand")
    parser.add_argument("--no-carry", action="store_true", help="digits: only problems without carry/borrow")
    parser.add_argument("--seeds", type=int, default=1000, help="digits: distinct problems (lineage roots), at most")
    parser.add_argument("--ops", default="+-", help="digits: operators, e.g. '+' or '+-'")
    parser.add_argument("--hidden", type=int, default=64, help="digits: the tiny model's width")
    parser.add_argument("--layers", type=int, default=2, help="digits: the tiny model's depth")
    parser.add_argument("--variants", type=int, help="prompts per seed (1 = seeds only)")
    parser.add_argument("--sft-steps", type=int)
    parser.add_argument("--sft-lr", type=float)
    parser.add_argument("--sft-batch", type=int)
    parser.add_argument("--grpo-steps", type=int)
    parser.add_argument("--grpo-lr", type=float)
    parser.add_argument("--grpo-batch", type=int, help="completions per step")
    parser.add_argument("--group", type=int, help="num_generations (completions per prompt)")
    parser.add_argument("--k", type=int, help="samples per eval task")
    parser.add_argument("--max-new-tokens", type=int)
    parser.add_argument("--temperature", type=float, help="sampling temperature of GRPO and of evaluation")
    parser.add_argument("--eval-limit", type=int, default=0, help="evaluate on at most this many tasks (0 = all)")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: 2 for contacts; 1 for digits, ~6x faster than 2 for its tiny model)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="keep models here (default: a temp folder)")
    args = parser.parse_args()
    for name, value in DEFAULTS[args.setup].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.quick:
        args.seeds, args.sft_steps, args.grpo_steps, args.k, args.eval_limit = 100, 2, 2, 2, 8

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

    from langmodels.models import bundled_model
    from training.export import export_split
    from training.grpo import SeedwheelGRPOFields, cpu_defaults, grpo_config_class, reward_spread, run_grpo
    from training.sft import SFTSettings, run_sft
    from training.tiny_model import build_tiny_model

    if args.setup == "contacts":
        train, held_out = contact_tasks(args.variants)
        family = "json_extraction (contacts)"
    else:
        tasks = arithmetic_tasks(args.digits, list(args.ops), args.seeds, args.variants, carry=not args.no_carry)
        train, held_out = split_tasks(tasks)
        family = FAMILY
    problems = [(t["task_id"], p) for t, p in zip(train + held_out, check_tasks(train + held_out), strict=True) if p]
    if problems:
        raise RuntimeError(f"{len(problems)} tasks failed validation, e.g. {problems[0]}")
    if args.eval_limit:
        held_out = random.Random(0).sample(held_out, min(args.eval_limit, len(held_out)))
    seeds_train = len({t["lineage"]["seed_id"] for t in train})
    seeds_eval = len({t["lineage"]["seed_id"] for t in held_out})

    with tempfile.TemporaryDirectory(prefix="seedwheel-learning-") as scratch:
        work = args.workdir or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        if args.setup == "contacts":
            base = bundled_model(args.models_dir)
        else:
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
            settings=SFTSettings(
                max_steps=args.sft_steps, learning_rate=args.sft_lr, batch_size=args.sft_batch, max_length=256
            ),
            seed=0,
            overrides={"logging_steps": 5, "save_strategy": "no", "disable_tqdm": True},
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
        # Seedwheel's own fields, checked against their dataclass (the type checker's SeedwheelGRPOConfig takes only
        # trl's GRPOConfig fields as keywords); the ones not named here go in at their defaults.
        seedwheel = SeedwheelGRPOFields(train_file=str(exported.parquet), reward_weights_by_verifier={"*": 1.0})
        config = grpo_config_class()(
            **asdict(seedwheel),
            output_dir=str(work / "grpo"),
            per_device_train_batch_size=args.grpo_batch,
            num_generations=args.group,
            max_completion_length=args.max_new_tokens,
            max_steps=args.grpo_steps,
            learning_rate=args.grpo_lr,
            temperature=args.temperature,
            logging_steps=1,
            save_strategy="no",
            seed=0,
            disable_tqdm=True,
            **cpu_defaults(),
        )
        grpo = run_grpo(sft.checkpoint_dir, config)
        rewards = [m["reward"] for m in grpo.metrics_history if m.get("reward") is not None]
        spread = reward_spread(grpo.metrics_history)
        verdicts["grpo"], reports["grpo"], stages["grpo"] = scored("grpo", grpo.checkpoint_dir, held_out, args)
        tokens = grpo.last_metric("num_tokens") or 0
        stages["grpo"].update(
            train_seconds=round(grpo.train_seconds, 1),
            train_tokens_per_second=round(tokens / grpo.train_seconds, 1) if grpo.train_seconds else None,
            steps=grpo.steps,
            seconds_per_step=round(grpo.train_seconds / grpo.steps, 1) if grpo.steps else None,
            reward_first=round(rewards[0], 3) if rewards else None,
            reward_last=round(rewards[-1], 3) if rewards else None,
            reward_mean=round(sum(rewards) / len(rewards), 3) if rewards else None,
            groups_with_reward_spread=None if spread is None else round(spread, 3),
        )

    families = verdicts["base"].families
    sft_vs_base = compare(verdicts["sft"].passed, verdicts["base"].passed, families)
    grpo_vs_sft = compare(verdicts["grpo"].passed, verdicts["sft"].passed, families)
    grpo_vs_base = compare(verdicts["grpo"].passed, verdicts["base"].passed, families)
    wall = time.perf_counter() - started

    pass_k = f"pass@{args.k}"
    print()
    print(
        f"Held-out {family}: {len(held_out)} eval tasks ({seeds_eval} seeds), {len(train)} train tasks "
        f"({seeds_train} seeds), k={args.k} samples per task at temperature {args.temperature}; 95% task-bootstrap "
        "intervals"
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
    grpo_stage = stages["grpo"]
    print(
        f"GRPO reward (train batches): {grpo_stage['reward_first']} -> {grpo_stage['reward_last']} (mean "
        f"{grpo_stage['reward_mean']}); groups with a reward spread: {grpo_stage['groups_with_reward_spread']}; "
        f"{grpo_stage['seconds_per_step']} s/step"
    )
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
