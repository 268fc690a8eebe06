"""Sampled multi-turn rollouts of `episode` tasks: the policy acts in the task's environment until the episode ends.

`sample_episodes(model, tasks, k=...)` plays k episodes per task with a local policy model. Each episode gets a
fresh environment (`validators.environments`: the task's own copy of its state, removed afterwards) whose first
observation is the task's prompt. Every turn, one batched generation (`langmodels.generation.Engine`, left
padded) gives each live episode its next assistant turn; its tool calls are read with the episode verifier's own parser
(`actions_from_completion`: OpenAI-style objects or `<tool_call>` blocks in the text), run in order, and their
results come back as `tool` messages. A turn without a call is the answer. The environment ends an episode
(`answered`, `max_turns`, `invalid_call`, `tool_error`, `timeout`), so n tasks x k samples cost at most
`max_turns` generation rounds, never n x k x turns sequential ones.

The finished episode is scored by the registry's `episode` verifier, the GRPO reward, which replays its calls in
another fresh environment: the rollout and the replay run the same calls on the same state and get the same
results, so they end the same way and change the same records. The rollout's `timeout` clock counts only the time
the episode's own tool calls take, about what the replay's clock counts, never the time spent generating, which
depends on the batch and the hardware rather than on the episode.

**Rows** have the fields of `training.evaluation.sample_and_score`'s rows (`task_id`, `family`, `sample`,
`completion`, `score`, `passed`, `reason`), so the consumers of sampled verdicts can read them, plus:

- `model`: the policy's model directory or id;
- `completion`: the episode as the verifier reads it, in the format of an episode task's `reference`: the calls
  the model wrote, one `<tool_call>` block each, then its answer when it gave one;
- `turns`: the messages after the prompt: each assistant turn as written, with its calls as OpenAI `tool_calls`,
  and a `tool` message per call that ran (what `seedwheel replay` reads; the verdict on it is the same);
- `tool_calls`: the calls the environment took (refused and invalid ones included);
- `end_reason`, `end_detail`: how the episode ended, and why when it was not an answer;
- `changes`: the final state diff, `{collection, key, before, after}` per record the episode changed.

Model output is untrusted and every way it can go wrong ends the episode as the environment decides: arguments
over the size limit or against the tool's schema and unknown tools end it `invalid_call`; JSON that does not
parse is no call, so the turn is an answer (which fails the goal); refusals come back as errors until the third
ends it `tool_error`; a loop of calls ends at `max_turns`. The tools only touch the episode's copy of the state.

**Any mix of tasks.** `play_and_score(model, tasks, k=...)` is how a policy is scored on a table that holds both
kinds (`difficulty_profile`, `checkpoint_eval`): `episode` tasks are played here, the others sampled in one turn by
`training.evaluation.sample_and_score`, and the verdicts come back in the tasks' order as one `SampledVerdicts`,
whose rows all have the same fields (`SCORED_FIELDS`: an episode's `turns` and `end_reason`, None for a single-turn
sample), so the statistics treat every row alike. Episodes already played by the same policy with the same k (the
`episodes` asset) can be passed in instead of being played again.

**Training on episodes** sees them as the policy played them. `chat_messages` is the view it read (role and
content); `assistant_tokens` tokenizes a conversation and marks the tokens the assistant wrote, so that SFT and
DPO never train on a tool's result (GRPO's episode rollouts mark them the same way); `reference_turns` plays
an episode task's reference as a policy would, one call per turn with its result, then the answer: what SFT
imitates, in the form the prompt asks for (one call per turn, read before the next).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from core.tables import frame_from_records
from training.evaluation import (
    SampledVerdicts,
    check_sampling,
    is_episode,
    readable_in_order,
    sample_and_score,
)
from training.stats import EvaluationError
from validators.batch import verify_many
from validators.environments import (
    Action,
    Answer,
    Environment,
    EpisodeLimits,
    ToolCallAction,
    actions_from_completion,
    environment_class,
)
from validators.registry import Completion, VerifyContext
from validators.verifiers.episode import episode_answer, episode_calls
from validators.verifiers.tool_call import tagged_calls

# The fields of a row (the module docstring).
EPISODE_FIELDS = (
    "task_id", "family", "sample", "model", "completion", "turns", "tool_calls", "end_reason", "end_detail",
    "changes", "score", "passed", "reason",
)  # fmt: skip
# The fields of a `play_and_score` row: `sample_and_score`'s, then an episode's messages and end (None: single-turn).
SCORED_FIELDS = ("task_id", "family", "sample", "completion", "score", "passed", "reason", "turns", "end_reason")
logger = logging.getLogger(__name__)


class PlayedEpisodesError(EvaluationError):
    """Episodes passed to `play_and_score` as played that are not k samples of each episode task it scores."""


# One assistant turn per conversation, the i-th sampled with seeds[i]: `sample_episodes`' policy.
TurnSampler = Callable[[Sequence[Sequence[Mapping[str, Any]]], Sequence[int]], list[str]]


class EngineTurns:
    """The local policy as a `TurnSampler`: one batched generation per call, through the local server's engine.

    The conversations go through the tokenizer's chat template (role and content of each message: an assistant
    turn as the model wrote it, tool results as `tool` messages), sorted by their tokens so that a batch's
    conversations share their prefix (the engine prefills a shared system message once), `batch_size` per
    `Engine.generate` call. A conversation that no longer fits the model's context with `max_new_tokens` gets an
    empty turn, which ends its episode as an empty answer, and a warning (as `sample_and_score` does).

    Example:
        >>> turns = EngineTurns(model_dir, max_new_tokens=64, temperature=1.0, batch_size=8)  # doctest: +SKIP
        >>> turns([[{"role": "user", "content": "Cancel order 1027."}]], [0])  # doctest: +SKIP
        ['<tool_call>{"name": "cancel_order", "arguments": {"order_id": 1027}}</tool_call>']
    """

    def __init__(
        self, model_path_or_id: str | os.PathLike[str], *, max_new_tokens: int, temperature: float, batch_size: int
    ) -> None:
        from langmodels.generation import Engine
        from training.tiny_model import load_policy

        self.engine = Engine(*load_policy(model_path_or_id))
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.batch_size = batch_size

    def __call__(self, conversations: Sequence[Sequence[Mapping[str, Any]]], seeds: Sequence[int]) -> list[str]:
        from langmodels.generation import GenerationRequest

        prompts = [self.engine.prompt_ids(chat_messages(conversation)) for conversation in conversations]
        texts = [""] * len(prompts)
        order = readable_in_order(self.engine, prompts, self.max_new_tokens, "episodes")  # the others: empty turns
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            requests = [
                GenerationRequest(
                    prompts[i], max_tokens=self.max_new_tokens, temperature=self.temperature, seed=seeds[i]
                )
                for i in batch
            ]
            for i, result in zip(batch, self.engine.generate(requests), strict=True):
                texts[i] = result.completions[0].text
        return texts


def chat_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages as the policy reads them through its chat template: role and content only.

    An assistant turn's calls are in its content, as the model wrote them; its `tool_calls` are the same calls
    parsed, so a template that renders them too would show every call twice. `EngineTurns` plays episodes with this
    view, and `training.dpo` trains on it.

    Example:
        >>> chat_messages([{"role": "assistant", "content": "<tool_call>...</tool_call>", "tool_calls": [{}]},
        ...                {"role": "tool", "tool_call_id": "call_1", "content": "{}"}])
        [{'role': 'assistant', 'content': '<tool_call>...</tool_call>'}, {'role': 'tool', 'content': '{}'}]
    """
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def assistant_tokens(
    tokenizer: Any, prompt: Sequence[Mapping[str, Any]], side: Sequence[Mapping[str, Any]]
) -> tuple[list[int], list[int]]:
    """The token ids of `prompt + side` as the chat template renders them, and which of them the assistant wrote.

    The mask is 1 on each assistant message of `side` (its content and end-of-turn tokens) and 0 on the prompt,
    the `tool` results and the opener the template writes before each assistant turn (the generation prompt).
    A message's span is where the conversation rendered up to it (with the generation prompt) and up to its end
    agree with the whole, so a template that renders a prefix differently trains on a few tokens more, never on a
    tool result. For one assistant message this is the usual prompt/completion split.

    Example:
        >>> prompt = [{"role": "user", "content": "Cancel order 7."}]
        >>> side = [{"role": "assistant", "content": "<tool_call>...</tool_call>"},
        ...         {"role": "tool", "content": '{"status": "cancelled"}'}, {"role": "assistant", "content": "Done."}]
        >>> ids, mask = assistant_tokens(tokenizer, prompt, side)  # doctest: +SKIP
        >>> tokenizer.decode([t for t, m in zip(ids, mask) if m])  # doctest: +SKIP
        '<tool_call>...</tool_call><|im_end|>\\nDone.<|im_end|>\\n'
    """
    from trl.data_utils import common_prefix_length

    def render(messages: Sequence[Mapping[str, Any]], opener: bool = False) -> list[int]:
        rendered = tokenizer.apply_chat_template(
            [*prompt, *messages], tokenize=True, return_dict=True, add_generation_prompt=opener
        )
        return list(rendered["input_ids"])

    ids = render(side)
    mask = [0] * len(ids)
    for n, message in enumerate(side):
        if message["role"] == "assistant":
            start = common_prefix_length(render(side[:n], opener=True), ids)
            end = common_prefix_length(render(side[: n + 1]), ids)
            mask[start:end] = [1] * (end - start)
    return ids, mask


