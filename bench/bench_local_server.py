"""Generation speed of the local model server's engine: `.venv/bin/python bench/bench_local_server.py [--model DIR]`.

Tokens per second of `langmodels.generation.Engine` (what `seedwheel serve` runs) on the bundled SmolLM2-135M-Instruct
by default, for one sequence and for a batch of 8 (one request with n=8, as the batching worker would gather
8 concurrent requests), each unconstrained and constrained by a JSON Schema (llguidance masks every step).
For reference, the same one-sequence and batch-of-8 runs through `model.generate` (unconstrained; it cannot take
per-row grammars or temperatures), forced to the same length.

Every row runs to `--max-tokens`, so the cases compare like with like: EOS is switched off for the free rows (as
`min_new_tokens` does for `generate`), and the schema's story must be longer than the budget. Rows sample at T=1.0;
tokens/s is generated tokens over wall time (prefill included). Each case runs `--repeats` times after one warm-up;
the best run counts (the machine is shared).

The judge cases measure the prefill: batches of 8 real judge requests (the rubric, about 1.1k tokens, is the
same system message for every task; seed tasks of every family in turn as the data, so a batch mixes a long tool
list with short questions), answers of 16 tokens. First with prefix sharing off (`prefix_cache_entries=0`, every
prompt prefilled whole) and one padded prefill per batch (`prefill_padding=None`), then with prefix sharing, then
with rows of very different lengths also prefilled apart (the engine's default); the speedups are their ratios,
measured in this run.

The decode-room cases measure the decode loop over a long prompt: 16 samples of the longest of 8 judge requests
(about 2k tokens, one prefill) that all run to `--max-tokens`, first with every step concatenating onto the KV
cache (`decode_room=None`, the baseline), then writing into room reserved after the prompt (the engine's
default); the speedup is their ratio. Prints a table, then every figure as one JSON object on the last line.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from judge.prompt import judge_messages  # noqa: E402
from judge.rubric import DEFAULT_RUBRIC  # noqa: E402
from langmodels.generation import (  # noqa: E402
    DECODE_ROOM,
    PREFILL_PADDING,
    PREFIX_CACHE_ENTRIES,
    Engine,
    GenerationRequest,
    GenerationResult,
)
from langmodels.models import bundled_model  # noqa: E402
from validators.seeds import load_seeds  # noqa: E402

JUDGE_BATCH = 8
ROOM_BATCH = 16  # rows of the decode-room cases: the gate's and the difficulty profile's batch

PROMPT = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]
SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 40},
        "story": {"type": "string", "minLength": 2000},  # longer than any budget here: the row never ends early
        "words": {"type": "integer"},
    },
    "required": ["title", "story", "words"],
    "additionalProperties": False,
}


def fastest_run(engine: Engine, request: GenerationRequest, repeats: int) -> tuple[dict[str, Any], GenerationResult]:
    """The fastest of `repeats` runs of `request` after one warm-up, every row decoded to its `max_tokens` (EOS off),
    and the last run's result."""
    stop_ids, engine.stop_ids = engine.stop_ids, frozenset()
    best: dict[str, Any] = {}
    for attempt in range(repeats + 1):
        started = time.perf_counter()
        [result] = engine.generate([request])
        elapsed = time.perf_counter() - started
        rate = result.completion_tokens / elapsed
        if attempt and rate > best.get("tokens_per_s", 0):  # attempt 0 warms up
            best = {"tokens": result.completion_tokens, "seconds": round(elapsed, 2), "tokens_per_s": round(rate, 1)}
    engine.stop_ids = stop_ids
    return best, result


def engine_case(engine: Engine, rows: int, max_tokens: int, constrained: bool, repeats: int) -> dict[str, Any]:
    grammar = engine.json_grammar(SCHEMA) if constrained else None
    request = GenerationRequest(
        engine.prompt_ids(PROMPT), n=rows, max_tokens=max_tokens, temperature=1.0, seed=0, grammar=grammar
    )
    best, result = fastest_run(engine, request, repeats)
    if constrained:  # cut inside the story: the text so far is the schema's opening
        assert all(c.text.startswith('{"title": "') for c in result.completions), result.completions
    return best


def generate_case(engine: Engine, rows: int, max_tokens: int, repeats: int) -> dict[str, Any]:
    prompt = torch.tensor([engine.prompt_ids(PROMPT)] * rows, device=engine.device)
    best: dict[str, Any] = {}
    for attempt in range(repeats + 1):
        started = time.perf_counter()
        with torch.inference_mode():
            out = engine.model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                do_sample=True,
                temperature=1.0,
                max_new_tokens=max_tokens,
                min_new_tokens=max_tokens,
                pad_token_id=engine.pad_id,
            )
        elapsed = time.perf_counter() - started
        tokens = (out.shape[1] - prompt.shape[1]) * rows
        if attempt and tokens / elapsed > best.get("tokens_per_s", 0):
            best = {"tokens": tokens, "seconds": round(elapsed, 2), "tokens_per_s": round(tokens / elapsed, 1)}
    return best


def mixed_seed_tasks(count: int) -> list[dict[str, Any]]:
    """`count` seed tasks, the families in turn (a long tool list next to a short question)."""
    by_family: dict[str, list[dict[str, Any]]] = {}
    for task in load_seeds([REPO / "seeds"]).tasks:
        by_family.setdefault(task["family"], []).append(task)
    mixed = [task for group in itertools.zip_longest(*by_family.values()) for task in group if task is not None]
    return mixed[:count]


