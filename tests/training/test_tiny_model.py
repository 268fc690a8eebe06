"""The tiny local model: loads like any model directory, chats, generates, and builds deterministically."""

import hashlib
import json
import random
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from langmodels.models import FINGERPRINT_FILE, ModelBuildError
from tests.training.tiny import TINY_TEXTS
from training.tiny_model import (
    EOS_TOKEN,
    PAD_TOKEN,
    TinyModelError,
    build_tiny_model,
    load_policy,
)

# Smaller still for the tests that build their own copies.
MINI = {"hidden_size": 16, "num_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 300}


def weights_hash(path: Path) -> str:
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def test_loads_offline_with_chat_tokens_and_padding(tiny_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, local_files_only=True)

    assert (tokenizer.eos_token, tokenizer.pad_token, tokenizer.padding_side) == (EOS_TOKEN, PAD_TOKEN, "left")
    assert model.config.vocab_size == len(tokenizer)
    assert model.config.eos_token_id == model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert model.config.pad_token_id == model.generation_config.pad_token_id == tokenizer.pad_token_id
    # Chat markers are single tokens, never split into bytes.
    assert len(tokenizer("<|im_start|>", add_special_tokens=False)["input_ids"]) == 1
    # The merges learned from the texts apply under the tokenizer as reloaded (fewer tokens than bytes).
    text = TINY_TEXTS[1]
    assert len(tokenizer(text, add_special_tokens=False)["input_ids"]) < len(text.encode()) * 0.7
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text


def test_chat_template_and_generate(tiny_model_dir: Path) -> None:
    model, tokenizer = load_policy(tiny_model_dir)
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2 + 3?"}]

    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    short = [{"role": "system", "content": "A"}, {"role": "user", "content": "B"}]
    inputs = tokenizer.apply_chat_template(
        [messages, short], add_generation_prompt=True, padding=True, return_tensors="pt", return_dict=True
    )
    torch.manual_seed(0)
    output = model.generate(**inputs, max_new_tokens=5, min_new_tokens=5)
    assert output.shape == (2, inputs["input_ids"].shape[1] + 5)
    # Left padding: the shorter prompt is padded at the front, so both end where generation starts.
    assert inputs["attention_mask"][1, 0] == 0 and inputs["attention_mask"][:, -1].tolist() == [1, 1]


def test_same_texts_and_seed_give_identical_builds(tmp_path: Path) -> None:
    shuffled = list(TINY_TEXTS)
    random.Random(7).shuffle(shuffled)

    first = build_tiny_model(tmp_path / "a", TINY_TEXTS, **MINI, seed=3)
    second = build_tiny_model(tmp_path / "b", shuffled, **MINI, seed=3)  # text order does not matter
    other_seed = build_tiny_model(tmp_path / "c", TINY_TEXTS, **MINI, seed=4)

    assert weights_hash(first) == weights_hash(second) != weights_hash(other_seed)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "config.json", FINGERPRINT_FILE):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    # The seed shapes the weights only.
    assert (first / "tokenizer.json").read_bytes() == (other_seed / "tokenizer.json").read_bytes()


def test_reuses_a_matching_build_and_replaces_a_stale_one(tmp_path: Path) -> None:
    target = tmp_path / "tiny"
    build_tiny_model(target, TINY_TEXTS, **MINI)
    weights = target / "model.safetensors"
    inode = weights.stat().st_ino

    assert build_tiny_model(target, reversed(TINY_TEXTS), **MINI) == target.resolve()
    assert weights.stat().st_ino == inode  # reused, not rebuilt

    build_tiny_model(target, TINY_TEXTS, **{**MINI, "hidden_size": 32})
    assert weights.stat().st_ino != inode
    assert json.loads((target / FINGERPRINT_FILE).read_text())["params"]["hidden_size"] == 32
    assert AutoModelForCausalLM.from_pretrained(target, local_files_only=True).config.hidden_size == 32
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]  # no staging or old folders left behind


def test_never_overwrites_a_folder_that_is_not_a_build(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")

    with pytest.raises(ModelBuildError, match="not a seedwheel model build"):
        build_tiny_model(target, TINY_TEXTS, **MINI)
    assert [p.name for p in target.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"hidden_size": 30, "num_attention_heads": 4}, r"hidden_size \(30\) must be divisible by num_attention"),
        ({"num_attention_heads": 4, "num_key_value_heads": 3}, r"divisible by num_key_value_heads \(3\)"),
        ({"vocab_size": 100}, r"vocab_size \(100\) must be at least 259"),  # 256 bytes + 3 special tokens
        ({"hidden_size": 12, "num_attention_heads": 4}, r"head size .* = 3 must be even"),  # rotary needs pairs
        ({"num_layers": 0}, r"num_layers must be at least 1"),
    ],
)
def test_rejects_impossible_shapes_with_the_numbers(tmp_path: Path, params: dict, message: str) -> None:
    with pytest.raises(TinyModelError, match=message):
        build_tiny_model(tmp_path / "tiny", TINY_TEXTS, **params)
    assert not (tmp_path / "tiny").exists()


def test_texts_must_be_a_list_of_strings(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="not one string"):
        build_tiny_model(tmp_path / "tiny", "one long text")
    with pytest.raises(TypeError, match=r"texts\[1\] is int"):
        build_tiny_model(tmp_path / "tiny", ["ok", 3])
