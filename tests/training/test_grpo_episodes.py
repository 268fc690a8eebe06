"""GRPO over episodes: TRL's rollout function plays episode tasks in their environments, appends the tool results
as tokens the loss ignores, and hands the rewards each episode as the `episode` verifier reads it.

A real `GRPOTrainer` (the tiny model) is built for every test here. The exact cases script the trainer's one-turn
generation (the policy's output, so that a call is made at a known turn); the training runs generate for real, on
the tiny model and on the bundled SmolLM2."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.paths import SEEDS
from tests.training.scripted import reference_script
from tests.training.tiny import TINY_SIZES, TINY_TEXTS
from training.export import export_split
from training.grpo import cap_episode_turns, cpu_defaults, grpo_config_class, load_train_split, run_grpo
from training.grpo_episodes import (
    LENGTH,
    EpisodeRolloutError,
    EpisodeRollouts,
    LiveEngineTurns,
    engine_problem,
    episode_tasks,
    prompt_key,
    tool_suffix_ids,
    trainer_turns,
)
from training.tiny_model import build_tiny_model
from validators.registry import VerifyContext, verify
from validators.rewards import EPISODE_COLUMN, VerifierReward
from validators.seeds import load_seeds

RUN = {"per_device_train_batch_size": 4, "num_generations": 2, "logging_steps": 1, "seed": 0, "disable_tqdm": True}


@pytest.fixture(scope="module")
def shop_tasks(seed_context: VerifyContext) -> list[dict[str, Any]]:
    seeds = load_seeds([SEEDS / "episode" / "shop.yaml"], root=SEEDS.parent, context=seed_context)
    assert seeds.problems == [] and len(seeds.tasks) >= 4
    return seeds.tasks


@pytest.fixture(scope="module")
def shop_model_dir(tmp_path_factory: pytest.TempPathFactory, shop_tasks: list[dict[str, Any]]) -> Path:
    """The tiny model with a tokenizer that saw the shop prompts, references and tool results, so they stay short."""
    texts = [
        *TINY_TEXTS,
        *(m["content"] for t in shop_tasks for m in t["prompt"]),
        *(t["reference"] for t in shop_tasks),
    ]
    texts += ['{"error": "unknown order"}', '{"status": "delivered", "total_cents": 10696}']
    return build_tiny_model(tmp_path_factory.mktemp("shop-model") / "tiny", texts, **TINY_SIZES, seed=0)


@pytest.fixture
def seeds_env(seed_context: VerifyContext, monkeypatch: pytest.MonkeyPatch) -> VerifyContext:
    """The rewards and the rollout resolve fixtures as the GRPO job does: through SEEDWHEEL_SEEDS."""
    monkeypatch.setenv("SEEDWHEEL_SEEDS", str(seed_context.seeds_dir))
    return seed_context


def arithmetic(i: int) -> dict[str, Any]:
    return {
        "task_id": f"arith-{i}",
        "family": "arithmetic",
        "prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
        "verifier": {"name": "numeric_answer", "version": 1, "params": {"answer": 2 * i}},
        "reference": f"#### {2 * i}",
        "lineage": {"seed_id": f"arith-{i}"},
    }


def split(tmp_path: Path, tasks: Sequence[Mapping[str, Any]]) -> Path:
    return export_split([dict(t) for t in tasks], tmp_path / "export", "train").parquet


def config(tmp_path: Path, train_file: Path, **overrides: Any) -> Any:
    kwargs = {**cpu_defaults(), **RUN, "output_dir": str(tmp_path / "run"), "train_file": str(train_file)}
    return grpo_config_class()(**{**kwargs, **overrides})


def turn_ids(tokenizer: Any, text: str) -> list[int]:
    """A sampled turn's tokens: the text, then the end-of-turn token the sampler stops at."""
    return [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]


class Scripted:
    """A `TurnSampler` of fixed turns per prompt (each prompt once in the batch): its n-th call for a conversation
    gives `plays[prompt][n]` (the last entry again once the list runs out)."""

    def __init__(self, tokenizer: Any, prompts: Sequence[Sequence[Mapping[str, Any]]], plays: Sequence[list[str]]):
        self.tokenizer = tokenizer
        self.turns = {
            tuple(tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, return_dict=False)): turns
            for prompt, turns in zip(prompts, plays, strict=True)
        }
        self.taken = dict.fromkeys(self.turns, 0)
        self.rounds: list[int] = []

    def __call__(self, trainer: Any, prompt_ids: list[list[int]]) -> Any:
        self.rounds.append(len(prompt_ids))
        out = []
        for ids in prompt_ids:
            prompt = next(p for p in self.turns if tuple(ids[: len(p)]) == p)
            plays = self.turns[prompt]
            out.append(turn_ids(self.tokenizer, plays[min(self.taken[prompt], len(plays) - 1)]))
            self.taken[prompt] += 1
        return out, None


