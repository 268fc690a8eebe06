"""GRPO rollouts: a TRL `rollout_func` that plays each episode task in its environment, turn by turn, and on CPU
samples every turn (a single-turn task's one turn too) through the engine that serves the policy.

TRL 1.16's `GRPOTrainer(rollout_func=...)` hands the function the batch's prompts (each one repeated
`num_generations` times) and the trainer, and takes back, per completion, the prompt's token ids, the completion's
token ids and their sampling logprobs; any other field reaches the reward functions as a column, and `env_mask`
marks the completion tokens the loss trains on. `EpisodeRollouts` is that function for every split on the
transformers backend, and for a split that holds `episode` tasks under vLLM:

- Every round, one assistant turn is generated for every live conversation from the policy's current weights:
  through `langmodels.generation.Engine` on the transformers backend (`LiveEngineTurns`: a prompt's
  `num_generations` copies are prefilled once), or through the trainer's own vLLM backend, colocated or served on
  a GPU, under the same `use_vllm` setting as single-turn GRPO (`trainer_turns`). A turn continues from the exact
  tokens so far: nothing is re-tokenized, so the loss sees what was sampled.
- A single-turn task's completion is its first turn, as without the rollout function.
- An episode task plays as `training.episodes.sample_episodes` plays it: the turn's calls run in the episode's own
  environment (a fresh copy of its state, removed afterwards), and their results, rendered by the chat template
  as `tool` messages, are appended as tokens the loss ignores (`env_mask` 0, logprob 0) before the next turn. The
  episode ends as its environment decides (`answered`, `max_turns`, `invalid_call`, `tool_error`, `timeout`), or
  `length` when its tokens reach `max_completion_length`.
- The column `episode` carries each episode as the verifier reads it (its calls as `<tool_call>` blocks, then
  its answer; None for single-turn rows). `validators.rewards.VerifierReward` scores that text instead of the
  decoded tokens, which interleave tool results: the reward is the `episode` verifier's replay in another fresh
  environment, the verdict evaluation gives.

The trainer's prompt tokenization (`_tokenize_prompts`) and one-turn generation (`_generate_single_turn`) are
private TRL 1.16 methods (the pin is `trl>=1.16,<1.17`); TRL's own tool-calling loop is built on them, and the
tests run both backends' CPU path. The generation is reached through one seam, a `TurnSampler`:
tests that script the turns hand `EpisodeRollouts` their own sampler instead of patching TRL's internals, so a TRL
upgrade that renames the method breaks `trainer_turns` and the real-backend tests, not every test. With vLLM in
`server` mode a round is a collective call, so the rounds must match across processes: run episode GRPO on one
training process there (`colocate` has no such limit).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from typing import Any

import torch

from core import SeedwheelError
from langmodels.generation import Engine, GenerationRequest
from training.episodes import Rollout, start_rollout
from validators.registry import VerifyContext
from validators.rewards import EPISODE_COLUMN
from validators.verifiers.episode import Episode

logger = logging.getLogger(__name__)

LENGTH = "length"  # the end reason of an episode whose tokens reached max_completion_length
# One assistant turn for each live conversation, given the trainer and each conversation's token ids so far: the
# sampled token ids per conversation, and their sampling logprobs (None when the backend reports none).
TurnSampler = Callable[[Any, list[list[int]]], tuple[Sequence[Sequence[int]], Sequence[Sequence[float]] | None]]


class EpisodeRolloutError(SeedwheelError, ValueError):
    """A split or tokenizer the episode rollout cannot run on; the message names the task or template and the fix."""


def prompt_key(prompt: Sequence[Mapping[str, Any]]) -> str:
    """A prompt's identity as the rollout sees it: its messages' roles and contents, in order.

    Example:
        >>> prompt_key([{"role": "user", "content": "Cancel order 1027.", "name": None}])
        '[["user", "Cancel order 1027."]]'
    """
    return json.dumps([[message.get("role"), message.get("content")] for message in prompt])


def episode_tasks(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The `episode` tasks of a training split by `prompt_key`: what the rollout plays for a prompt it is handed.

    Args:
        rows: the split's rows with `task_id`, `prompt` (messages) and `verifier` (a dict or JSON text).

    Returns:
        prompt key -> task (`task_id`, `family`, `prompt`, `verifier` as a dict); empty when no row is an episode.

    Raises:
        EpisodeRolloutError: two episode tasks share a prompt but not their verifier (the rollout could not tell
            which environment a prompt plays in).
    """
    tasks: dict[str, dict[str, Any]] = {}
    for row in rows:
        spec = row["verifier"]
        spec = json.loads(spec) if isinstance(spec, str) else dict(spec)
        if spec.get("name") != Episode.name:
            continue
        task = {"task_id": row.get("task_id"), "family": row.get("family"), "prompt": row["prompt"], "verifier": spec}
        key = prompt_key(row["prompt"])
        other = tasks.setdefault(key, task)
        if other["verifier"] != spec:
            raise EpisodeRolloutError(
                f"episode tasks {other['task_id']} and {task['task_id']} have the same prompt but different "
                "environments or goals, so a GRPO rollout cannot tell which one it plays; make their prompts "
                "differ (name the order, file or customer) or keep one of them out of the split"
            )
    return tasks


