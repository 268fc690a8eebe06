"""The CPU row of `training/throughputs.csv`: `.venv/bin/python bench/bench_plan_throughput.py [--model DIR]`.

Measures, on this machine, the two rates `seedwheel plan` turns tokens into seconds with, for the bundled
SmolLM2-135M-Instruct by default, under the quickstart's GRPO conditions (fp32, torch's default threads, as the
`python -m training.grpo_job` child runs):

- **generation tokens/s**: `model.generate` (what TRL's GRPO generates with on CPU) for a batch of `--batch`
  copies of a real training prompt (chat template applied), sampling at T=0.7, every row forced to
  `--new-tokens` tokens; completion tokens over wall time, prefill included.
- **training tokens/s**: forward + backward + an AdamW step over `--batch` sequences of prompt + completion
  length (the tokens a GRPO step trains on); tokens over wall time.

**Baseline**, measured in the same run: one fp32 matmul at the model's own MLP shape (`--batch` x prompt +
completion rows of `hidden_size`, times `hidden_size` x `intermediate_size`): the arithmetic the model is made of,
at the rate this machine does it now. Each rate becomes model FLOP/s by the rule the GPU rows of
`training/throughputs.csv` are derived with (2 FLOPs per parameter per generated token, 6 per trained token) and
is shown as a share of the matmul's FLOP/s: a ratio, which a busy or different machine moves far less than the
tokens/s themselves.

Each figure is the best of `--repeats` runs after one warm-up (the machine is shared). Prints a table, the CSV
row to paste (raw rates, with today's date and the torch version; the committed row corrects them by measured
GRPO steps, see its `source`), then every figure as one JSON object on the last line. Trains nothing that is
kept. `--model DIR --batch 2 --new-tokens 4 --repeats 1` on a tiny model is a smoke run of a few seconds.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from collections.abc import Callable
from pathlib import Path

PROMPT = [
    {"role": "system", "content": "Extract the contact as JSON with the fields name, age and city."},
    {"role": "user", "content": "Maria Lopez, 34, moved to Valencia last spring after ten years in Lisbon."},
]
BUNDLED_NAME = "SmolLM2-135M-Instruct"
MATMUL_MIN_SECONDS = 0.2  # each timed matmul run repeats the product for at least this long


def best_rate(run: Callable[[], float], repeats: int) -> float:
    """The best of `repeats` calls of `run` (each returns a rate), after one warm-up call."""
    run()
    return max(run() for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="Model directory (default: the bundled SmolLM2-135M-Instruct)")
    parser.add_argument("--batch", type=int, default=8, help="Completions per batch (the quickstart's GRPO step: 8)")
    parser.add_argument("--new-tokens", type=int, default=48, help="Tokens per completion (quickstart: 48)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from langmodels.models import bundled_model
    from pipeline.settings import Settings

    model_dir = Path(args.model or bundled_model(Settings.from_env().models_dir))
    model_name = Path(args.model).name if args.model else BUNDLED_NAME
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    text = tokenizer.apply_chat_template(PROMPT, tokenize=False, add_generation_prompt=True)
    inputs = tokenizer([text] * args.batch, return_tensors="pt", padding=True)
    prompt_tokens = int(inputs["input_ids"].shape[1])
    length = prompt_tokens + args.new_tokens
    parameters = sum(p.numel() for p in model.parameters())

    def generate() -> float:
        started = time.perf_counter()
        with torch.no_grad():
            model.generate(
                **inputs,
                do_sample=True,
                temperature=0.7,
                max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens,
                pad_token_id=tokenizer.pad_token_id,
            )
        return args.batch * args.new_tokens / (time.perf_counter() - started)

    batch = torch.randint(0, model.config.vocab_size, (args.batch, length))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)

    def train() -> float:
        started = time.perf_counter()
        model.train()
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return args.batch * length / (time.perf_counter() - started)

    hidden, intermediate = model.config.hidden_size, model.config.intermediate_size
    left, right = torch.randn(args.batch * length, hidden), torch.randn(hidden, intermediate)

    def matmul() -> float:
        calls, started = 0, time.perf_counter()
        with torch.no_grad():
            while not calls or time.perf_counter() - started < MATMUL_MIN_SECONDS:
                torch.matmul(left, right)
                calls += 1
        return 2 * left.shape[0] * hidden * intermediate * calls / (time.perf_counter() - started)

    matmul_flops = best_rate(matmul, args.repeats)
    model.eval()
    generation = best_rate(generate, args.repeats)
    training = best_rate(train, args.repeats)
    generation_flops, training_flops = 2 * parameters * generation, 6 * parameters * training
    threads = torch.get_num_threads()

    print(
        f"{model_name} ({parameters:,} parameters), torch {torch.__version__}, {threads} threads, "
        f"batch {args.batch}, {prompt_tokens}+{args.new_tokens} tokens, best of {args.repeats}"
    )
    print(f"{'what':<56} {'tokens/s':>9} {'GFLOP/s':>8} {'of matmul':>9}")
    rows = [
        (f"baseline: fp32 matmul [{left.shape[0]}x{hidden}] x [{hidden}x{intermediate}]", None, matmul_flops),
        ("generation: model.generate, T=0.7 (2 FLOPs/param/token)", generation, generation_flops),
        ("training: forward + backward + AdamW (6 FLOPs/param/token)", training, training_flops),
    ]
    for label, tokens_per_s, flops in rows:
        rate = "" if tokens_per_s is None else f"{tokens_per_s:.1f}"
        print(f"{label:<56} {rate:>9} {flops / 1e9:>8.2f} {flops / matmul_flops:>9.3f}")
    print("row for training/throughputs.csv (raw rates; fill in the RAM, then correct by measured GRPO steps):")
    print(
        f"cpu-2core,{model_name},{parameters},{generation:.0f},{training:.0f},fp32,<RAM GiB>,"
        f'"bench/bench_plan_throughput.py (torch {torch.__version__}, {threads} threads, '
        f'batch {args.batch}, {prompt_tokens}+{args.new_tokens} tokens)",{datetime.date.today().isoformat()}'
    )
    figures = {
        "bench": "plan_throughput",
        "model": str(model_dir),
        "parameters": parameters,
        "threads": threads,
        "torch": torch.__version__,
        "batch": args.batch,
        "prompt_tokens": prompt_tokens,
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "generation_tokens_per_s": round(generation, 1),
        "training_tokens_per_s": round(training, 1),
        "matmul_gflops": round(matmul_flops / 1e9, 2),
        "generation_gflops": round(generation_flops / 1e9, 2),
        "training_gflops": round(training_flops / 1e9, 2),
        "generation_of_matmul": round(generation_flops / matmul_flops, 4),
        "training_of_matmul": round(training_flops / matmul_flops, 4),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