def reference_turns(tasks: Sequence[Mapping[str, Any]], context: VerifyContext) -> list[list[dict[str, Any]]]:
    """Each `episode` task's reference played as a policy plays it: one call per turn, each followed by its result
    in a `tool` message, then the answer, in a fresh environment (removed afterwards).

    A reference is one text (its calls as `<tool_call>` blocks, then the answer) and passes its verifier replayed
    as such; played turn by turn it makes the same calls in the same order on the same state, and the turns are
    the conversation the prompt asks for. An episode that ends before its answer (a turn cap the reference
    exceeds) keeps the turns it played.

    Example:
        >>> [turns] = reference_turns([shop_task], VerifyContext(seeds_dir=Path("seeds")))  # doctest: +SKIP
        >>> [m["role"] for m in turns]  # doctest: +SKIP
        ['assistant', 'tool', 'assistant', 'tool', 'assistant']
    """
    played = []
    with ExitStack() as environments:
        for index, task in enumerate(tasks):
            play = start_rollout(environments, task, index, 0, context)
            reference = str(task.get("reference") or "")
            for text in [*(tagged_calls([call]) for call in episode_calls(reference)), episode_answer(reference)]:
                if play.env.end_reason is not None:
                    break
                play.take_turn(text)
            played.append(play.turns)
    return played


