"""DPO preference pairs from verified rollouts: for one prompt, a completion its verifier passed is `chosen`, one
it failed is `rejected`.

The rollouts are the completions the pipeline already samples and scores: `difficulty_profile` (the starting
policy on the training tasks) and `checkpoint_eval` (baseline and candidate on the eval tasks). Rows come out in
TRL's conversational preference format, which `trl.DPOTrainer` reads as is:

| column | meaning |
| --- | --- |
| `prompt` | the task's chat messages `[{role, content}]` |
| `chosen` / `rejected` | a passing and a failing rollout of that prompt: an assistant message, or an episode's turns |
| `chosen_reason` / `rejected_reason`, `chosen_score` / `rejected_score` | the two verdicts |
| `task_id`, `family` | which task (the family comes from the task record) |
| `split` | `train` (may be trained on) or `eval` (held out: for evaluating a preference model only) |
| `source`, `model` | the table the rollouts came from and the model that sampled them |

**Episodes.** A side is what the policy produced after the prompt, so an episode's is all of its `turns` exactly as
played (`training.episodes`: assistant turns, those with calls carrying OpenAI `tool_calls`, and a `tool` message
per call that ran): the calls it made, what the tools answered and its final answer, not the flattened
`completion` (the calls the verifier replays). The assistant contents hold the calls as the model wrote them and
`tool_calls` the same calls parsed: train on role and content, as `training.dpo.run_dpo` does
(`training.episodes.chat_messages`, the view the policy played with); a chat template that also renders
`tool_calls` would show each call twice. `run_dpo` counts only the assistant's tokens in the loss: the `tool`
results are the environment's, not the policy's choice (`training.episodes.assistant_tokens`).

**Pairing.** Per task and sampling model (a pair never mixes two models' completions): samples are ordered by
sample index, then text, so the input's row order does not matter. Exact duplicate sides (the same messages) are
dropped (the first copy is kept) and a side that both passed and failed (a flaky verifier: a sandbox timeout) is
dropped from both, so a pair never has the same side twice. With P distinct passing and R distinct failing sides,
pair i is (passing[i mod P], failing[i mod R]) for i < min(max_pairs_per_task, max(P, R)): every distinct
completion is used before any is reused, no pair repeats, and one task with many samples cannot dominate the
set. A task with no passing or no failing completion gives no pair (reported as `no_passing` / `no_failing`).

**Eval tasks never become training pairs.** `checkpoint_eval` samples the eval split: pairs from it would put
eval prompts (and verified answers to them) into DPO training, and every later `checkpoint_eval` would then
measure recall. So only train-split rollouts (`difficulty_profile`) make `split="train"` pairs, and a train
request that meets a held-out task id fails loudly (`EvalLeakError`) instead of dropping it quietly: it means
the split or the rollout table is wrong. Eval-split rollouts become `split="eval"` pairs, exported to a file of
their own, for measuring a reward or preference model on prompts no policy trained on. `training.dpo.run_dpo`
refuses them too. `split_pairs` builds both splits' pairs for the `preference_pairs` asset, the training ones from
the profile's rollouts (`profile_rollouts`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeGuard, get_args

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from core import SeedwheelError
from core.tables import atomic_write, frame_from_records, write_jsonl
from training.evaluation import is_episode
from training.export import MESSAGE_TYPE, ExportedSplit

PairSplit = Literal["train", "eval"]
SPLITS: tuple[str, ...] = get_args(PairSplit)
# Pairs per task and model: enough to use a few of a task's k samples, few enough that one task cannot dominate.
DEFAULT_MAX_PAIRS_PER_TASK = 4
# A message of a side: an episode's turns have OpenAI tool calls (arguments as JSON text) and tool results; a
# message without them reads back from Parquet with `tool_calls` and `tool_call_id` null.
TOOL_CALL_TYPE = pa.struct(
    [
        ("id", pa.string()),
        ("type", pa.string()),
        ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())])),
    ]
)
TURN_TYPE = pa.struct(
    [
        ("role", pa.string()),
        ("content", pa.string()),
        ("tool_calls", pa.list_(TOOL_CALL_TYPE)),
        ("tool_call_id", pa.string()),
    ]
)
PAIR_SCHEMA = pa.schema(
    [
        ("task_id", pa.string()),
        ("family", pa.string()),
        ("split", pa.string()),
        ("source", pa.string()),
        ("model", pa.string()),
        ("prompt", pa.list_(MESSAGE_TYPE)),
        ("chosen", pa.list_(TURN_TYPE)),
        ("rejected", pa.list_(TURN_TYPE)),
        ("chosen_reason", pa.string()),
        ("rejected_reason", pa.string()),
        ("chosen_score", pa.float64()),
        ("rejected_score", pa.float64()),
    ]
)
PAIR_COLUMNS = tuple(PAIR_SCHEMA.names)


class PreferenceDataError(SeedwheelError, ValueError):
    """Rollouts or settings that cannot make pairs: a sample without a field, a bad split or cap; names the row."""


class EvalLeakError(PreferenceDataError):
    """Training pairs were asked for from rollouts on held-out (eval) tasks."""


@dataclass(frozen=True)
class PreferencePairs:
    """Pairs built from one rollout table, and what became of the rest.

    Attributes:
        pairs: one dict per pair, keys `PAIR_COLUMNS`, ordered by task_id, model, pair index.
        outcomes: (task_id, model) -> `paired`, `no_passing` or `no_failing`, for every task that had samples.
        dropped: samples not used, by reason: `duplicate` (an exact copy of an earlier text with the same
            verdict), `conflicting` (the same text both passed and failed), `unknown_task` (no task record).
    """

    pairs: list[dict[str, Any]]
    outcomes: dict[tuple[str, str | None], str]
    dropped: Counter[str] = field(default_factory=Counter)

    @property
    def tasks_with_pairs(self) -> int:
        """Distinct task ids that gave at least one pair."""
        return len({task_id for (task_id, _), outcome in self.outcomes.items() if outcome == "paired"})


def build_preference_pairs(
    samples: Iterable[Mapping[str, Any]],
    tasks: Iterable[Mapping[str, Any]],
    *,
    split: PairSplit,
    source: str,
    held_out: Collection[str] = (),
    max_pairs_per_task: int = DEFAULT_MAX_PAIRS_PER_TASK,
) -> PreferencePairs:
    """Pair passing with failing completions of the same prompt (see the module docstring for the rules).

    Args:
        samples: scored completions, one per row: `task_id`, `completion`, `passed`, and optionally `score`,
            `reason`, `sample` (its index among the task's samples), `model` (who sampled it) and `turns` (an
            episode's messages: then they are the side, not the completion text).
        tasks: the task records of the split the samples were drawn on (`task_id`, `family`, `prompt`); samples
            of other tasks are dropped and counted as `unknown_task`.
        split: `train` for pairs that may be trained on, `eval` for held-out pairs.
        source: the rollout table's name, copied to every pair.
        held_out: task ids that must never become training pairs (the eval split); checked when `split="train"`.
        max_pairs_per_task: the most pairs per task and model.

    Returns:
        `PreferencePairs`.

    Raises:
        EvalLeakError: `split="train"` and a sample belongs to a held-out task.
        PreferenceDataError: an unknown split, `max_pairs_per_task` < 1, a sample without `task_id`,
            `completion` or `passed`, `turns` that are not chat messages, or a task whose prompt is not.

    Example:
        >>> task = {"task_id": "t1", "family": "arithmetic", "prompt": [{"role": "user", "content": "2+2?"}]}
        >>> rollouts = [{"task_id": "t1", "completion": "#### 4", "passed": True, "reason": "ok"},
        ...             {"task_id": "t1", "completion": "#### 5", "passed": False, "reason": "wrong"}]
        >>> [pair] = build_preference_pairs(rollouts, [task], split="train", source="demo").pairs
        >>> pair["chosen"], pair["rejected"]
        ([{'role': 'assistant', 'content': '#### 4'}], [{'role': 'assistant', 'content': '#### 5'}])
    """
    if split not in SPLITS:
        raise PreferenceDataError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if max_pairs_per_task < 1:
        raise PreferenceDataError(
            f"max_pairs_per_task={max_pairs_per_task} must be >= 1 ({DEFAULT_MAX_PAIRS_PER_TASK} is the default)"
        )
    rows = [_checked(sample, index) for index, sample in enumerate(samples)]
    if split == "train":
        leaked = sorted({row["task_id"] for row in rows} & set(held_out))
        if leaked:
            raise EvalLeakError(
                f"{len(leaked)} held-out task(s) among the rollouts for training pairs, e.g. {leaked[:3]}; training "
                "pairs come from train-split rollouts only: build these with split='eval', or fix the split"
            )
    by_id = {str(task["task_id"]): task for task in tasks}
    dropped: Counter[str] = Counter()
    groups: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    for row in rows:
        if row["task_id"] not in by_id:
            dropped["unknown_task"] += 1
            continue
        groups.setdefault((row["task_id"], row["model"]), []).append(row)
    pairs: list[dict[str, Any]] = []
    outcomes: dict[tuple[str, str | None], str] = {}
    for key in sorted(groups, key=lambda k: (k[0], k[1] or "")):
        passing, failing = _distinct_sides(groups[key], dropped)
        if not passing or not failing:
            outcomes[key] = "no_passing" if not passing else "no_failing"
            continue
        outcomes[key] = "paired"
        task = by_id[key[0]]
        prompt = _prompt(task)
        for i in range(min(max_pairs_per_task, max(len(passing), len(failing)))):
            chosen, rejected = passing[i % len(passing)], failing[i % len(failing)]
            pairs.append(
                {
                    "task_id": key[0],
                    "family": str(task.get("family") or "unknown"),
                    "split": split,
                    "source": source,
                    "model": key[1],
                    "prompt": prompt,
                    "chosen": chosen["side"],
                    "rejected": rejected["side"],
                    "chosen_reason": chosen["reason"],
                    "rejected_reason": rejected["reason"],
                    "chosen_score": chosen["score"],
                    "rejected_score": rejected["score"],
                }
            )
    return PreferencePairs(pairs=pairs, outcomes=outcomes, dropped=dropped)


def profile_rollouts(profile: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The scored samples a difficulty profile keeps (its `rollouts`), one row each, with its task and the policy
    that sampled it as the `model`: the training pairs' samples. A row without rollouts (not profiled) gives none.

    Example:
        >>> profile_rollouts([{"task_id": "t1", "policy": "sft", "rollouts": [{"completion": "#### 4"}]},
        ...                   {"task_id": "t2", "policy": "sft", "rollouts": None}])
        [{'completion': '#### 4', 'task_id': 't1', 'model': 'sft'}]
    """
    return [
        {**rollout, "task_id": row["task_id"], "model": row["policy"]}
        for row in profile
        for rollout in row["rollouts"] or []
    ]


def split_pairs(
    train_samples: Iterable[Mapping[str, Any]],
    train_tasks: Iterable[Mapping[str, Any]],
    eval_samples: Iterable[Mapping[str, Any]],
    eval_tasks: Sequence[Mapping[str, Any]],
    *,
    max_pairs_per_task: int = DEFAULT_MAX_PAIRS_PER_TASK,
) -> dict[PairSplit, PreferencePairs]:
    """Both splits' pairs: `train` from the profile's rollouts on the training tasks (`difficulty_profile`; a rollout
    on an eval task raises `EvalLeakError`), `eval` from the gate's rollouts on the eval tasks (`checkpoint_eval`).

    Args:
        train_samples: the training split's scored rollouts (`profile_rollouts`).
        train_tasks: the training split's task records.
        eval_samples: the eval split's scored rollouts.
        eval_tasks: the eval split's task records: held out from the training pairs.
        max_pairs_per_task: the most pairs per task and model.

    Returns:
        `PreferencePairs` by split, `train` first.
    """
    return {
        "train": build_preference_pairs(
            train_samples,
            train_tasks,
            split="train",
            source="difficulty_profile",
            held_out={task["task_id"] for task in eval_tasks},
            max_pairs_per_task=max_pairs_per_task,
        ),
        "eval": build_preference_pairs(
            eval_samples, eval_tasks, split="eval", source="checkpoint_eval", max_pairs_per_task=max_pairs_per_task
        ),
    }


def _checked(sample: Mapping[str, Any], index: int) -> dict[str, Any]:
    missing = [name for name in ("task_id", "completion", "passed") if sample.get(name) is None]
    if missing or not isinstance(sample["completion"], str):
        why = f"lacks {', '.join(missing)}" if missing else "has a completion that is not text"
        raise PreferenceDataError(
            f"rollout row {index} (task {sample.get('task_id', '?')}) {why}; pass scored samples with task_id, "
            "completion (text) and passed, as training.evaluation.sample_and_score returns them"
        )
    score = sample.get("score")
    model = sample.get("model")
    turns = sample.get("turns")
    if turns is None:
        side = [{"role": "assistant", "content": sample["completion"]}]
    elif _is_messages(turns):
        side = json.loads(json.dumps(turns))  # a copy: pairs that reuse a rollout do not share its dicts
    else:
        raise PreferenceDataError(
            f"rollout row {index} (task {sample['task_id']}) has turns that are not chat messages "
            f"[{{role, content}}]: {str(turns)[:60]!r}; pass an episode's turns as training.episodes stores them, "
            "or None for a single-turn completion"
        )
    return {
        "task_id": str(sample["task_id"]),
        "model": None if model is None else str(model),
        "sample": int(sample.get("sample") or 0),
        "completion": sample["completion"],
        "side": side,
        "key": json.dumps(side, sort_keys=True, ensure_ascii=False),
        "passed": bool(sample["passed"]),
        "score": None if score is None else float(score),
        "reason": str(sample.get("reason") or ""),
    }


def _is_messages(value: Any) -> TypeGuard[Sequence[Mapping[str, Any]]]:
    """Whether `value` is a non-empty list of messages with text `role` and `content`."""
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and bool(value)
        and all(isinstance(m, Mapping) and isinstance(m.get(k), str) for m in value for k in ("role", "content"))
    )


