"""The CPU row of `training/throughputs.csv`: `.venv/bin/python bench/bench_plan_throughput.py [--model DIR]`.

Measures, on this machine, the two rates `seedwheel plan` turns tokens into seconds with, for the bundled
SmolLM2-135M-Instruct by default, under the quickstart's GRPO conditions (fp32, torch's default threads, as the
`python -m training.grpo_job` child runs):

- **generation tokens/s**: `model.generate` (what TRL's GRPO generates with on CPU) for a batch of `--batch`
  copies of a real training prompt (chat template applied), sampling at T=0.7, every row forced to
  `--new-tokens` tokens; completion tokens over wall time, prefill included.
- **training tokens/s**: forward + backward + an AdamW step over `--batch` sequences of prompt + completion
  length (the tokens a GRPO step trains on); tokens over wall time.

Each figure is the best of `--repeats` runs after one warm-up (the machine is shared). Prints the figures and the
CSV row to paste, with today's date and the torch version.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

PROMPT = [
    {"role": "system", "content": "Extract the contact as JSON with the fields name, age and city."},
    {"role": "user", "content": "Maria Lopez, 34, moved to Valencia last spring after ten years in Lisbon."},
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="Model directory (default: the bundled SmolLM2-135M-Instruct)")
    parser.add_argument("--batch", type=int, default=8, help="Completions per batch (the quickstart's GRPO step: 8)")
    parser.add_argument("--new-tokens", type=int, default=48, help="Tokens per completion (quickstart: 48)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llm.models import bundled_model
    from pipeline.settings import Settings

    model_dir = Path(args.model or bundled_model(Settings.from_env().models_dir))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    text = tokenizer.apply_chat_template(PROMPT, tokenize=False, add_generation_prompt=True)
    inputs = tokenizer([text] * args.batch, return_tensors="pt", padding=True)
    prompt_tokens = int(inputs["input_ids"].shape[1])

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

    length = prompt_tokens + args.new_tokens
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

    model.eval()
    generate()
    generation = max(generate() for _ in range(args.repeats))
    train()
    training = max(train() for _ in range(args.repeats))
    parameters = sum(p.numel() for p in model.parameters())
    figures = {
        "model": str(model_dir),
        "parameters": parameters,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "batch": args.batch,
        "prompt_tokens": prompt_tokens,
        "new_tokens": args.new_tokens,
        "generation_tokens_per_s": round(generation, 1),
        "training_tokens_per_s": round(training, 1),
    }
    print(json.dumps(figures))
    print(
        f"cpu-2core,SmolLM2-135M-Instruct,{parameters},{generation:.0f},{training:.0f},fp32,<RAM GiB>,"
        f'"bench/bench_plan_throughput.py (torch {torch.__version__}, {torch.get_num_threads()} threads, '
        f'batch {args.batch}, {prompt_tokens}+{args.new_tokens} tokens)",{datetime.date.today().isoformat()}'
    )


if __name__ == "__main__":
    main()