class _ToolClock:
    """An episode's clock for `EpisodeLimits.max_seconds`: it runs only while the episode's own tools run."""

    def __init__(self) -> None:
        self.spent = 0.0

    def __call__(self) -> float:
        return self.spent

    @contextmanager
    def running(self) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self.spent += time.monotonic() - start


@dataclass
class Rollout:
    """One episode being played: its task (with the turn cap applied), environment, prompt, turns and calls."""

    task: Mapping[str, Any]
    index: int  # of the task in `tasks`
    sample: int
    env: Environment
    clock: _ToolClock
    prompt: list[dict[str, Any]]
    turns: list[dict[str, Any]] = field(default_factory=list)  # the messages after the prompt
    calls: list[dict[str, Any]] = field(default_factory=list)  # as written: {name, arguments}
    answer: str = ""
    tool_calls: int = 0

    def take_turn(self, text: str) -> None:
        """Run one assistant turn: its calls in order until the episode ends, or its text as the answer."""
        actions = [a for a in actions_from_completion(Completion(text)) if isinstance(a, ToolCallAction)]
        if not actions:
            self.turns.append({"role": "assistant", "content": text})
            self.answer = text
            self._step(Answer(text))
            return
        written = [{"name": action.name, "arguments": action.arguments} for action in actions]
        ids = [f"call_{len(self.calls) + n}" for n in range(1, len(written) + 1)]
        self.calls += written
        self.turns.append(
            {
                "role": "assistant",
                "content": text,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": _function(call)}
                    for call_id, call in zip(ids, written, strict=True)
                ],
            }
        )
        for action, call_id in zip(actions, ids, strict=True):
            self.tool_calls += 1
            observation, done = self._step(action)
            self.turns.append({"role": "tool", "tool_call_id": call_id, "content": observation})
            if done:
                return

    def _step(self, action: Action) -> tuple[str, bool]:
        with self.clock.running():
            return self.env.step(action)

    @property
    def completion(self) -> str:
        """The episode in a reference's format: each call written as a `<tool_call>` block, then the answer."""
        return "\n".join(part for part in (tagged_calls(self.calls), self.answer) if part)