def room_case(engine: Engine, decode_room: int | None, max_tokens: int, repeats: int) -> dict[str, Any]:
    """16 samples of the longest judge request decoded to `max_tokens` each, with or without reserved room."""
    engine = Engine(engine.model, engine.tokenizer, decode_room=decode_room, prefix_cache_entries=0)
    prompts = [engine.prompt_ids(judge_messages(task, DEFAULT_RUBRIC)) for task in mixed_seed_tasks(JUDGE_BATCH)]
    longest = max(prompts, key=len)
    request = GenerationRequest(longest, n=ROOM_BATCH, max_tokens=max_tokens, temperature=1.0, seed=0)
    best, _ = fastest_run(engine, request, repeats)
    return {**best, "prompt_tokens": len(longest)}


def judge_case(
    engine: Engine, prefix_cache_entries: int, prefill_padding: int | None, max_tokens: int, repeats: int
) -> dict[str, Any]:
    """Batches of 8 judge requests, each a different 8 seed tasks of mixed families (the same rubric), in turn."""
    engine = Engine(
        engine.model, engine.tokenizer, prefix_cache_entries=prefix_cache_entries, prefill_padding=prefill_padding
    )
    tasks = mixed_seed_tasks(JUDGE_BATCH * (repeats + 1))
    prompts = [engine.prompt_ids(judge_messages(task, DEFAULT_RUBRIC)) for task in tasks]
    started = time.perf_counter()
    cached = prompt_tokens = 0
    for first in range(0, len(prompts), JUDGE_BATCH):
        batch = [
            GenerationRequest(p, max_tokens=max_tokens, temperature=0) for p in prompts[first : first + JUDGE_BATCH]
        ]
        results = engine.generate(batch)
        prompt_tokens += sum(r.prompt_tokens for r in results)
        cached += sum(r.cached_tokens for r in results)
    elapsed = time.perf_counter() - started
    return {
        "requests": len(prompts),
        "prompt_tokens": prompt_tokens,
        "cached_prompt_tokens": cached,
        "seconds": round(elapsed, 2),
        "requests_per_s": round(len(prompts) / elapsed, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="Model directory; default: the bundled SmolLM2-135M.")
    parser.add_argument("--models-dir", default=str(Path.home() / ".cache" / "seedwheel-tests" / "models"))
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (the server's default is 1).")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    engine = Engine.load(args.model or str(bundled_model(args.models_dir)))
    figures: dict[str, Any] = {"threads": args.threads, "max_tokens": args.max_tokens}
    for rows in (1, 8):
        for constrained in (False, True):
            name = f"engine_{'json_schema' if constrained else 'free'}_x{rows}"
            figures[name] = engine_case(engine, rows, args.max_tokens, constrained, args.repeats)
        figures[f"hf_generate_free_x{rows}"] = generate_case(engine, rows, args.max_tokens, args.repeats)
    figures[f"long_prompts_concatenated_x{ROOM_BATCH}"] = room_case(engine, None, args.max_tokens, args.repeats)
    figures[f"long_prompts_decode_room_x{ROOM_BATCH}"] = room_case(engine, DECODE_ROOM, args.max_tokens, args.repeats)
    room_speedup = (
        figures[f"long_prompts_decode_room_x{ROOM_BATCH}"]["tokens_per_s"]
        / figures[f"long_prompts_concatenated_x{ROOM_BATCH}"]["tokens_per_s"]
    )
    judge = {
        "judge_baseline": judge_case(engine, 0, None, 16, args.repeats),
        "judge_prefix_sharing": judge_case(engine, PREFIX_CACHE_ENTRIES, None, 16, args.repeats),
        "judge_grouped_prefill": judge_case(engine, PREFIX_CACHE_ENTRIES, PREFILL_PADDING, 16, args.repeats),
    }
    seconds = {name: row["seconds"] for name, row in judge.items()}
    prefix_speedup = seconds["judge_baseline"] / seconds["judge_prefix_sharing"]
    grouping_speedup = seconds["judge_prefix_sharing"] / seconds["judge_grouped_prefill"]
    print(f"{'case':<28} {'tokens':>7} {'seconds':>8} {'tokens/s':>9}")
    for name, row in figures.items():
        if isinstance(row, dict):
            print(f"{name:<28} {row['tokens']:>7} {row['seconds']:>8} {row['tokens_per_s']:>9}")
    print(f"\n{'judge case':<28} {'requests':>8} {'prompt tok':>10} {'cached':>7} {'seconds':>8} {'req/s':>6}")
    for name, row in judge.items():
        print(
            f"{name:<28} {row['requests']:>8} {row['prompt_tokens']:>10} {row['cached_prompt_tokens']:>7} "
            f"{row['seconds']:>8} {row['requests_per_s']:>6}"
        )
    print(f"prefix sharing speedup: {prefix_speedup:.2f}x; grouped prefill on top of it: {grouping_speedup:.2f}x")
    print(f"decode room over long prompts: {room_speedup:.2f}x")
    speedups = {
        "judge_prefix_speedup": round(prefix_speedup, 2),
        "judge_grouping_speedup": round(grouping_speedup, 2),
        "decode_room_speedup": round(room_speedup, 2),
    }
    print(json.dumps({**figures, **judge, **speedups}))


if __name__ == "__main__":
    main()
