"""A real DPO run with TRL on the tiny model, from pairs built out of verified rollouts; eval pairs are refused;
an episode's tool results are not trained on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from training.dpo import AssistantTokensCollator, run_dpo
from training.episodes import chat_messages
from training.preferences import EvalLeakError, PreferenceDataError, build_preference_pairs
from training.tiny_model import load_policy
from training.tracking import TrackingConfig, local_store_uri

SYSTEM = "Answer with #### <number>."
TASKS = [
    {
        "task_id": f"add-{a}",
        "family": "arithmetic",
        "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {a} + 1?"}],
    }
    for a in range(4)
]
# The tiny model's DPO settings: a learning rate that moves a random model in a step or two, no progress bars.
TINY_DPO: dict[str, Any] = {"learning_rate": 1e-2, "max_length": 512, "overrides": {"disable_tqdm": True}}
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
            ids = tokenizer.apply_chat_template(pair["prompt"] + chat_messages(pair[side]))["input_ids"]
            with torch.no_grad():
                logps = model(torch.tensor([ids])).logits[0, :-1].log_softmax(-1)
            margin += sign * float(logps.gather(1, torch.tensor(ids[1:])[:, None])[start:].sum())
    return margin


def test_one_dpo_run_moves_the_policy_towards_the_chosen_answers(tiny_model_dir: Path, tmp_path: Path) -> None:
    import torch
    from mlflow import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    pairs = build_preference_pairs(ROLLOUTS, TASKS, split="train", source="difficulty_profile").pairs
    tracking = TrackingConfig(local_store_uri(tmp_path / "mlflow"), str(tmp_path / "tensorboard"))
    # Two steps on one batch of 4 pairs (~1 s), reported to a local MLflow store and TensorBoard.
    result = run_dpo(
        pairs,
        tiny_model_dir,
        tmp_path / "dpo",
        max_steps=2,
        batch_size=4,
        tracking=tracking,
        **TINY_DPO,
    )
    assert (result.steps, result.train_rows) == (2, 4)
    assert all(m["grad_norm"] > 0 for m in result.metrics if "loss" in m)
    # The preference margins' curve, in MLflow and in TensorBoard.
    assert result.tracked is not None and result.tracked.run_id and result.tracked.tensorboard_dir
    history = MlflowClient(tracking.mlflow_uri).get_metric_history(result.tracked.run_id, "rewards/margins")
    assert [m.step for m in history] == [1, 2]
    events = EventAccumulator(result.tracked.tensorboard_dir)
    events.Reload()
    assert [e.step for e in events.Scalars("train/rewards/margins")] == [1, 2]
    # Measured on the models, not from the trainer's logs: the chosen answers gained on the rejected ones.
    assert preference_margin(result.checkpoint_dir, pairs) > preference_margin(tiny_model_dir, pairs)
    trained, _ = load_policy(result.checkpoint_dir)
    start, _ = load_policy(tiny_model_dir)
    before = dict(start.named_parameters())
    assert any(not torch.equal(before[name], p) for name, p in trained.named_parameters())


def call_turn(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    """An assistant turn with one call, as training.episodes stores it: the text it wrote and the parsed call."""
    written = json.dumps({"name": name, "arguments": arguments})
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": f"<tool_call>{written}</tool_call>",
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


SHOP = [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": "Cancel order 1027."}]
# Per task: cancelling the order passed; claiming it without a call failed (as episode rollouts keep them).
EPISODES = [
    {
        "task_id": f"shop-{n}",
        "sample": i,
        "completion": "",  # the pair's sides are the turns
        "turns": turns,
        "passed": ok,
        "score": float(ok),
        "reason": "",
    }
    for n in range(4)
    for i, (turns, ok) in enumerate(
        [
            (
                [
                    call_turn("cancel_order", {"order_id": 1027 + n}, "call_1"),
                    {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "cancelled"}'},
                    {"role": "assistant", "content": "Cancelled."},
                ],
                True,
            ),
            ([{"role": "assistant", "content": "Done, it is cancelled."}], False),
        ]
    )
]


def test_episode_pairs_train_on_what_the_policy_read(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    from datasets import Dataset

    tasks = [{"task_id": f"shop-{n}", "family": "episode", "prompt": SHOP} for n in range(4)]
    pairs = build_preference_pairs(EPISODES, tasks, split="train", source="difficulty_profile").pairs
    assert all(len(pair["chosen"]) == 3 for pair in pairs)  # the whole episode, tool result included
    given: list[dict[str, Any]] = []
    from_list = Dataset.from_list
    monkeypatch.setattr(Dataset, "from_list", lambda rows, *a, **k: given.extend(rows) or from_list(rows, *a, **k))

    result = run_dpo(
        pairs,
        tiny_model_dir,
        tmp_path / "dpo",
        max_steps=2,
        batch_size=4,
        **TINY_DPO,
    )

    assert (result.steps, result.train_rows) == (2, 4)
    # TRL got each message's role and content: the calls once, in the text the model wrote, not again from
    # `tool_calls` (the chat template would render both).
    assert [row["chosen"] for row in given] == [chat_messages(pair["chosen"]) for pair in pairs]
    assert preference_margin(result.checkpoint_dir, pairs) > preference_margin(tiny_model_dir, pairs)


def cancel_side(result: str) -> list[dict[str, Any]]:
    """An episode side: the call, then what the tool returned (an episode cut off after its results)."""
    return [
        call_turn("cancel_order", {"order_id": 1027}, "call_1"),
        {"role": "tool", "tool_call_id": "call_1", "content": result},
    ]


def test_the_collator_cuts_each_sides_completion_mask() -> None:
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    example = {
        "prompt_ids": [5, 6],
        "chosen_ids": [7, 8, 9],
        "rejected_ids": [7, 4],
        "chosen_mask": [0, 0, 1, 0, 1],
        "rejected_mask": [0, 0, 1, 1],
    }
    collate = AssistantTokensCollator(DataCollatorForPreference(pad_token_id=0, max_length=4))
    assert collate([example])["completion_mask"].tolist() == [[0, 0, 1, 0], [0, 0, 1, 1]]
    with pytest.raises(PreferenceDataError, match="rejected side of a pair: the assistant mask covers 3 tokens"):
        collate([{**example, "rejected_mask": [0, 0, 1]}])


def test_tool_results_are_not_the_policys_tokens(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Two sides the policy wrote alike, that differ only in what the tool returned: DPO sees no preference."""
    pair = {
        "prompt": SHOP,
        "chosen": cancel_side('{"status": "cancelled"}'),
        "rejected": cancel_side('{"error": "order 1027 has shipped"}'),
        "split": "train",
    }
    result = run_dpo(
        [pair, pair],
        tiny_model_dir,
        tmp_path / "dpo",
        max_steps=1,
        batch_size=2,
        **TINY_DPO,
    )
    [logged] = [m for m in result.metrics if "grad_norm" in m]
    # The policy's own tokens and what they follow are the same on both sides, so their log-probabilities move
    # together and the loss has no gradient; counting the tool results' tokens would give one.
    assert logged["grad_norm"] == pytest.approx(0.0, abs=1e-6)


def test_eval_pairs_are_refused_before_any_training(tmp_path: Path) -> None:
    pairs = build_preference_pairs(ROLLOUTS, TASKS, split="eval", source="checkpoint_eval").pairs
    with pytest.raises(EvalLeakError, match="4 eval-split pair"):
        run_dpo(pairs, "never-loaded", tmp_path / "dpo")
    assert not (tmp_path / "dpo").exists()
