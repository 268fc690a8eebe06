"""A real DPO run with TRL on the tiny model, from pairs built out of verified rollouts; eval pairs are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from training.dpo import run_dpo
from training.preferences import EvalLeakError, build_preference_pairs
from training.tiny_model import load_policy

SYSTEM = "Answer with #### <number>."
TASKS = [
    {
        "task_id": f"add-{a}",
        "family": "arithmetic",
        "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {a} + 1?"}],
    }
    for a in range(4)
]
# Per task: the right answer passed, a wrong one failed (as difficulty_profile keeps them).
ROLLOUTS = [
    {"task_id": f"add-{a}", "sample": i, "completion": text, "passed": ok, "score": float(ok), "reason": ""}
    for a in range(4)
    for i, (text, ok) in enumerate([(f"#### {a + 1}", True), (f"#### {a + 7}", False)])
]


def preference_margin(model_dir: Path, pairs: list[dict[str, Any]]) -> float:
    """Summed over pairs: log p(chosen | prompt) - log p(rejected | prompt), read from the model itself."""
    import torch

    model, tokenizer = load_policy(model_dir)
    margin = 0.0
    for pair in pairs:
        start = len(tokenizer.apply_chat_template(pair["prompt"], add_generation_prompt=True)["input_ids"]) - 1
        for sign, side in ((1.0, "chosen"), (-1.0, "rejected")):
            ids = tokenizer.apply_chat_template(pair["prompt"] + pair[side])["input_ids"]
            with torch.no_grad():
                logps = model(torch.tensor([ids])).logits[0, :-1].log_softmax(-1)
            margin += sign * float(logps.gather(1, torch.tensor(ids[1:])[:, None])[start:].sum())
    return margin


def test_one_dpo_run_moves_the_policy_towards_the_chosen_answers(tiny_model_dir: Path, tmp_path: Path) -> None:
    import torch

    pairs = build_preference_pairs(ROLLOUTS, TASKS, split="train", source="difficulty_profile").pairs
    # Two steps on one batch of 4 pairs (~1 s).
    result = run_dpo(
        pairs,
        tiny_model_dir,
        tmp_path / "dpo",
        max_steps=2,
        learning_rate=1e-2,
        batch_size=4,
        max_length=512,
        overrides={"disable_tqdm": True},
    )
    assert (result.steps, result.train_rows) == (2, 4)
    assert all(m["grad_norm"] > 0 for m in result.metrics if "loss" in m)
    # Measured on the models, not from the trainer's logs: the chosen answers gained on the rejected ones.
    assert preference_margin(result.checkpoint_dir, pairs) > preference_margin(tiny_model_dir, pairs)
    trained, _ = load_policy(result.checkpoint_dir)
    start, _ = load_policy(tiny_model_dir)
    before = dict(start.named_parameters())
    assert any(not torch.equal(before[name], p) for name, p in trained.named_parameters())


def test_eval_pairs_are_refused_before_any_training(tmp_path: Path) -> None:
    pairs = build_preference_pairs(ROLLOUTS, TASKS, split="eval", source="checkpoint_eval").pairs
    with pytest.raises(EvalLeakError, match="4 eval-split pair"):
        run_dpo(pairs, "never-loaded", tmp_path / "dpo")
    assert not (tmp_path / "dpo").exists()