def _distinct_sides(
    rows: list[dict[str, Any]], dropped: Counter[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The passing and failing samples of one group: sorted, exact duplicates and conflicting sides removed."""
    first: dict[tuple[str, bool], dict[str, Any]] = {}
    for row in sorted(rows, key=lambda r: (r["sample"], r["completion"], r["key"])):
        key = (row["key"], row["passed"])
        if key in first:
            dropped["duplicate"] += 1
        else:
            first[key] = row
    conflicting = {side for side, passed in first if passed and (side, False) in first}
    if conflicting:
        dropped["conflicting"] += 2 * len(conflicting)
    kept = [row for (side, _), row in first.items() if side not in conflicting]
    return [r for r in kept if r["passed"]], [r for r in kept if not r["passed"]]


def _prompt(task: Mapping[str, Any]) -> list[dict[str, str]]:
    prompt = task.get("prompt")
    if _is_messages(prompt):
        return [{"role": m["role"], "content": m["content"]} for m in prompt]
    raise PreferenceDataError(
        f"task {task.get('task_id', '?')}: prompt must be chat messages [{{role, content}}] with text values, got "
        f"{str(prompt)[:60]!r}; read tables with core.tables.read_table, which decodes nested columns"
    )


def side_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """One side of a pair in a line, for a preview: a single message's content; an episode's calls in order (by
    tool name) and then its answer, joined by arrows.

    Example:
        >>> call = {"role": "assistant", "content": "...", "tool_calls": [{"function": {"name": "find_customer"}}]}
        >>> side_text([call, {"role": "tool", "content": "{}"}, {"role": "assistant", "content": "Refunded."}])
        'find_customer → Refunded.'
        >>> side_text([{"role": "assistant", "content": "#### 4"}])
        '#### 4'
    """
    if len(messages) == 1:
        return str(messages[0].get("content") or "")
    steps = []
    for message in messages:
        if message.get("role") != "assistant":
            continue
        calls = [call.get("function", {}).get("name") for call in message.get("tool_calls") or []]
        steps.append(", ".join(str(name) for name in calls) if calls else str(message.get("content") or ""))
    return " → ".join(steps)


def export_pairs(pairs: Sequence[Mapping[str, Any]], out_dir: Path, split: PairSplit) -> ExportedSplit:
    """Write one split's pairs to `<out_dir>/preferences_<split>.parquet` and `.jsonl`, each atomically.

    The Parquet file has fixed column types (`PAIR_SCHEMA`), so an empty split still has the schema a trainer
    expects; `datasets.load_dataset` reads either file straight into `trl.DPOTrainer`. The JSON Lines file keeps
    each message exactly; in the Parquet file a message without `tool_calls` or `tool_call_id` reads back with
    them null.

    Args:
        pairs: pair rows (`PreferencePairs.pairs`); every row must belong to `split`.
        out_dir: the folder; created when missing.
        split: `train` or `eval`: the file name says it, so eval pairs never land in the training file.

    Returns:
        The two paths and the row count (`training.export.ExportedSplit`).

    Raises:
        PreferenceDataError: an unknown split, or a row of another split.

    Example:
        >>> exported = export_pairs(result.pairs, Path(".seedwheel/export"), "train")  # doctest: +SKIP
        >>> load_dataset("parquet", data_files=str(exported.parquet), split="train")[0]["chosen"]  # doctest: +SKIP
        [{'role': 'assistant', 'content': '#### 4'}]
    """
    if split not in SPLITS:
        raise PreferenceDataError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    strays = [row.get("task_id") for row in pairs if row.get("split") != split]
    if strays:
        raise PreferenceDataError(
            f"{len(strays)} pair(s) of another split in the {split} export, e.g. task {strays[0]}; "
            "filter the pairs on their `split` column first"
        )
    rows = [{name: row.get(name) for name in PAIR_COLUMNS} for row in pairs]
    out_dir = Path(out_dir)
    parquet_path, jsonl_path = out_dir / f"preferences_{split}.parquet", out_dir / f"preferences_{split}.jsonl"
    with atomic_write(parquet_path) as handle:
        pq.write_table(pa.Table.from_pylist(rows, schema=PAIR_SCHEMA), handle)
    write_jsonl(rows, jsonl_path)
    return ExportedSplit(parquet=parquet_path, jsonl=jsonl_path, rows=len(rows))


def pairs_frame(built: Mapping[str, PreferencePairs]) -> pd.DataFrame:
    """Every split's pairs as one table, split by split, with the columns `PAIR_COLUMNS`."""
    return frame_from_records([pair for part in built.values() for pair in part.pairs], PAIR_COLUMNS)


def pairs_by_family(pairs: pd.DataFrame) -> list[dict[str, Any]]:
    """Pairs and the distinct tasks that gave them, per split, source and family (sorted), from a `pairs_frame`."""
    counts = pairs.groupby(["split", "source", "family"]).agg(pairs=("task_id", "size"), tasks=("task_id", "nunique"))
    return counts.reset_index().to_dict(orient="records")


def outcomes_by_split(built: Mapping[str, PreferencePairs]) -> list[dict[str, Any]]:
    """How many tasks each outcome (`paired`, `no_passing`, `no_failing`) had, per split, outcomes sorted.

    Example:
        >>> outcomes_by_split({"eval": PreferencePairs([], {("t1", "m"): "no_passing", ("t2", "m"): "no_passing"})})
        [{'split': 'eval', 'outcome': 'no_passing', 'tasks': 2}]
    """
    return [
        {"split": split, "outcome": outcome, "tasks": n}
        for split, part in built.items()
        for outcome, n in sorted(Counter(part.outcomes.values()).items())
    ]


def episode_pairs(pairs: pd.DataFrame, tasks: Iterable[Mapping[str, Any]]) -> int:
    """Pairs whose sides are multi-turn episodes (their `turns`): the pairs of `episode` tasks among `tasks`."""
    return int(pairs["task_id"].isin({task["task_id"] for task in tasks if is_episode(task)}).sum())
