"""The warm-up's step time with the output layer on the answer alone: `.venv/bin/python bench/bench_sft_loss.py`.

The quickstart's SFT warm-up (the `json_extraction` and `tool_call` seeds' references, batches of 8, at most 512
tokens, padding-free) trained for `--steps` steps twice on the bundled SmolLM2-135M-Instruct: with TRL's
`SFTTrainer`, whose output layer projects every position off Triton devices (the baseline), and with
`training.answer_loss.AnswerLossSFTTrainer`, which projects only the positions whose next token is learnt. Both
start from the same weights, see the same batches in the same order and take full steps (forward, backward,
AdamW); no checkpoint is saved. Each runs `--repeats` times, alternating, and its fastest run counts (the machine
is shared). The share of positions learnt says what the speedup can be at most.

Prints a table, then every figure as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402

from langmodels.models import bundled_model  # noqa: E402
from training.answer_loss import AnswerLossSFTTrainer  # noqa: E402
from training.grpo import runtime_defaults  # noqa: E402
from training.sft import sft_examples, tokenized_rows, warm_up_tasks  # noqa: E402
from validators.seeds import load_seeds  # noqa: E402

FAMILIES = ["json_extraction", "tool_call"]  # the quickstart's sft_families


def warm_up_rows(model: str, max_length: int) -> list[dict[str, list[int]]]:
    """The seeds' warm-up examples as the pipeline tokenizes them: ids and the assistant's mask, cut to max_length."""
    examples, _ = sft_examples(warm_up_tasks(load_seeds([REPO / "seeds"]).tasks, FAMILIES))
    return tokenized_rows(AutoTokenizer.from_pretrained(model), examples, max_length)


def train_seconds(
    cls: type[SFTTrainer], model: str, rows: list[dict[str, list[int]]], args: argparse.Namespace
) -> float:
    """Wall time of `args.steps` full training steps (`trainer.train()`, nothing saved)."""
    with tempfile.TemporaryDirectory() as out:
        config = SFTConfig(
            **runtime_defaults(prefer_vllm=False),
            output_dir=out,
            max_steps=args.steps,
            per_device_train_batch_size=args.batch,
            learning_rate=5e-5,
            padding_free=True,
            max_length=None,
            completion_only_loss=True,
            save_strategy="no",
            disable_tqdm=True,
            seed=0,
        )
        trainer = cls(
            model=model,
            args=config,
            train_dataset=Dataset.from_list(rows),
            processing_class=AutoTokenizer.from_pretrained(model),
        )
        started = time.perf_counter()
        trainer.train()
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="Model directory; default: the bundled SmolLM2-135M.")
    parser.add_argument("--models-dir", default=str(Path.home() / ".cache" / "seedwheel" / "models"))
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = args.model or str(bundled_model(args.models_dir))
    rows = warm_up_rows(model, args.max_length)
    tokens = sum(len(row["input_ids"]) for row in rows)
    learnt = sum(sum(row["completion_mask"][1:]) for row in rows)  # a position learns the token after it
    best = {"trl": float("inf"), "answer_loss": float("inf")}
    for _ in range(args.repeats):
        for name, cls in (("trl", SFTTrainer), ("answer_loss", AnswerLossSFTTrainer)):
            best[name] = min(best[name], train_seconds(cls, model, rows, args))
    speedup = best["trl"] / best["answer_loss"]
    print(f"{len(rows)} warm-up examples, {tokens} tokens, {learnt / tokens:.0%} of positions learnt")
    print(f"{'trainer':<14} {'steps':>5} {'seconds':>8} {'s/step':>7}")
    for name, seconds in best.items():
        print(f"{name:<14} {args.steps:>5} {seconds:>8.1f} {seconds / args.steps:>7.2f}")
    print(f"speedup of the answer-only output layer: {speedup:.2f}x")
    figures: dict[str, Any] = {
        "examples": len(rows),
        "learnt_share": round(learnt / tokens, 3),
        "steps": args.steps,
        "batch": args.batch,
        "trl_seconds_per_step": round(best["trl"] / args.steps, 2),
        "answer_loss_seconds_per_step": round(best["answer_loss"] / args.steps, 2),
        "speedup": round(speedup, 2),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