@pytest.fixture
def trainer(tmp_path: Path, shop_model_dir: Path, shop_tasks: list[dict[str, Any]], seeds_env: VerifyContext) -> Any:
    """A real GRPOTrainer on the tiny model over a split of two shop episodes and one arithmetic task."""
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    train_file = split(tmp_path, [*shop_tasks[:2], arithmetic(3)])
    dataset = load_train_split(train_file)
    return GRPOTrainer(
        model=str(shop_model_dir),
        reward_funcs=[VerifierReward()],
        args=config(tmp_path, train_file, max_completion_length=4096, max_steps=1),
        train_dataset=dataset,
        processing_class=AutoTokenizer.from_pretrained(shop_model_dir),
        rollout_func=EpisodeRollouts(dataset.to_list()),
    )


def test_an_episode_interleaves_sampled_turns_with_tool_results_the_loss_ignores(
    trainer: Any, shop_tasks: list[dict[str, Any]]
) -> None:
    task, claim, single = shop_tasks[0], shop_tasks[1], arithmetic(3)
    prompts = [task["prompt"], claim["prompt"], single["prompt"]]
    # The first episode plays its reference one call per turn; the second claims success without a call; the
    # arithmetic task answers once.
    plays = [reference_script(task), ["Done, refunded!"], ["#### 6"]]
    script = Scripted(trainer.processing_class, prompts, plays)
    rollouts = EpisodeRollouts(trainer.train_dataset.to_list(), sample_turns=script)
    out = rollouts(prompts, trainer)

    tokenizer = trainer.processing_class
    turns = reference_script(task)
    # One round per turn of the longest episode, each with the episodes still playing.
    assert script.rounds == [3] + [1] * (len(turns) - 1)
    assert out["logprobs"] is None  # the transformers backend samples without reporting logprobs
    ids, mask = out["completion_ids"][0], out["env_mask"][0]
    assert len(ids) == len(mask)
    # The loss trains on exactly the sampled turns; everything between them is the environment's.
    sampled = [tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m], skip_special_tokens=True)]
    assert sampled[0] == "".join(turns)
    results = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if not m])
    assert results.count("<tool_response>") == len(turns) - 1 and '"customer_id": 1' in results
    assert results.endswith("<|im_start|>assistant\n")  # each result block reopens the assistant's turn
    # The single-turn row and the claim without a call are one sampled turn each, all trained on.
    assert out["env_mask"][1] == [1] * len(out["completion_ids"][1])
    assert tokenizer.decode(out["completion_ids"][2], skip_special_tokens=True) == "#### 6"
    assert out[EPISODE_COLUMN][2] is None

    # The reward scores what each episode did, replayed in a fresh environment; the single-turn row its text.
    reward = VerifierReward()
    completions = [
        [{"role": "assistant", "content": tokenizer.decode(c, skip_special_tokens=True)}]
        for c in out["completion_ids"]
    ]
    specs = [json.dumps(t["verifier"]) for t in (task, claim, single)]
    assert reward(prompts, completions, verifier=specs, **{EPISODE_COLUMN: out[EPISODE_COLUMN]}) == [1.0, 0.0, 1.0]
    assert verify(task, out[EPISODE_COLUMN][0]).passed
    assert rollouts.end_reasons == {"answered": 2} and rollouts.tool_calls == len(turns) - 1


