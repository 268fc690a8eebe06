"""SFT's loss from the answer tokens' logits alone: TRL's `SFTTrainer`, with the output layer run where it is learnt.

With `completion_only_loss`, only what the assistant wrote is learnt, yet off Triton devices TRL's fused output
layer projects every position and zeroes the prompt's afterwards (it keeps tile shapes fixed for compilers such
as Neuron's). On CPU that layer, 49,152 words by 576 for SmolLM2-135M, is about a fifth of a forward and backward
pass, and most positions of a warm-up example are its prompt's. `AnswerLossSFTTrainer` runs the model's backbone,
then the output layer on the positions whose next token is learnt: the same loss and gradients (a test compares
them with TRL's), with the output layer's work cut to the answer's share. It logs the metrics TRL logs
(`mean_token_accuracy`, `entropy`, `num_tokens`), over the same positions.

Imported by `training.sft.run_sft` when it trains, as TRL is.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from trl import SFTTrainer

IGNORED = -100  # the label of a position that is not learnt (the prompt, padding), as transformers marks it


class AnswerLossSFTTrainer(SFTTrainer):
    """TRL's `SFTTrainer` whose training loss projects only the learnt positions through the output layer."""

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        # One process (CPU, one GPU): TRL scales the loss for several, and evaluation asks for the outputs.
        if return_outputs or not model.training or "labels" not in inputs or self.accelerator.num_processes > 1:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        causal_lm = self.accelerator.unwrap_model(model)
        if hasattr(causal_lm, "get_base_model"):  # a LoRA-wrapped model: its adapters live in the base model's layers
            causal_lm = causal_lm.get_base_model()
        features = {name: value for name, value in inputs.items() if name != "labels"}
        targets = inputs["labels"][:, 1:]
        learnt = targets != IGNORED
        # The unwrapped model's layers run outside the autocast the trainer wraps `forward` in (bf16 runs): enter it.
        with self.accelerator.autocast():
            hidden = causal_lm.base_model(**features, use_cache=False).last_hidden_state[:, :-1]
            logits = causal_lm.get_output_embeddings()(hidden[learnt]).float()
        learnt_targets = targets[learnt]
        answer_tokens = len(learnt_targets)
        count = answer_tokens if num_items_in_batch is None else num_items_in_batch
        loss = F.cross_entropy(logits, learnt_targets, reduction="sum") / torch.as_tensor(count).clamp(min=1)
        # The metrics TRL's own loss logs (its bookkeeping: `_metrics`, `_total_train_tokens`), over the same tokens.
        with torch.no_grad():
            log_probs = logits.log_softmax(dim=-1)
            metrics = self._metrics["train"]
            answer = max(answer_tokens, 1)
            metrics["entropy"].append(float(-(log_probs.exp() * log_probs).sum() / answer))
            metrics["mean_token_accuracy"].append(float((logits.argmax(dim=-1) == learnt_targets).sum() / answer))
            # A padding-free batch is one row of real tokens; a padded one counts its attention mask.
            mask = inputs.get("attention_mask")
            self._total_train_tokens += int(mask.sum()) if mask is not None else inputs["position_ids"].size(1)
            metrics["num_tokens"] = [self._total_train_tokens]
        return loss
