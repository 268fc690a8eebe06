"""The GRPO reward: `validators.registry.verify` in the shape TRL's `GRPOTrainer` calls reward functions.

What TRL 1.16 does (read from `trl/trainer/grpo_trainer.py::_calculate_rewards` and `trl/rewards/`):

- A plain callable is called as `func(prompts=..., completions=..., completion_ids=..., **reward_kwargs)`, where
  `reward_kwargs` holds every dataset column except `prompt`/`completion`/`completion_ids` as a list with one
  value per completion (already repeated per generation), plus `trainer_state`, `log_extra`, `log_metric` and,
  with environments, `environments`.
- `completions` is a list of strings (standard datasets) or of message lists (conversational:
  `[{"role": "assistant", "content": ..., "tool_calls": ...}]`).
- It must return one float per completion; `None` becomes NaN, meaning "not applicable", and the weighted
  sum ignores it (so per-family reward functions can share one mixed dataset).
- The metric name is `get_callable_name(func)`: `func.__name__`, else the class name; it is logged as
  `rewards/<name>/mean`. Reward functions must be picklable (the async rollout worker sends them to a child
  process), hence a class with a stable `__name__`, not a closure.

An episode rollout (`training.grpo_episodes`) adds the column `episode`: each episode as the `episode`
verifier reads it (the calls the model made, then its answer), None for single-turn rows. Where it is set, that
text is scored instead of the decoded completion, whose tokens interleave the tool results.

Each row's verifier spec comes from the `verifier` column: a dict, or a JSON string (Parquet/Arrow often stores
nested values as text). A verifier that raises gives `None` for that row plus a logged warning: one broken task
must not stop a training run, and NaN keeps it out of the advantage instead of scoring it 0.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from core import SeedwheelError
from validators.registry import REGISTRY, UnknownVerifierError, VerifyContext, verify

logger = logging.getLogger(__name__)

VERIFIER_COLUMN = "verifier"
EPISODE_COLUMN = "episode"  # what an episode rollout played, written as the `episode` verifier reads it
ANY_VERIFIER = "*"


class RewardConfigError(SeedwheelError, ValueError):
    """Reward functions configured wrongly: an unknown verifier, a bad weight, or a dataset without the column."""


class VerifierReward:
    """A TRL reward function that scores each completion with its task's own verifier.

    Args:
        verifier: only judge rows whose verifier has this name; other rows get `None`. None judges every row.
        name: the metric name (`rewards/<name>/mean`); defaults to `verifier`, or `verifier_reward`.
        column: the dataset column holding the verifier spec.
        context: where fixture paths resolve (passed to `verify`); defaults as in `verify`.

    Example:
        >>> reward = VerifierReward("numeric_answer")
        >>> spec = {"name": "numeric_answer", "params": {"answer": 4}}
        >>> reward(prompts=["2+2?"], completions=["#### 4"], verifier=[spec])
        [1.0]
    """

    def __init__(
        self,
        verifier: str | None = None,
        *,
        name: str | None = None,
        column: str = VERIFIER_COLUMN,
        context: VerifyContext | None = None,
    ) -> None:
        self.verifier = verifier
        self.column = column
        self.context = context
        # An instance attribute, so every instance logs under its own metric and pickling keeps it.
        self.__name__ = name or verifier or "verifier_reward"

    def __repr__(self) -> str:
        return f"VerifierReward(verifier={self.verifier!r}, name={self.__name__!r}, column={self.column!r})"

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Sequence[Sequence[int]] | None = None,
        **columns: Any,
    ) -> list[float | None]:
        """One reward per completion (None where the row's verifier is another one or the verifier raised).

        Args:
            prompts: the prompts (unused; TRL passes them).
            completions: strings, or message lists for conversational datasets.
            completion_ids: token ids (unused; TRL passes them).
            **columns: dataset columns as lists, one value per completion; must include `self.column`. An
                `episode` value, where not None, is scored in place of the row's completion.

        Returns:
            A list of floats in [0, 1] or None, as long as `completions`.

        Raises:
            RewardConfigError: the dataset has no verifier column, or its length differs from `completions`.
        """
        specs = columns.get(self.column)
        if specs is None:
            available = sorted(k for k in columns if k not in {"trainer_state", "log_extra", "log_metric"})
            raise RewardConfigError(
                f"reward '{self.__name__}' needs a '{self.column}' column in the dataset; got columns: "
                f"{', '.join(available) or '(none)'}. Keep the task records' verifier column when building it."
            )
        if len(specs) != len(completions):
            raise RewardConfigError(
                f"reward '{self.__name__}': {len(completions)} completions but {len(specs)} '{self.column}' values"
            )
        task_ids = columns.get("task_id") or [None] * len(completions)
        episodes = columns.get(EPISODE_COLUMN) or [None] * len(completions)
        rewards: list[float | None] = []
        reasons: list[str] = []
        for i, (spec, completion) in enumerate(zip(specs, completions, strict=True)):
            played = completion if episodes[i] is None else episodes[i]
            reward, reason = self._score_one(spec, played, task_ids[i], i)
            rewards.append(reward)
            reasons.append(reason)
        log_extra = columns.get("log_extra")
        if callable(log_extra):
            # Puts each verdict's reason next to the completion in TRL's completions table.
            log_extra(f"{self.__name__}_reason", reasons)
        return rewards

    def _score_one(self, spec: Any, completion: Any, task_id: Any, row: int) -> tuple[float | None, str]:
        try:
            if isinstance(spec, str):
                spec = json.loads(spec)
            if self.verifier is not None and spec.get("name") != self.verifier:
                return None, "not_applicable"
            verdict = verify({"verifier": spec}, completion, context=self.context)
            score = float(verdict.score)
            if not math.isfinite(score):
                raise ValueError(f"verifier returned a non-finite score {score!r}")
        except Exception as exc:  # a broken task or verifier must not stop training; log and mark it unscored
            logger.warning(
                "reward %s: row %d (task %s) not scored, verifier raised %s: %s",
                self.__name__,
                row,
                task_id if task_id is not None else "?",
                type(exc).__name__,
                exc,
            )
            return None, f"verifier_error: {type(exc).__name__}"
        return score, verdict.reason


def build_reward_funcs(
    weights: Mapping[str, float], *, context: VerifyContext | None = None
) -> tuple[list[VerifierReward], list[float]]:
    """Reward functions and weights for `GRPOTrainer(reward_funcs=..., args=GRPOConfig(reward_weights=...))`.

    Args:
        weights: verifier name -> weight, e.g. `{"numeric_answer": 1.0, "format_tags": 0.2}`. Each name gets a
            reward restricted to rows of that verifier (its own `rewards/<name>/mean` metric); the key `"*"`
            adds one reward named `verifier` that judges every row with its own verifier.
        context: passed to every reward.

    Returns:
        `(reward_funcs, reward_weights)`, in the mapping's order.

    Raises:
        RewardConfigError: empty mapping, an unregistered name (the message lists the registered ones), or a
            weight that is not a finite number.

    Example:
        >>> funcs, ws = build_reward_funcs({"numeric_answer": 1.0})
        >>> [f.__name__ for f in funcs], ws
        (['numeric_answer'], [1.0])
    """
    if not weights:
        raise RewardConfigError("reward weights are empty; give at least one verifier name, e.g. {'*': 1.0}")
    funcs: list[VerifierReward] = []
    values: list[float] = []
    for name, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
            raise RewardConfigError(f"reward weight for '{name}' must be a finite number, got {weight!r}")
        if name == ANY_VERIFIER:
            funcs.append(VerifierReward(name="verifier", context=context))
        else:
            try:
                REGISTRY.get(name)
            except UnknownVerifierError as exc:
                raise RewardConfigError(f"reward weights: {exc} (or '*' for every row's own verifier)") from None
            funcs.append(VerifierReward(name, context=context))
        values.append(float(weight))
    return funcs, values