def test_an_episode_that_reaches_the_token_limit_ends_length(
    trainer: Any, shop_tasks: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    task = shop_tasks[0]
    monkeypatch.setattr(trainer, "max_completion_length", 40)
    lookup = reference_script(task)[0]
    script = Scripted(trainer.processing_class, [task["prompt"]], [[lookup]])  # the same call, turn after turn
    rollouts = EpisodeRollouts(trainer.train_dataset.to_list(), sample_turns=script)
    out = rollouts([task["prompt"]], trainer)
    assert len(out["completion_ids"][0]) <= 40
    assert rollouts.end_reasons == {LENGTH: 1}
    assert out[EPISODE_COLUMN][0].count("<tool_call>") == len(script.rounds) >= 1


def test_hostile_turns_end_their_episodes_and_touch_nothing(
    trainer: Any, shop_tasks: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, no_tmp_leftovers: Path
) -> None:
    task = shop_tasks[0]
    hostile = [
        '<tool_call>{"name": "get_order_status", "arguments": {"order_id": "1; DROP TABLE orders"}}</tool_call>',
        '<tool_call>{"name": "drop_database", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "find_customer", "arguments": {"email": "' + "x" * 17_000 + '"}}</tool_call>',
    ]
    tokenizer = trainer.processing_class

    def generate(trainer: Any, prompt_ids: list[list[int]]) -> Any:
        # Row i writes hostile[i] (the rows share a prompt, so they are told apart by their place in the batch).
        return [turn_ids(tokenizer, text) for text in hostile], None

    rollouts = EpisodeRollouts(trainer.train_dataset.to_list(), sample_turns=generate)
    monkeypatch.setattr(trainer, "max_completion_length", 40_000)  # room for the oversized call
    out = rollouts([task["prompt"]] * 3, trainer)
    assert rollouts.end_reasons == {"invalid_call": 3}
    for ids, mask, episode in zip(out["completion_ids"], out["env_mask"], out[EPISODE_COLUMN], strict=True):
        assert mask == [1] * len(ids)  # nothing is appended once an episode has ended
        assert not verify(task, episode).passed
    # The environments' copies are gone; the seed database is checked by `seed_context` when the module ends.


def test_episode_tasks_by_prompt_refuse_two_tasks_one_prompt(shop_tasks: list[dict[str, Any]]) -> None:
    rows = [{**t, "verifier": json.dumps(t["verifier"])} for t in shop_tasks[:2]] + [arithmetic(1)]
    tasks = episode_tasks(rows)
    assert set(tasks) == {prompt_key(t["prompt"]) for t in shop_tasks[:2]}
    assert tasks[prompt_key(shop_tasks[0]["prompt"])]["verifier"] == shop_tasks[0]["verifier"]
    # The same prompt with another goal: a rollout could not tell which state it plays in.
    other = {**shop_tasks[0], "task_id": "other", "verifier": {**shop_tasks[0]["verifier"], "params": {}}}
    with pytest.raises(EpisodeRolloutError, match="same prompt"):
        episode_tasks([shop_tasks[0], other])
    assert len(episode_tasks([shop_tasks[0], dict(shop_tasks[0])])) == 1  # an exact repeat is one task


def test_tool_suffix_needs_a_prefix_preserving_template(shop_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(shop_model_dir)
    suffix = tokenizer.decode(tool_suffix_ids(tokenizer, [{"role": "tool", "content": '{"a": 1}'}]))
    assert '{"a": 1}' in suffix and suffix.endswith("<|im_start|>assistant\n")
    assert not suffix.startswith("<|im_end|>")  # the sampled turn already ends with it
    # A template that renders the last assistant turn apart from the ones before it.
    tokenizer.chat_template = (
        "{% for m in messages %}{% if loop.last %}LAST:{% endif %}{{ m.role }}: {{ m.content }}<|im_end|>{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    with pytest.raises(EpisodeRolloutError, match="prefix-preserving"):
        tool_suffix_ids(tokenizer, [{"role": "tool", "content": "{}"}])


def test_cap_episode_turns_lowers_episode_limits_only(tmp_path: Path, shop_tasks: list[dict[str, Any]]) -> None:
    dataset = load_train_split(split(tmp_path, [shop_tasks[0], arithmetic(2)]))
    specs = [json.loads(s) for s in cap_episode_turns(dataset, 3)["verifier"]]
    assert specs[0]["params"]["limits"]["max_turns"] == 3
    assert "limits" not in specs[1]["params"]
    assert cap_episode_turns(dataset, None) is dataset


def digit_share(i: int) -> dict[str, Any]:
    return {**arithmetic(i), "task_id": f"digits-{i}", "verifier": {"name": "test_digit_share", "params": {}}}


def train(tmp_path: Path, model: Path, tasks: Sequence[Mapping[str, Any]], **overrides: Any) -> Any:
    """Two GRPO steps in which every task is sampled twice (the batch holds the whole split); checks that every
    episode row was played in its environment and rewarded by the episode verifier, and that the weights moved."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg = config(
        tmp_path, split(tmp_path, tasks), max_steps=2, max_episode_turns=3, per_device_train_batch_size=2 * len(tasks),
        reward_weights_by_verifier={"episode": 1.0, "test_digit_share": 1.0}, **overrides,
    )  # fmt: skip
    received: list[dict[str, Any]] = []
    result = run_grpo(model, cfg, on_metrics=received.append)
    steps = [m for m in received if "reward" in m]
    assert result.steps == 2 and len(steps) == 2
    episodes = sum(t["verifier"]["name"] == "episode" for t in tasks)
    assert sum(result.episode_end_reasons.values()) == 2 * 2 * episodes
    assert set(result.episode_end_reasons) <= {"answered", "max_turns", "invalid_call", "tool_error", LENGTH}
    assert all(m["rewards/episode/mean"] is not None for m in steps)
    before = AutoModelForCausalLM.from_pretrained(model).state_dict()
    after = AutoModelForCausalLM.from_pretrained(result.checkpoint_dir).state_dict()
    assert any(not torch.equal(before[name], after[name]) for name in before)
    return result


@pytest.mark.slow
@pytest.mark.usefixtures("test_verifiers")
def test_grpo_trains_on_episodes_with_the_tiny_model(
    tmp_path: Path, shop_model_dir: Path, shop_tasks: list[dict[str, Any]], seeds_env: VerifyContext
) -> None:
    # Episodes beside single-turn rows whose digit-share reward differs within a group even for random text, so
    # the weights must move; a random model's episodes all fail alike.
    train(tmp_path, shop_model_dir, [*shop_tasks[:2], digit_share(1), digit_share(2)], max_completion_length=24)


@pytest.mark.slow
@pytest.mark.usefixtures("test_verifiers")
def test_grpo_trains_on_episodes_with_the_real_model(
    tmp_path: Path, real_model_dir: Path, shop_tasks: list[dict[str, Any]], seeds_env: VerifyContext
) -> None:
    # SmolLM2 before any SFT mostly answers without a call; what it plays is counted and rewarded all the same.
    train(tmp_path, real_model_dir, [shop_tasks[0], digit_share(1)], max_completion_length=48)


def test_engine_turns_leave_to_generate_what_the_engine_cannot_sample() -> None:
    from types import SimpleNamespace

    def trainer(use_vllm: bool = False, template: str | None = "{{ messages }}", **set: Any) -> Any:
        sampling = {"top_k": 0, "min_p": None, "repetition_penalty": 1.0} | set
        args = SimpleNamespace(generation_kwargs=set.get("generation_kwargs"), cache_implementation=None)
        tokenizer = SimpleNamespace(chat_template=template)
        return SimpleNamespace(use_vllm=use_vllm, processing_class=tokenizer, args=args, **sampling)

    assert engine_problem(trainer()) is None
    assert engine_problem(trainer(top_k=50, repetition_penalty=1.1)) == "top_k, repetition_penalty set"
    assert engine_problem(trainer(generation_kwargs={"no_repeat_ngram_size": 3})) == "generation_kwargs set"
    assert engine_problem(trainer(use_vllm=True)) == "use_vllm is set"
    assert engine_problem(trainer(template=None)) == "the tokenizer has no chat template"


@pytest.mark.slow
def test_engine_turns_sample_what_trls_generate_samples(tmp_path: Path, real_model_dir: Path) -> None:
    """Near-greedy, the engine and TRL's `generate` pick the same tokens: a prompt's copies, prefilled once by the
    engine, get the turn `generate` gives each copy, ending with the end-of-turn token, or cut at the limit."""
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    train_file = split(tmp_path, [arithmetic(2), arithmetic(7)])
    trainer = GRPOTrainer(
        model=str(real_model_dir),
        reward_funcs=[VerifierReward()],
        args=config(tmp_path, train_file, max_completion_length=40, temperature=1e-4, max_steps=1),
        train_dataset=load_train_split(train_file),
        processing_class=AutoTokenizer.from_pretrained(real_model_dir),
    )
    tokenizer = trainer.processing_class
    story = [{"role": "user", "content": "Write a long story about the number 7."}]
    short, long = trainer._tokenize_prompts([arithmetic(2)["prompt"], story])[0]
    conversations = [short, short, short, long]
    trainer.model.train()  # as in a training step
    by_engine, logprobs = LiveEngineTurns()(trainer, conversations)
    assert logprobs is None  # as TRL's transformers backend: the loss computes its own
    assert by_engine == trainer_turns(trainer, conversations)[0]
    assert by_engine[0] == by_engine[1] == by_engine[2]
    assert by_engine[0][-1] == tokenizer.eos_token_id and len(by_engine[0]) < 40  # ended by the model
    assert len(by_engine[3]) == 40  # cut at max_completion_length
    assert trainer.model.training  # the trainer's mode is restored


@pytest.fixture
def no_tmp_leftovers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    import tempfile

    folder = tmp_path / "env-tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    assert list(folder.iterdir()) == []
