"""The warm-up's loss projects only the answer's positions through the output layer (`training.answer_loss`): the
same loss and gradients as TRL's own, with the output layer run on the answer's tokens alone."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from datasets import Dataset
from trl import SFTConfig, SFTTrainer

from training.answer_loss import AnswerLossSFTTrainer
from training.grpo import runtime_defaults
from training.sft import tokenized_rows
from training.tiny_model import load_policy

CHATS = [
    ([{"role": "user", "content": "What is 2 + 3? Answer with #### and the number. " * 4}], "#### 5"),
    ([{"role": "user", "content": "Name a colour."}], "Blue, the colour of a clear sky."),
]


def trainer(cls: type[SFTTrainer], model_dir: Path, out: Path, *, bf16: bool = False) -> SFTTrainer:
    model, tokenizer = load_policy(model_dir)
    examples = [
        {"prompt": prompt, "completion": [{"role": "assistant", "content": answer}]} for prompt, answer in CHATS
    ]
    rows = tokenized_rows(tokenizer, examples, max_length=4096)
    config = SFTConfig(
        **{**runtime_defaults(prefer_vllm=False), "bf16": bf16},
        output_dir=str(out),
        per_device_train_batch_size=2,
        padding_free=True,
        max_length=None,
        completion_only_loss=True,
    )
    return cls(model=model, args=config, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
def test_the_answer_only_loss_and_its_gradients_are_trls(tiny_model_dir: Path, tmp_path: Path, bf16: bool) -> None:
    ours, theirs = (
        trainer(cls, tiny_model_dir, tmp_path / cls.__name__, bf16=bf16) for cls in (AnswerLossSFTTrainer, SFTTrainer)
    )
    batch = next(iter(ours.get_train_dataloader()))
    answer_tokens = int((batch["labels"][:, 1:] != -100).sum())
    assert 0 < answer_tokens < batch["input_ids"].shape[1] // 2  # most positions are the prompts'
    projected: list[tuple[int, torch.dtype]] = []
    head = ours.model.get_output_embeddings()
    hook = head.register_forward_hook(lambda _m, args, out: projected.append((args[0].shape[0], out.dtype)))
    losses, grads = [], []
    for run in (ours, theirs):
        run.model.train()
        run.model.zero_grad()
        # Training runs TRL's loss through the prepared model, whose `forward` autocasts; ours enters it itself.
        with theirs.accelerator.autocast() if run is theirs else contextlib.nullcontext():
            loss = run.compute_loss(
                run.model, {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            )
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append(torch.cat([p.grad.flatten() for p in run.model.parameters() if p.grad is not None]))
    hook.remove()
    # The output layer saw the answer's positions and nothing else, in the run's precision.
    assert projected == [(answer_tokens, torch.bfloat16 if bf16 else torch.float32)]
    # In bf16, the same sums rounded to its 8 bits of mantissa in other places.
    rel = 1e-2 if bf16 else 1e-5
    assert losses[0] == pytest.approx(losses[1], rel=rel)
    if bf16:
        assert float(F.cosine_similarity(grads[0], grads[1], dim=0)) > 0.99
    else:
        assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-7)
    # TRL's own metrics, as its loss logs them.
    for name in ("mean_token_accuracy", "entropy", "num_tokens"):
        assert ours._metrics["train"][name] == pytest.approx(theirs._metrics["train"][name], rel=10 * rel), name