def tool_suffix_ids(tokenizer: Any, messages: Sequence[Mapping[str, Any]], **template_kwargs: Any) -> list[int]:
    """The tokens the chat template puts after an assistant turn for these `tool` messages, up to the next
    assistant turn's opener: what is appended to a turn's sampled tokens (which end with the end-of-turn token).

    Raises:
        EpisodeRolloutError: the template renders a conversation's start differently once tool messages follow
            (not prefix-preserving), so no suffix can be cut from it.

    Example:
        >>> tokenizer.decode(tool_suffix_ids(tokenizer, [{"role": "tool", "content": "{}"}]))  # doctest: +SKIP
        '\\n<|im_start|>tool\\n{}<|im_end|>\\n<|im_start|>assistant\\n'
    """
    turn = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
    tools = [{"role": "tool", "content": m["content"]} for m in messages]
    prefix = list(tokenizer.apply_chat_template(turn, tokenize=True, return_dict=False, **template_kwargs))
    full = list(
        tokenizer.apply_chat_template(
            turn + tools, add_generation_prompt=True, tokenize=True, return_dict=False, **template_kwargs
        )
    )
    # A sampled turn stops at its end-of-turn token; what the template writes after it belongs to the suffix.
    ends = [i for i, token in enumerate(prefix) if token == tokenizer.eos_token_id]
    prefix = prefix[: ends[-1] + 1] if ends else prefix
    if full[: len(prefix)] != prefix:
        raise EpisodeRolloutError(
            f"the chat template of {getattr(tokenizer, 'name_or_path', 'this tokenizer')} renders a conversation "
            "differently once tool messages follow it, so tool results cannot be appended to sampled tokens; use a "
            "model whose template is prefix-preserving (ChatML templates are)"
        )
    return full[len(prefix) :]


def trainer_turns(trainer: Any, conversations: list[list[int]]) -> Any:
    """One turn per conversation through the trainer's own backend (transformers, or vLLM where `use_vllm`): TRL
    1.16's private `GRPOTrainer._generate_single_turn`, one sample each (every conversation has its own history)."""
    return trainer._generate_single_turn(conversations, None, {}, num_generations=1)


def engine_problem(trainer: Any) -> str | None:
    """Why `LiveEngineTurns` cannot sample as this trainer's generation config says (None: it can): the engine
    samples with a temperature and top-p alone, serves no vLLM backend and needs a chat tokenizer."""
    if trainer.use_vllm:
        return "use_vllm is set"
    if not getattr(trainer.processing_class, "chat_template", None):
        return "the tokenizer has no chat template"
    args = trainer.args
    unsupported = {
        "top_k": trainer.top_k not in (None, 0),
        "min_p": trainer.min_p is not None,
        "repetition_penalty": trainer.repetition_penalty != 1.0,
        "generation_kwargs": bool(args.generation_kwargs),
        "cache_implementation": args.cache_implementation is not None,
    }
    named = [name for name, is_set in unsupported.items() if is_set]
    return f"{', '.join(named)} set" if named else None


class LiveEngineTurns:
    """A `TurnSampler` for the transformers backend: each round through `langmodels.generation.Engine` on the
    trainer's current weights, where TRL's `model.generate` is slower on CPU.

    Conversations with the same tokens (a prompt's `num_generations` copies on the first turn) are one request:
    their prompt is prefilled once and its KV cache repeated, where `generate` prefills every copy. The engine
    keeps no prefix between rounds (the weights change every step), samples at the trainer's `temperature` and
    `top_p`, and ends a turn at `max_completion_length` tokens or after an end-of-turn token, which the turn keeps
    as `generate`'s does. Each request's seed is drawn from torch's random state, which the trainer seeds, so a
    run repeats. Where the config asks for more than the engine does (`engine_problem`), the round goes to
    `trainer_turns` instead, and the log says why once.
    """

    def __init__(self) -> None:
        self._engine: Engine | None = None
        self._warned = False

    def __call__(self, trainer: Any, conversations: list[list[int]]) -> tuple[list[list[int]], None]:
        problem = engine_problem(trainer)
        if problem is not None:
            if not self._warned:
                logger.info("GRPO samples through TRL's generate, not the engine: %s", problem)
                self._warned = True
            return trainer_turns(trainer, conversations)
        from trl.models import unwrap_model_for_generation

        groups: dict[tuple[int, ...], list[int]] = {}
        for index, ids in enumerate(conversations):
            groups.setdefault(tuple(ids), []).append(index)
        requests = [
            GenerationRequest(
                ids,
                n=len(indexes),
                max_tokens=trainer.max_completion_length,
                temperature=trainer.temperature,
                top_p=trainer.top_p,
                seed=int(torch.randint(2**31 - 1, ()).item()),
            )
            for ids, indexes in groups.items()
        ]
        with unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            generation_kwargs=trainer.generation_kwargs,
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
        ) as model:
            training = model.training
            try:  # sampled as served: in eval mode (no dropout), the trainer's mode restored after
                results = self._engine_for(model.eval(), trainer.processing_class).generate(requests)
            finally:
                model.train(training)
        turns: list[list[int]] = [[] for _ in conversations]
        for indexes, result in zip(groups.values(), results, strict=True):
            for index, completion in zip(indexes, result.completions, strict=True):
                turns[index] = list(completion.token_ids)
        return turns, None

    def _engine_for(self, model: Any, tokenizer: Any) -> Engine:
        if self._engine is None or self._engine.model is not model:
            self._engine = Engine(model, tokenizer, prefix_cache_entries=0)
        return self._engine