def start_rollout(
    environments: ExitStack, task: Mapping[str, Any], index: int, sample: int, context: VerifyContext
) -> Rollout:
    """Start one episode of an `episode` task in a fresh environment, closed when `environments` closes."""
    params = task["verifier"]["params"]
    clock = _ToolClock()
    env = environments.enter_context(
        environment_class(params["environment"])(
            context=context, limits=EpisodeLimits(**params.get("limits", {})), clock=clock
        )
    )
    return Rollout(task, index, sample, env, clock, env.reset(task))


def _function(call: Mapping[str, Any]) -> dict[str, Any]:
    arguments = call["arguments"]
    return {"name": call["name"], "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}


def _turn_seed(seed: int, task: int, sample: int, turn: int) -> int:
    """A sampling seed per (task, sample, turn), independent of which other episodes share the batch."""
    digest = hashlib.blake2b(repr((seed, task, sample, turn)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1  # torch seeds take 63 bits


def capped(task: Mapping[str, Any], max_turns: int | None) -> Mapping[str, Any]:
    """The task with its episode's turn limit lowered to `max_turns` (its verifier then replays with the same)."""
    params = task["verifier"]["params"]
    limits = params.get("limits", {})
    if max_turns is None or EpisodeLimits(**limits).max_turns <= max_turns:
        return task
    lowered = {**params, "limits": {**limits, "max_turns": max_turns}}
    return {**task, "verifier": {**task["verifier"], "params": lowered}}


def _check_arguments(
    tasks: Sequence[Mapping[str, Any]],
    *,
    k: int,
    max_new_tokens: int,
    temperature: float,
    batch_size: int,
    max_turns: int | None,
) -> None:
    check_sampling(tasks, k=k, batch_size=batch_size, max_new_tokens=max_new_tokens, temperature=temperature)
    if max_turns is not None and max_turns < 1:
        raise EvaluationError(f"max_turns ({max_turns}) must be at least 1, or None: each task's own limit")
    for task in tasks:
        if not is_episode(task):
            name = (task.get("verifier") or {}).get("name")
            raise EvaluationError(
                f"task {task['task_id']} has the {name!r} verifier; sample_episodes plays `episode` tasks "
                "(training.evaluation.sample_and_score samples single-turn ones)"
            )


def sample_episodes(
    model_path_or_id: str | os.PathLike[str],
    tasks: Sequence[Mapping[str, Any]],
    *,
    k: int = 1,
    max_new_tokens: int = 256,
    temperature: float = 1.0,
    seed: int = 0,
    context: VerifyContext | None = None,
    batch_size: int = 8,
    max_turns: int | None = None,
    workers: int | None = None,
    generate: TurnSampler | None = None,
) -> list[dict[str, Any]]:
    """Play k episodes per `episode` task with a local policy and score each with the task's verifier.

    Args:
        model_path_or_id: the policy: a model directory (a checkpoint, `build_tiny_model` output) or a hub id.
        tasks: `episode` task records with `task_id`, `family`, `prompt` and `verifier`.
        k: episodes per task.
        max_new_tokens: the length cap of one assistant turn.
        temperature: sampling temperature; 0 is greedy (then the k episodes of a task are identical).
        seed: the sampling seed; each (task, sample, turn) draws its own seed from it, so a rerun with the same
            arguments plays the same episodes whatever the batch size (on the same hardware and library versions).
        context: where the environments' fixtures (the shop's SQLite file) resolve; they are only copied.
        batch_size: episodes per `generate` call; one call per turn when it covers every live episode.
        max_turns: lowers every task's turn limit (the verdict replays with the same limit); None keeps them.
        workers: verifier threads (see `validators.batch.verify_many`).
        generate: the policy, one assistant turn per conversation (`TurnSampler`); None loads
            `model_path_or_id` into `EngineTurns`. Tests pass a scripted one.

    Returns:
        One row per episode, task by task, samples in order (the fields: module docstring).

    Raises:
        EvaluationError: bad arguments, a task without `task_id`, a repeated task_id or a task whose verifier
            is not `episode`.

    Example:
        >>> rows = sample_episodes(model_dir, episode_tasks, k=4, max_new_tokens=128)  # doctest: +SKIP
        >>> rows[0]["end_reason"], rows[0]["passed"], rows[0]["tool_calls"]  # doctest: +SKIP
        ('answered', False, 2)
    """
    _check_arguments(
        tasks, k=k, max_new_tokens=max_new_tokens, temperature=temperature, batch_size=batch_size, max_turns=max_turns
    )
    if not tasks:
        return []
    if generate is None:
        generate = EngineTurns(
            model_path_or_id, max_new_tokens=max_new_tokens, temperature=temperature, batch_size=batch_size
        )
    context = context or VerifyContext()
    rollouts: list[Rollout] = []
    with ExitStack() as environments:  # every episode's copy of its state is removed, whatever happens
        for index, task in enumerate(capped(task, max_turns) for task in tasks):
            rollouts += [start_rollout(environments, task, index, sample, context) for sample in range(k)]
        turn = 0
        while live := [r for r in rollouts if r.env.end_reason is None]:
            seeds = [_turn_seed(seed, r.index, r.sample, turn) for r in live]
            for rollout, text in zip(live, generate([[*r.prompt, *r.turns] for r in live], seeds), strict=True):
                rollout.take_turn(text)
            turn += 1
            logger.info("turn %d: %d of %d episodes were live", turn, len(live), len(rollouts))
        changes = [[asdict(change) for change in r.env.changes()] for r in rollouts]
    completions = [r.completion for r in rollouts]
    verdicts = verify_many([r.task for r in rollouts], completions, workers=workers, context=context)
    return [
        {
            "task_id": r.task["task_id"],
            "family": str(r.task.get("family") or "unknown"),
            "sample": r.sample,
            "model": str(model_path_or_id),
            "completion": completion,
            "turns": r.turns,
            "tool_calls": r.tool_calls,
            "end_reason": r.env.end_reason,
            "end_detail": r.env.end_detail,
            "changes": diff,
            "score": verdict.score,
            "passed": verdict.passed,
            "reason": verdict.reason,
        }
        for r, completion, diff, verdict in zip(rollouts, completions, changes, verdicts, strict=True)
    ]


def episodes_table(
    rows: Sequence[Mapping[str, Any]], tasks: Sequence[Mapping[str, Any]], *, model: str, sampling: str
) -> pd.DataFrame:
    """The `episodes` table: `sample_episodes`' rows with the policy's name, each task's environment and how they
    were played.

    Args:
        rows: `sample_episodes`' rows on `tasks`.
        tasks: the episode tasks played (`verifier.params.environment` names each one's environment).
        model: the policy as the pipeline names it (a URL on an object store), not the local copy it was loaded
            from: `difficulty_profile` checks it is the policy it profiles.
        sampling: how they were played (`TrainingPolicy.episode_sampling`), which the profile checks too.

    Returns:
        One row per episode: `EPISODE_FIELDS`, then `environment` and `sampling`.
    """
    played = frame_from_records([{**row, "model": model} for row in rows], EPISODE_FIELDS)
    environments = {task["task_id"]: task["verifier"]["params"]["environment"] for task in tasks}
    return played.assign(environment=[environments[task_id] for task_id in played["task_id"]], sampling=sampling)


def pass_rates_by_environment(played: pd.DataFrame) -> list[dict[str, Any]]:
    """Episodes played and the share that passed, per environment (sorted), from an `episodes_table`.

    Example:
        >>> pass_rates_by_environment(pd.DataFrame({"environment": ["shop", "shop"], "passed": [True, False]}))
        [{'environment': 'shop', 'episodes': 2, 'pass_rate': 0.5}]
    """
    if played.empty:
        return []
    rates = played.groupby("environment")["passed"].agg(["size", "mean"]).reset_index()
    return [
        {"environment": r["environment"], "episodes": r["size"], "pass_rate": r["mean"]}
        for r in rates.to_dict(orient="records")
    ]


def play_and_score(
    model_path_or_id: str | os.PathLike[str],
    tasks: Sequence[Mapping[str, Any]],
    *,
    k: int = 1,
    max_new_tokens: int = 256,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 8,
    max_turns: int | None = None,
    workers: int | None = None,
    context: VerifyContext | None = None,
    played: Sequence[Mapping[str, Any]] | None = None,
    generate: TurnSampler | None = None,
) -> SampledVerdicts:
    """Score a policy on any mix of tasks: `episode` tasks played turn by turn, the others sampled in one turn.

    The `episode` tasks go to `sample_episodes` (or come from `played`), the others to
    `training.evaluation.sample_and_score`, with the same sampling arguments; the verdicts come back in the order of
    `tasks`, samples in order, so `training.stats.evaluate`/`compare` and the tables downstream treat every row alike.

    Args:
        model_path_or_id: the policy: a model directory or hub id.
        tasks: task records of any verifiers.
        k: samples (completions or episodes) per task.
        max_new_tokens: the length cap of a completion, or of one assistant turn of an episode.
        temperature: sampling temperature; 0 is greedy.
        seed: the sampling seed of both samplers (each derives its own per-task seeds from it).
        batch_size: completions or live episodes per generation call.
        max_turns: lowers every episode task's turn limit (None: each task's own).
        workers: verifier threads (see `validators.batch.verify_many`).
        context: where verifier fixtures and the environments' state resolve.
        played: rows of episodes this policy already played with these arguments (`sample_episodes`' rows, e.g.
            the `episodes` asset): used for the episode tasks instead of playing them again. Each episode task must
            have exactly samples 0..k-1 there; rows of other tasks are ignored.
        generate: the episode policy (`sample_episodes`' `generate`); tests pass a scripted one.

    Returns:
        `SampledVerdicts` whose rows have the fields `SCORED_FIELDS` (`turns` and `end_reason` None for a
        single-turn sample).

    Raises:
        EvaluationError: bad arguments, a task without a task_id or listed twice.
        PlayedEpisodesError: `played` lacks an episode task's samples or holds other ones.

    Example:
        >>> sampled = play_and_score(model_dir, eval_tasks, k=4, max_new_tokens=64)  # doctest: +SKIP
        >>> [(r["task_id"], r["end_reason"], r["passed"]) for r in sampled.rows[:2]]  # doctest: +SKIP
        [('3f1c...', None, False), ('3f1c...', None, True)]
    """
    check_sampling(tasks, k=k, batch_size=batch_size, max_new_tokens=max_new_tokens, temperature=temperature)
    episode_tasks = [task for task in tasks if is_episode(task)]
    options: dict[str, Any] = {"k": k, "max_new_tokens": max_new_tokens, "temperature": temperature, "seed": seed}
    options |= {"batch_size": batch_size, "workers": workers, "context": context}
    episodes: Sequence[Mapping[str, Any]]
    if played is None:
        episodes = sample_episodes(model_path_or_id, episode_tasks, max_turns=max_turns, generate=generate, **options)
    else:
        _check_played(played, episode_tasks, k)
        wanted = {task["task_id"] for task in episode_tasks}
        episodes = [row for row in played if row["task_id"] in wanted]
    single = sample_and_score(model_path_or_id, [task for task in tasks if not is_episode(task)], **options)
    by_task: dict[str, list[dict[str, Any]]] = {}
    for row in [*single.rows, *episodes]:
        by_task.setdefault(row["task_id"], []).append(_scored(row))
    families = {task["task_id"]: str(task.get("family") or "unknown") for task in tasks}
    rows = [
        {**row, "family": families[task["task_id"]]}
        for task in tasks
        for row in sorted(by_task[task["task_id"]], key=lambda r: r["sample"])
    ]
    passed: dict[str, list[bool]] = {task["task_id"]: [] for task in tasks}
    for row in rows:
        passed[row["task_id"]].append(row["passed"])
    return SampledVerdicts(passed=passed, families=families, rows=rows)


def _scored(row: Mapping[str, Any]) -> dict[str, Any]:
    """A sampler's row (or a stored one) as a `play_and_score` row, with plain Python types."""
    score = row.get("score")
    return {
        **{name: row.get(name) for name in SCORED_FIELDS},
        "sample": int(row["sample"]),
        "passed": bool(row["passed"]),
        "score": None if score is None else float(score),
    }


def _check_played(played: Sequence[Mapping[str, Any]], tasks: Sequence[Mapping[str, Any]], k: int) -> None:
    """Refuse played episodes that are not k samples of each episode task: a table played with another k or on
    other tasks would be scored as if it were this one."""
    samples: dict[str, list[int]] = {}
    for row in played:
        samples.setdefault(row["task_id"], []).append(int(row["sample"]))
    for task in tasks:
        got = sorted(samples.get(task["task_id"], []))
        if got != list(range(k)):
            raise PlayedEpisodesError(
                f"task {task['task_id']}: the played episodes hold samples {got}, not samples 0..{k - 1} (k={k}); "
                "play every episode task k times with this policy (or pass played=None to play them here)"
            )
