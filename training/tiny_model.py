"""A tiny Qwen2-style causal LM with random weights, built locally: the fast stand-in model of the unit tests.

No hub access is needed: the tokenizer is a byte-level BPE trained with `tokenizers` on texts the caller
gives (seed prompts and references) under Qwen2's pre-tokenizer, saved as a `Qwen2Tokenizer` (a
`PreTrainedTokenizerFast`) with Qwen2.5's ChatML template (the copy TRL ships in `trl.chat_template_utils`),
eos `<|im_end|>`, pad `<|endoftext|>` and left padding. The result is an ordinary model directory, so everything
downstream loads it exactly as it would load a real model id: `AutoModelForCausalLM.from_pretrained(path_or_id)`,
`seedwheel serve --model PATH`, TRL's `GRPOTrainer(model=PATH)`.

The weights are random, so the model writes garbage: good for testing transport, training mechanics and
parse-failure handling, never for judging quality.

A build is deterministic for a given seed, texts (as a multiset: their order does not matter) and library
versions, and it is recorded in a small fingerprint file (`seedwheel_build.json`) in the model directory.
Building again with the same inputs reuses the directory; with other inputs it replaces it. The build is
atomic (`langmodels.models.build_model_dir`): a killed build never leaves a half-written model directory in its place.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core import SeedwheelError
from langmodels.models import build_model_dir, package_version

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

# Bump when the build recipe changes in a way that changes the output for the same params.
BUILD_FORMAT = 1

PAD_TOKEN = "<|endoftext|>"
BOS_OF_TURN = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, BOS_OF_TURN, EOS_TOKEN)
_VERSIONED_PACKAGES = ("torch", "transformers", "tokenizers", "trl")


class TinyModelError(SeedwheelError, ValueError):
    """Bad parameters for a tiny model, or a target directory that is not a tiny-model build."""


@dataclass(frozen=True)
class TinyModelSpec:
    """The parameters of one tiny-model build (everything but the texts), checked on construction.

    Args:
        vocab_size: Upper bound of the BPE vocabulary, special tokens and the 256 byte symbols included;
            small corpora stop earlier, and the model's vocabulary is the tokenizer's real size.
        hidden_size: Width of the model; a multiple of `num_attention_heads`.
        num_layers: Number of decoder layers.
        num_attention_heads: Query heads; a multiple of `num_key_value_heads`.
        num_key_value_heads: Key/value heads (grouped-query attention as in Qwen2).
        intermediate_size: Width of the MLP.
        max_position_embeddings: Longest sequence (prompt + completion) in tokens.
        min_frequency: A BPE merge needs a pair seen at least this often in the texts.
        seed: Seed for the weight initialisation.
    """

    vocab_size: int = 1024
    hidden_size: int = 64
    num_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 128
    max_position_embeddings: int = 4096
    min_frequency: int = 2
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size"):
            if getattr(self, name) < 1:
                raise TinyModelError(f"{name} must be at least 1, got {getattr(self, name)}.")
        floor = 256 + len(SPECIAL_TOKENS)
        if self.vocab_size < floor:
            raise TinyModelError(
                f"vocab_size ({self.vocab_size}) must be at least {floor}: 256 byte symbols plus "
                f"{len(SPECIAL_TOKENS)} special tokens. Use vocab_size >= {floor}."
            )
        if self.hidden_size % self.num_attention_heads:
            raise TinyModelError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads}); e.g. hidden_size={self.num_attention_heads * 16}."
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise TinyModelError(
                f"num_attention_heads ({self.num_attention_heads}) must be divisible by num_key_value_heads "
                f"({self.num_key_value_heads}); e.g. num_key_value_heads=1."
            )
        if (self.hidden_size // self.num_attention_heads) % 2:
            raise TinyModelError(
                f"The head size hidden_size / num_attention_heads = {self.hidden_size // self.num_attention_heads} "
                "must be even for rotary embeddings; change hidden_size or num_attention_heads."
            )
        if self.max_position_embeddings < 16 or self.min_frequency < 1:
            raise TinyModelError(
                f"max_position_embeddings ({self.max_position_embeddings}) must be >= 16 and min_frequency "
                f"({self.min_frequency}) >= 1."
            )


def build_tiny_model(
    out_dir: str | os.PathLike[str],
    texts: Iterable[str],
    *,
    vocab_size: int = 1024,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    intermediate_size: int = 128,
    max_position_embeddings: int = 4096,
    min_frequency: int = 2,
    seed: int = 0,
) -> Path:
    """Build (or reuse) a tiny random Qwen2-style chat model with a BPE tokenizer trained on `texts`.

    Args:
        out_dir: The model directory to create. Reused as is when it holds a build with the same fingerprint;
            replaced when it holds a tiny-model build with another fingerprint. A non-empty directory that is
            not a model build is never touched (`langmodels.models.ModelBuildError`).
        texts: Text the tokenizer learns its merges from, e.g. seed prompts and references. Their order does
            not matter; an empty corpus gives a pure byte-level tokenizer.
        vocab_size: Upper bound of the vocabulary (see `TinyModelSpec`).
        hidden_size: Model width.
        num_layers: Decoder layers.
        num_attention_heads: Query heads.
        num_key_value_heads: Key/value heads.
        intermediate_size: MLP width.
        max_position_embeddings: Longest sequence in tokens.
        min_frequency: Minimum pair count for a BPE merge.
        seed: Seed for the weights.

    Returns:
        The model directory (absolute), loadable with `AutoModelForCausalLM.from_pretrained` and
        `AutoTokenizer.from_pretrained`, servable with `seedwheel serve`.

    Example:
        >>> path = build_tiny_model(tmp / "tiny", ["What is 2 + 3?", "5"], hidden_size=32)  # doctest: +SKIP
        >>> AutoModelForCausalLM.from_pretrained(path)  # doctest: +SKIP
    """
    spec = TinyModelSpec(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_layers=num_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        min_frequency=min_frequency,
        seed=seed,
    )
    corpus = _checked_texts(texts)
    fingerprint = build_fingerprint(spec, corpus)
    return build_model_dir(out_dir, fingerprint, lambda staging: _build_into(staging, spec, corpus))


def build_fingerprint(spec: TinyModelSpec, texts: list[str]) -> dict[str, Any]:
    """The identity of a build: its parameters, a hash of the texts, and the versions that shape the output.

    Args:
        spec: The build parameters.
        texts: The tokenizer corpus (order does not matter).

    Returns:
        A JSON-serialisable dict; two builds with equal fingerprints produce the same model directory.

    Example:
        >>> build_fingerprint(TinyModelSpec(), ["a", "b"])["texts_sha256"][:8]  # doctest: +SKIP
    """
    digest = hashlib.sha256()
    for text in sorted(texts):
        encoded = text.encode("utf-8")
        digest.update(len(encoded).to_bytes(8, "big"))  # length prefix: ["ab", "c"] != ["a", "bc"]
        digest.update(encoded)
    return {
        "builder": "seedwheel.training.tiny_model",
        "format": BUILD_FORMAT,
        "params": asdict(spec),
        "texts_sha256": digest.hexdigest(),
        "n_texts": len(texts),
        "versions": {name: package_version(name) for name in _VERSIONED_PACKAGES},
    }


def load_policy(
    path_or_id: str | os.PathLike[str], *, dtype: Any = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer the same way for a tiny-model directory and a real model id.

    Args:
        path_or_id: A model directory (e.g. from `build_tiny_model`) or a hub id (needs the hub or its cache).
        dtype: Torch dtype for the weights; `None` keeps the checkpoint's.

    Returns:
        `(model, tokenizer)`; the model is in eval mode.

    Example:
        >>> model, tokenizer = load_policy(build_tiny_model(tmp / "tiny", texts))  # doctest: +SKIP
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = str(path_or_id)
    tokenizer = AutoTokenizer.from_pretrained(name)
    kwargs = {} if dtype is None else {"dtype": dtype}
    model = AutoModelForCausalLM.from_pretrained(name, **kwargs)
    model.eval()
    return model, tokenizer


def _checked_texts(texts: Iterable[str]) -> list[str]:
    if isinstance(texts, (str, bytes)):
        raise TypeError("texts must be an iterable of strings, not one string: wrap it in a list.")
    corpus = list(texts)
    for index, text in enumerate(corpus):
        if not isinstance(text, str):
            raise TypeError(f"texts[{index}] is {type(text).__name__}, expected str.")
    return sorted(corpus)


def _build_into(directory: Path, spec: TinyModelSpec, texts: list[str]) -> None:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = _train_tokenizer(spec, texts)
    pad_id, eos_id = tokenizer.pad_token_id, tokenizer.eos_token_id  # PAD_TOKEN's and EOS_TOKEN's ids
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=pad_id,
        bos_token_id=None,
        eos_token_id=eos_id,
        dtype="float32",
    )
    # A private generator state: the caller's global RNG is left as it was.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = Qwen2ForCausalLM(config)
    # Sampling by default, as real chat models ship: greedy decoding of random weights tends to repeat one token
    # (often whitespace, which reads as an empty reply). Callers still pass their own.
    model.generation_config = GenerationConfig(
        eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None, do_sample=True, temperature=1.0, top_k=0
    )
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def _train_tokenizer(spec: TinyModelSpec, texts: list[str]) -> PreTrainedTokenizerBase:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    # transformers 5 loads a `qwen2` model's tokenizer as `Qwen2Tokenizer`, which rebuilds its pipeline
    # (NFC, Qwen's split regex, byte-level) around the saved vocab and merges. Training under that same pipeline
    # keeps the merges meaningful and makes the saved tokenizer encode exactly like the reloaded one.
    pipeline = Qwen2Tokenizer().backend_tokenizer
    backend = Tokenizer(models.BPE())
    backend.normalizer = pipeline.normalizer
    backend.pre_tokenizer = pipeline.pre_tokenizer
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        min_frequency=spec.min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer, length=len(texts))
    trained = json.loads(backend.to_str())["model"]
    return Qwen2Tokenizer(
        vocab=trained["vocab"],
        merges=[tuple(pair) for pair in trained["merges"]],  # type: ignore[misc]  # BPE takes pairs; annotated str
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        unk_token=None,  # type: ignore[arg-type]  # annotated str; byte-level BPE needs no unknown token
        extra_special_tokens=[BOS_OF_TURN],
        padding_side="left",
        model_max_length=spec.max_position_embeddings,
        chat_template=qwen2_5_chat_template,
    )