class EpisodeRollouts:
    """TRL's `rollout_func` for a split with `episode` tasks (see the module docstring); counts what it played.

    Args:
        rows: the training split's rows (`episode_tasks` picks the episode tasks).
        context: where the environments' fixtures resolve (the same as the rewards').
        sample_turns: how a round's turns are sampled (`trainer_turns`: the trainer's backend).

    Attributes:
        end_reasons: how the episodes played so far ended (`length` included).
        tool_calls: tool calls the environments took, over all episodes.

    Example:
        >>> rollouts = EpisodeRollouts(dataset.to_list())  # doctest: +SKIP
        >>> GRPOTrainer(model=path, reward_funcs=rewards, args=config, rollout_func=rollouts)  # doctest: +SKIP
    """

    __name__ = "episode_rollouts"

    def __init__(
        self,
        rows: Sequence[Mapping[str, Any]],
        *,
        context: VerifyContext | None = None,
        sample_turns: TurnSampler = trainer_turns,
    ) -> None:
        self.tasks = episode_tasks(rows)
        self.context = context or VerifyContext()
        self.sample_turns = sample_turns
        self.end_reasons: Counter[str] = Counter()
        self.tool_calls = 0

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """Play one batch of prompts (chat messages): `prompt_ids`, `completion_ids`, `logprobs`, `env_mask` and
        `episode`, one per prompt."""
        tokenizer = trainer.processing_class
        template_kwargs = dict(trainer.chat_template_kwargs or {})
        limit = trainer.max_completion_length
        prompt_ids, _, _ = trainer._tokenize_prompts(prompts)
        outs = [_Tokens() for _ in prompts]
        with ExitStack() as environments:  # every episode's copy of its state is removed, whatever happens
            plays: list[Rollout | None] = []
            for index, prompt in enumerate(prompts):
                task = self.tasks.get(prompt_key(prompt))
                plays.append(None if task is None else start_rollout(environments, task, index, 0, self.context))
            live = list(range(len(prompts)))
            while live:
                turns, turn_logprobs = self.sample_turns(trainer, [prompt_ids[i] + outs[i].ids for i in live])
                still = []
                for n, i in enumerate(live):
                    sampled = list(turns[n])[: limit - len(outs[i].ids)]
                    outs[i].add(sampled, trained=True, logprobs=None if turn_logprobs is None else turn_logprobs[n])
                    play = plays[i]
                    if play is None:
                        continue  # a single-turn task: its first turn is its completion
                    play.take_turn(tokenizer.decode(sampled, skip_special_tokens=True))
                    if play.env.end_reason is not None:
                        continue
                    results = tool_suffix_ids(tokenizer, _last_results(play), **template_kwargs)
                    if len(outs[i].ids) + len(results) < limit:  # else the episode ends `length`
                        outs[i].add(results, trained=False, logprobs=None)
                        still.append(i)
                live = still
            episodes = [None if play is None else play.completion for play in plays]
            ends = Counter(play.env.end_reason or LENGTH for play in plays if play is not None)
            calls = sum(play.tool_calls for play in plays if play is not None)
        if ends:
            self.end_reasons.update(ends)
            self.tool_calls += calls
            logger.info("episode rollouts: %d episodes, %d tool calls, ends %s", ends.total(), calls, dict(ends))
        logprobs = [out.logprobs for out in outs]
        return {
            "prompt_ids": prompt_ids,
            "completion_ids": [out.ids for out in outs],
            # None when the backend gives none (transformers): TRL then has no sampling logprobs to correct with.
            "logprobs": None if any(lp is None for lp in logprobs) else logprobs,
            "env_mask": [out.mask for out in outs],
            EPISODE_COLUMN: episodes,
        }


class _Tokens:
    """One completion being built: its token ids, which of them the loss trains on, and their sampling logprobs."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] | None = []

    def add(self, ids: Sequence[int], *, trained: bool, logprobs: Sequence[float] | None) -> None:
        """Append sampled tokens (`trained`, with the backend's logprobs) or tool results (logprob 0)."""
        self.ids += ids
        self.mask += [int(trained)] * len(ids)
        if not trained:
            logprobs = [0.0] * len(ids)
        if self.logprobs is not None and logprobs is not None:
            self.logprobs += list(logprobs)[: len(ids)]
        else:
            self.logprobs = None


def _last_results(play: Rollout) -> list[dict[str, Any]]:
    """The `tool` messages of the episode's last turn: the results of the calls it just made."""
    last = max(i for i, message in enumerate(play.turns) if message["role"] == "assistant")
    return play.turns[last + 1 :]
