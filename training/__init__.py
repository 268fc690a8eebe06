"""GRPO hand-off, the tiny local model, evaluation and promotion. Pure Python (+torch/trl/vllm, imported lazily)."""
