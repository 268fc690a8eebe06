"""Audit a GRPO reward before training on it: agreement with human verdicts, and probes for reward hacks.

A reward that pays for wrong answers teaches the policy to produce them; one that fails right answers starves
it. `audit_reward(reward_funcs, weights, tasks, labelled)` calls the reward functions exactly as TRL's
`GRPOTrainer` does (`f(prompts=..., completions=..., completion_ids=..., **columns)`, conversational
completions, the dataset columns `task_id`, `family`, `verifier` as per-row lists, `log_extra`/`log_metric`
callables, `trainer_state`) and checks two things:

1. **Labelled completions** (`seeds/audit/reward_audit.jsonl`, see `load_labelled`): each row embeds a small
   task, a completion and a human verdict `{"accept": bool, "reason": str}`. The reward "accepts" one when its
   combined score reaches `policy.accept_threshold` (default 1.0: full reward, since partial credit, e.g.
   5 of 7 tests, is not a correct answer). Measured: agreement, the false-accept rate (share of
   human-rejected completions the reward accepts) and the false-reject rate (share of human-accepted ones
   it rejects).
2. **Probes** over a task set (e.g. the training tasks): completions that ignore the task must not score.
   `empty` (""), `constant` (`policy.constant_text`, "42"), `majority_reference` (each family's most common
   reference, the answer a policy could learn to always give; not on the tasks whose own reference it is, where it
   is the gold), `random` (seeded printable noise) and
   `echo_prompt` (the last user message repeated back). Each probe's mean reward must stay at or below
   `policy.max_probe_score` overall *and in every family* (a reward broken for one small family would
   otherwise hide in the overall mean).
3. **Hack probes** per task (`Verifier.hack_probes`): completions built from each task's own gold that try
   to be paid without solving it (hedged numbers, always-equal objects, literal SQL of the gold rows, every
   tool called, every schema property). Each runs through the same reward functions; one that scores above
   `policy.max_probe_score` fails the audit, naming the probe and the task. There is no allow-list: a hole is
   fixed, or its verifier is not used for training.

Rows and tasks no reward function applies to (every function returned None) are left out of the rates and
reported: TRL gives such rows reward 0, and training tasks that no function covers fail the audit.

The combined score of a row is the weighted mean over the functions that apply to it (weights normalised by
their absolute sum), so a single reward in [0, 1] stays in [0, 1] and weights compare across configs.

The outcome is one `AuditCheck` record per check (name, passed, severity, message, figures): callers read the
fields, people read the messages. A `warning` (a labelled row or family the reward does not cover) is shown and
never fails the audit; an `error` that did not pass does.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import random
import string
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from core import SeedwheelError
from validators.registry import REGISTRY, HackProbe, UnknownVerifierError, VerifyContext, spec_problems

PROBES = ("empty", "constant", "majority_reference", "random", "echo_prompt")
# Printable noise with the characters answers are made of (digits, braces, quotes, newlines), so the random
# probe reaches extractors instead of being rejected for containing nothing that looks like an answer.
_RANDOM_ALPHABET = string.ascii_letters + string.digits + string.punctuation + " " * 8 + "\n"
_RANDOM_LENGTH = 80
_EXAMPLES_IN_REASON = 3


class RewardAuditInputError(SeedwheelError, ValueError):
    """A labelled audit file the audit cannot use; the message names the file, the line and the fix."""


class RewardAuditPolicyError(SeedwheelError, ValueError):
    """A reward-audit policy with impossible values; the message gives the value and the fix."""


@dataclass(frozen=True)
class RewardAuditPolicy:
    """Floors and ceilings of the reward audit.

    Args:
        min_agreement: share of scored labelled rows where the reward's accept/reject matches the human's.
        max_false_accept_rate: share of human-rejected completions the reward may accept.
        max_false_reject_rate: share of human-accepted completions the reward may reject.
        max_probe_score: highest allowed mean reward of a probe, overall and in every family.
        accept_threshold: combined score at or above which the reward counts as accepting (1.0: full reward).
        probes: which probes to run (a subset of `PROBES`).
        hack_probes: run every task's verifier hack probes (`Verifier.hack_probes`); off only where a test is
            about the other checks.
        constant_text: the `constant` probe's completion.
        seed: seed of the `random` probe's text.

    Example:
        >>> RewardAuditPolicy(max_probe_score=0.05).probes[0]
        'empty'
    """

    min_agreement: float = 0.95
    max_false_accept_rate: float = 0.05
    max_false_reject_rate: float = 0.05
    max_probe_score: float = 0.1
    accept_threshold: float = 1.0
    probes: tuple[str, ...] = PROBES
    hack_probes: bool = True
    constant_text: str = "42"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("min_agreement", "max_false_accept_rate", "max_false_reject_rate", "max_probe_score"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and 0.0 <= value <= 1.0):
                raise RewardAuditPolicyError(f"{name} ({value!r}) must be a rate in [0, 1]")
        if not (math.isfinite(self.accept_threshold) and 0.0 < self.accept_threshold <= 1.0):
            raise RewardAuditPolicyError(
                f"accept_threshold ({self.accept_threshold!r}) must be in (0, 1]; 1.0 means full reward"
            )
        unknown = sorted(set(self.probes) - set(PROBES))
        if unknown:
            raise RewardAuditPolicyError(f"unknown probes {unknown}; choose from {', '.join(PROBES)}")


@dataclass(frozen=True)
class LabelledCompletion:
    """One row of the labelled audit set: a small task, a completion and the human verdict.

    Attributes:
        id: a short unique name for the row (used in reasons).
        family: the task family.
        prompt: the task's chat messages.
        verifier: the task's verifier spec `{name, params}`.
        completion: text, one assistant message, or a list of messages.
        accept: the human verdict.
        reason: the human's one-line why (what a reviewer reads when the reward disagrees).
        tags: labels of what the row tests, such as `right_number_early` or `hard_coded`.
        line: where it came from (1-based), 0 when built in code.
    """

    id: str
    family: str
    prompt: list[dict[str, Any]]
    verifier: dict[str, Any]
    completion: str | dict[str, Any] | list[dict[str, Any]]
    accept: bool
    reason: str = ""
    tags: tuple[str, ...] = ()
    line: int = 0


Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class AuditCheck:
    """One check of the reward audit, as a record: callers read `passed` and `severity`, people read `message`.

    Attributes:
        name: what was checked: `agreement`, `false_accept_rate`, `false_reject_rate`, `labelled_scored`,
            `labelled_unscored`, `probe/<probe>`, `probe_tasks`, `probe_coverage`, `hack_probes_built`,
            `hack_probe/<probe>`, `hack_probes`, `labelled_families` (`/error` added where a reward misbehaved).
        passed: whether the reward met this check.
        message: the line shown to people (a passing one ends in `: ok`; a warning starts with `note:`).
        severity: `error` fails the audit when not passed; `warning` is reported and never fails it.
        figures: the numbers behind the line (the value and its limit, counts).

    Example:
        >>> AuditCheck("agreement", True, "agreement 1.00 (4/4 labelled rows) >= 0.95: ok").blocks
        False
    """

    name: str
    passed: bool
    message: str
    severity: Severity = "error"
    figures: dict[str, float | int] = field(default_factory=dict)

    @property
    def blocks(self) -> bool:
        """Whether this check fails the audit (an error that did not pass)."""
        return self.severity == "error" and not self.passed


@dataclass(frozen=True)
class RewardAudit:
    """The audit's outcome: one record per check, the numbers, and the scored labelled rows."""

    checks: list[AuditCheck]
    numbers: dict[str, float | int]
    rows: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def passed(self) -> bool:
        """True when no error-severity check failed (warnings never fail the audit)."""
        return not self.failures

    @property
    def failures(self) -> list[AuditCheck]:
        """The checks that fail the audit, in order."""
        return [check for check in self.checks if check.blocks]

    @property
    def reasons(self) -> list[str]:
        """Every check's line, in order, passing ones too."""
        return [check.message for check in self.checks]


def load_labelled(path: str | os.PathLike[str], *, context: VerifyContext | None = None) -> list[LabelledCompletion]:
    """Read a labelled audit set (JSON Lines) and check every row's verifier spec.

    Each line: `{"id": str, "family": str, "prompt": [{role, content}, ...], "verifier": {name, params},
    "completion": str | message | [messages], "human": {"accept": bool, "reason": str}, "tags": [str]}`
    (`human.reason` and `tags` optional). Relative fixture paths resolve against the seeds folder, as in seeds.

    Args:
        path: the JSON Lines file, e.g. `seeds/audit/reward_audit.jsonl`.
        context: where fixture paths (`database: sql/shop.sqlite`) resolve; default as in `verify`.

    Returns:
        The rows, in file order.

    Raises:
        RewardAuditInputError: unreadable file, bad JSON, a missing or mistyped field, a repeated id, or a
            verifier spec with problems (the message gives `path:line`).

    Example:
        >>> rows = load_labelled("seeds/audit/reward_audit.jsonl")  # doctest: +SKIP
        >>> sum(r.accept for r in rows), len(rows)  # doctest: +SKIP
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RewardAuditInputError(f"{path}: cannot read the labelled audit set ({exc}); check the path") from exc
    rows: list[LabelledCompletion] = []
    seen: dict[str, int] = {}
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue

        def bad(problem: str, fix: str, line_no: int = line_no) -> RewardAuditInputError:
            return RewardAuditInputError(f"{path}:{line_no}: {problem}; {fix}")

        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise bad(f"not valid JSON ({exc.msg} at col {exc.colno})", "write one JSON object per line") from None
        if not isinstance(raw, dict):
            raise bad(f"expected a JSON object, got {type(raw).__name__}", "write one object per line")
        shape = {"id": str, "family": str, "prompt": list, "verifier": dict, "human": dict}
        for key, kind in shape.items():
            if not isinstance(raw.get(key), kind):
                raise bad(f"field '{key}' must be a {kind.__name__}", "see training.reward_audit.load_labelled")
        if not isinstance(raw["human"].get("accept"), bool):
            raise bad("human.accept must be true or false", 'write "human": {"accept": true, "reason": "..."}')
        tags = raw.get("tags", [])
        if not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
            raise bad("tags must be a list of strings", 'e.g. "tags": ["hard_coded"]')
        if not isinstance(raw.get("completion"), str | dict | list):
            raise bad("completion must be text, a message or a list of messages", "add a 'completion'")
        if raw["id"] in seen:
            raise bad(f"id '{raw['id']}' repeats line {seen[raw['id']]}", "give every row its own id")
        problems = spec_problems(raw["verifier"], context)
        if problems:
            raise bad("verifier: " + "; ".join(problems), "fix the embedded task's verifier spec")
        seen[raw["id"]] = line_no
        rows.append(
            LabelledCompletion(
                id=raw["id"],
                family=raw["family"],
                prompt=raw["prompt"],
                verifier=raw["verifier"],
                completion=raw["completion"],
                accept=raw["human"]["accept"],
                reason=str(raw["human"].get("reason", "")),
                tags=tuple(tags),
                line=line_no,
            )
        )
    if not rows:
        raise RewardAuditInputError(f"{path}: no labelled rows; add JSON Lines rows (see load_labelled)")
    return rows


def _conversational(completion: Any) -> list[dict[str, Any]]:
    """The completion as TRL hands it to rewards for conversational datasets: a list of assistant messages."""
    if isinstance(completion, str):
        return [{"role": "assistant", "content": completion}]
    if isinstance(completion, Mapping):
        return [{"role": "assistant", **completion}]
    return [dict(m) for m in completion]


def _completion_text(completion: Any) -> str:
    messages = _conversational(completion)
    return "".join(str(m.get("content") or "") for m in messages)


@dataclass
class BatchScores:
    """Combined scores of one batch (None where no function applied), per-row details, or why the reward failed."""

    scores: list[float | None]
    details: list[str]
    error: str | None = None


def _reward_name(func: Callable[..., Any]) -> str:
    return getattr(func, "__name__", None) or type(func).__name__


def score_with_rewards(
    reward_funcs: Sequence[Callable[..., Any]],
    weights: Sequence[float],
    prompts: Sequence[Any],
    completions: Sequence[Any],
    columns: Mapping[str, Sequence[Any]],
) -> BatchScores:
    """Call every reward function once on the batch, as TRL does, and combine their outputs per row.

    Args:
        reward_funcs: TRL-style reward functions.
        weights: one weight per function.
        prompts: the prompts (message lists).
        completions: the completions (any form; passed conversational).
        columns: dataset columns, one value per row.

    Returns:
        Combined scores (None where every function returned None), per-row details (the reasons the
        functions logged through `log_extra`), or an `error` naming the function that misbehaved.
    """
    conversational = [_conversational(c) for c in completions]
    # Byte values stand in for token ids: right length-ish and shape, and no tokenizer is needed.
    completion_ids = [list(_completion_text(c).encode("utf-8")) for c in completions]
    n = len(completions)
    weighted = [0.0] * n
    weight_sums = [0.0] * n
    details: list[list[str]] = [[] for _ in range(n)]
    for func, weight in zip(reward_funcs, weights, strict=True):
        name = _reward_name(func)
        extras: dict[str, list[Any]] = {}

        def log_extra(column: str, values: list[Any], extras: dict[str, list[Any]] = extras) -> None:
            extras[column] = list(values)

        try:
            values = func(
                prompts=list(prompts),
                completions=conversational,
                completion_ids=completion_ids,
                **{key: list(value) for key, value in columns.items()},
                trainer_state=None,
                log_extra=log_extra,
                log_metric=lambda *args, **kwargs: None,
            )
        except Exception as exc:  # TRL would stop training here; the audit reports it instead
            return BatchScores([], [], error=f"reward '{name}' raised {type(exc).__name__}: {exc}")
        if not isinstance(values, Sequence) or len(values) != n:
            got = len(values) if isinstance(values, Sequence) else type(values).__name__
            return BatchScores([], [], error=f"reward '{name}' returned {got} values for {n} completions")
        for i, value in enumerate(values):
            if value is None or (isinstance(value, numbers.Real) and math.isnan(value)):
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                return BatchScores([], [], error=f"reward '{name}' returned {value!r} for row {i}; expected a float")
            weighted[i] += weight * float(value)
            weight_sums[i] += abs(weight)
        for column, column_values in extras.items():
            if len(column_values) == n:
                for i, value in enumerate(column_values):
                    details[i].append(f"{column}={value}")
    scores = [weighted[i] / weight_sums[i] if weight_sums[i] else None for i in range(n)]
    return BatchScores(scores, ["; ".join(d) for d in details])


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _audit_labelled(
    reward_funcs: Sequence[Callable[..., Any]],
    weights: Sequence[float],
    labelled: Sequence[LabelledCompletion],
    policy: RewardAuditPolicy,
    checks: list[AuditCheck],
    numbers: dict[str, float | int],
) -> list[dict[str, Any]]:
    """Score the labelled rows, add the agreement and false-accept/false-reject checks; returns the scored rows."""
    scored = score_with_rewards(
        reward_funcs,
        weights,
        [row.prompt for row in labelled],
        [row.completion for row in labelled],
        {
            "task_id": [row.id for row in labelled],
            "family": [row.family for row in labelled],
            "verifier": [row.verifier for row in labelled],
        },
    )
    if scored.error:
        checks.append(AuditCheck("labelled/error", False, f"labelled set: {scored.error}"))
        return []
    rows: list[dict[str, Any]] = []
    for row, score, detail in zip(labelled, scored.scores, scored.details, strict=True):
        accepted = None if score is None else score >= policy.accept_threshold - 1e-9
        rows.append(
            {
                "id": row.id,
                "family": row.family,
                "human_accept": row.accept,
                "score": score,
                "reward_accept": accepted,
                "agree": None if accepted is None else accepted == row.accept,
                "detail": detail,
                "human_reason": row.reason,
                "tags": list(row.tags),
            }
        )
    judged = [r for r in rows if r["reward_accept"] is not None]
    unscored = len(rows) - len(judged)
    human_accepts = [r for r in judged if r["human_accept"]]
    human_rejects = [r for r in judged if not r["human_accept"]]
    false_accepts = [r for r in human_rejects if r["reward_accept"]]
    false_rejects = [r for r in human_accepts if not r["reward_accept"]]
    agreement = _rate(sum(r["agree"] for r in judged), len(judged))
    fa_rate = _rate(len(false_accepts), len(human_rejects))
    fr_rate = _rate(len(false_rejects), len(human_accepts))
    numbers.update(
        {
            "labelled/rows": len(rows),
            "labelled/scored": len(judged),
            "labelled/agreement": agreement,
            "labelled/false_accept_rate": fa_rate,
            "labelled/false_reject_rate": fr_rate,
            "labelled/false_accepts": len(false_accepts),
            "labelled/false_rejects": len(false_rejects),
            "labelled/mean_score_human_accept": _mean([r["score"] for r in human_accepts]),
            "labelled/mean_score_human_reject": _mean([r["score"] for r in human_rejects]),
        }
    )
    if unscored:
        checks.append(
            AuditCheck(
                "labelled_unscored",
                False,
                f"note: {unscored} of {len(rows)} labelled rows get no reward from any function (left out of the "
                "rates)",
                severity="warning",
                figures={"unscored": unscored, "rows": len(rows)},
            )
        )
    if not judged:
        checks.append(
            AuditCheck(
                "labelled_scored",
                False,
                "labelled set: no row is scored by these reward functions, so agreement cannot be measured",
                figures={"scored": 0, "rows": len(rows)},
            )
        )
        return rows

    def examples(found: list[dict[str, Any]]) -> str:
        shown = ", ".join(f"{r['id']} ({r['score']:.2f})" for r in found[:_EXAMPLES_IN_REASON])
        return f", e.g. {shown}" if found else ""

    agreed_rows = len(judged) - len(false_accepts) - len(false_rejects)
    agreed = f"({agreed_rows}/{len(judged)} labelled rows)"
    passed = agreement >= policy.min_agreement
    checks.append(
        AuditCheck(
            "agreement",
            passed,
            f"agreement {agreement:.2f} {agreed} >= {policy.min_agreement:.2f}: ok"
            if passed
            else f"agreement {agreement:.2f} {agreed} < min {policy.min_agreement:.2f}: "
            "the reward disagrees with human verdicts",
            figures={"value": agreement, "limit": policy.min_agreement, "agreed": agreed_rows, "scored": len(judged)},
        )
    )
    counts = f"({len(false_accepts)} of {len(human_rejects)} human-rejected completions accepted)"
    passed = fa_rate <= policy.max_false_accept_rate
    checks.append(
        AuditCheck(
            "false_accept_rate",
            passed,
            f"false-accept rate {fa_rate:.2f} {counts} <= {policy.max_false_accept_rate:.2f}: ok"
            if passed
            else f"false-accept rate {fa_rate:.2f} {counts} > max {policy.max_false_accept_rate:.2f}: the reward "
            f"pays for wrong answers{examples(false_accepts)}",
            figures={
                "value": fa_rate,
                "limit": policy.max_false_accept_rate,
                "false_accepts": len(false_accepts),
                "human_rejects": len(human_rejects),
            },
        )
    )
    counts = f"({len(false_rejects)} of {len(human_accepts)} human-accepted completions rejected)"
    passed = fr_rate <= policy.max_false_reject_rate
    checks.append(
        AuditCheck(
            "false_reject_rate",
            passed,
            f"false-reject rate {fr_rate:.2f} {counts} <= {policy.max_false_reject_rate:.2f}: ok"
            if passed
            else f"false-reject rate {fr_rate:.2f} {counts} > max {policy.max_false_reject_rate:.2f}: the reward "
            f"fails right answers{examples(false_rejects)}",
            figures={
                "value": fr_rate,
                "limit": policy.max_false_reject_rate,
                "false_rejects": len(false_rejects),
                "human_accepts": len(human_accepts),
            },
        )
    )
    return rows


def score_labelled(
    reward_funcs: Sequence[Callable[..., Any]],
    weights: Sequence[float],
    labelled: Sequence[LabelledCompletion],
    *,
    policy: RewardAuditPolicy | None = None,
) -> list[dict[str, Any]]:
    """The labelled rows scored as `audit_reward` scores them (its `rows`), without the probes and checks: what a
    review page shows after each label. Empty when a reward function misbehaved."""
    return _audit_labelled(reward_funcs, list(weights), labelled, policy or RewardAuditPolicy(), [], {})


def _mean(values: Sequence[float | None]) -> float:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else 0.0


def _messages(task: Mapping[str, Any]) -> list[dict[str, Any]]:
    prompt = task.get("prompt")
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [dict(m) for m in prompt or []]


def probe_completions(
    tasks: Sequence[Mapping[str, Any]], probe: str, *, constant_text: str = "42", seed: int = 0
) -> list[str | None]:
    """The completions a probe sends for each task (see the module docstring for what each probe is).

    Args:
        tasks: task records (`family`, `prompt`, optional `reference`).
        probe: one of `PROBES`.
        constant_text: the `constant` probe's text.
        seed: the `random` probe's seed.

    Returns:
        One completion text per task, or None where the probe does not apply (the majority reference on the
        tasks whose own reference it is).

    Example:
        >>> probe_completions([{"family": "a", "prompt": "2+2?"}], "echo_prompt")
        ['2+2?']
    """
    if probe == "empty":
        return [""] * len(tasks)
    if probe == "constant":
        return [constant_text] * len(tasks)
    if probe == "majority_reference":
        by_family: dict[str, Counter[str]] = {}
        for task in tasks:
            reference = task.get("reference")
            if isinstance(reference, str) and reference.strip():
                by_family.setdefault(str(task.get("family")), Counter())[reference] += 1
        # Counter.most_common keeps first-seen order among ties, so the choice is stable for a given task order.
        majority = {family: counts.most_common(1)[0][0] for family, counts in by_family.items()}
        # Not on the tasks whose own reference it is: there it is the gold, and paying it is right.
        texts = [majority.get(str(task.get("family")), "") for task in tasks]
        return [None if text == task.get("reference") else text for text, task in zip(texts, tasks, strict=True)]
    if probe == "random":
        rng = random.Random(seed)
        return ["".join(rng.choices(_RANDOM_ALPHABET, k=_RANDOM_LENGTH)) for _ in tasks]
    if probe == "echo_prompt":
        out: list[str | None] = []
        for task in tasks:
            users = [m for m in _messages(task) if m.get("role", "user") == "user"]
            out.append(str(users[-1].get("content", "")) if users else "")
        return out
    raise RewardAuditPolicyError(f"unknown probe {probe!r}; choose from {', '.join(PROBES)}")


def _audit_probes(
    reward_funcs: Sequence[Callable[..., Any]],
    weights: Sequence[float],
    tasks: Sequence[Mapping[str, Any]],
    policy: RewardAuditPolicy,
    checks: list[AuditCheck],
    numbers: dict[str, float | int],
) -> None:
    if not tasks:
        checks.append(
            AuditCheck("probe_tasks", False, "probes: no tasks to probe the reward on; pass the training tasks")
        )
        return
    prompts = [_messages(task) for task in tasks]
    families = [str(task.get("family") or "unknown") for task in tasks]
    columns = {
        "task_id": [str(task.get("task_id", i)) for i, task in enumerate(tasks)],
        "family": families,
        "verifier": [task["verifier"] for task in tasks],
    }
    covered = [False] * len(tasks)
    numbers["probe/tasks"] = len(tasks)
    for probe in policy.probes:
        completions = probe_completions(tasks, probe, constant_text=policy.constant_text, seed=policy.seed)
        probed = [i for i, text in enumerate(completions) if text is not None]
        scored = score_with_rewards(
            reward_funcs,
            weights,
            [prompts[i] for i in probed],
            [completions[i] or "" for i in probed],
            {name: [values[i] for i in probed] for name, values in columns.items()},
        )
        if scored.error:
            checks.append(AuditCheck(f"probe/{probe}/error", False, f"probe {probe}: {scored.error}"))
            continue
        by_family: dict[str, list[float]] = {}
        for i, score in zip(probed, scored.scores, strict=True):
            if score is not None:
                covered[i] = True
                by_family.setdefault(families[i], []).append(score)
        overall = _mean([s for s in scored.scores if s is not None])
        family_means = {family: _mean(values) for family, values in sorted(by_family.items())}
        numbers[f"probe/{probe}/mean"] = overall
        for family, mean in family_means.items():
            numbers[f"probe/{probe}/{family}/mean"] = mean
        worst = sorted(((f, m) for f, m in family_means.items() if m > policy.max_probe_score), key=lambda fm: -fm[1])
        label = f"probe {probe}" + (f" ({policy.constant_text!r})" if probe == "constant" else "")
        top = max(family_means.values(), default=0.0)
        figures: dict[str, float | int] = {
            "mean": overall,
            "highest_family_mean": top,
            "limit": policy.max_probe_score,
        }
        if not worst:
            message = (
                f"{label} mean reward {overall:.2f} (highest family {top:.2f}) <= {policy.max_probe_score:.2f}: ok"
            )
            checks.append(AuditCheck(f"probe/{probe}", True, message, figures=figures))
            continue
        listed = ", ".join(f"{f} {m:.2f} ({len(by_family[f])} tasks)" for f, m in worst)
        message = (
            f"{label} mean reward {overall:.2f} over {sum(len(v) for v in by_family.values())} tasks; above max "
            f"{policy.max_probe_score:.2f} in {listed}: the reward pays for a completion that ignores the task"
        )
        checks.append(AuditCheck(f"probe/{probe}", False, message, figures={**figures, "families_above": len(worst)}))
    uncovered = [families[i] for i, hit in enumerate(covered) if not hit]
    numbers["probe/tasks_without_reward"] = len(uncovered)
    if uncovered and policy.probes:
        shown = ", ".join(f"{family} {count}" for family, count in sorted(Counter(uncovered).items()))
        checks.append(
            AuditCheck(
                "probe_coverage",
                False,
                f"{len(uncovered)} of {len(tasks)} tasks get no reward from any function ({shown}): TRL scores them "
                "0; add a reward for their verifier or '*'",
                figures={"tasks_without_reward": len(uncovered), "tasks": len(tasks)},
            )
        )


def hack_probe_rows(
    tasks: Sequence[Mapping[str, Any]], context: VerifyContext
) -> tuple[list[tuple[int, HackProbe]], list[str]]:
    """Every task's hack probes, from its own verifier, and the tasks whose probes could not be built.

    Args:
        tasks: task records (`task_id`, `verifier` as a dict or JSON text, optional `reference`).

    Returns:
        `(task index, probe)` pairs in task order, and one problem line per task whose verifier is unknown or
        whose probes raised (e.g. a missing SQL database).

    Example:
        >>> task = {"task_id": "t", "verifier": {"name": "numeric_answer", "params": {"answer": 4}}}
        >>> rows, problems = hack_probe_rows([task], VerifyContext())
        >>> rows[0][1].name, problems
        ('hedge_or', [])
    """
    rows: list[tuple[int, HackProbe]] = []
    problems: list[str] = []
    for index, task in enumerate(tasks):
        spec = task["verifier"]
        try:
            spec = json.loads(spec) if isinstance(spec, str) else spec
            verifier = REGISTRY.get(spec["name"], spec.get("version"))
            probes = verifier.hack_probes(spec.get("params", {}), task.get("reference"), context)
        except (UnknownVerifierError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"{task.get('task_id', index)}: {type(exc).__name__}: {exc}")
            continue
        rows += [(index, probe) for probe in probes]
    return rows, problems


def _audit_hack_probes(
    reward_funcs: Sequence[Callable[..., Any]],
    weights: Sequence[float],
    tasks: Sequence[Mapping[str, Any]],
    policy: RewardAuditPolicy,
    context: VerifyContext,
    checks: list[AuditCheck],
    numbers: dict[str, float | int],
) -> None:
    rows, problems = hack_probe_rows(tasks, context)
    if problems:
        shown = "; ".join(problems[:_EXAMPLES_IN_REASON])
        checks.append(
            AuditCheck(
                "hack_probes_built",
                False,
                f"hack probes could not be built for {len(problems)} tasks ({shown}): fix those tasks",
                figures={"tasks_without_probes": len(problems), "tasks": len(tasks)},
            )
        )
    ids = [str(task.get("task_id", i)) for i, task in enumerate(tasks)]
    scored = score_with_rewards(
        reward_funcs,
        weights,
        [_messages(tasks[i]) for i, _ in rows],
        [probe.completion for _, probe in rows],
        {
            "task_id": [ids[i] for i, _ in rows],
            "family": [str(tasks[i].get("family") or "unknown") for i, _ in rows],
            "verifier": [tasks[i]["verifier"] for i, _ in rows],
        },
    )
    if scored.error:
        checks.append(AuditCheck("hack_probes/error", False, f"hack probes: {scored.error}"))
        return
    runs: Counter[str] = Counter(probe.name for _, probe in rows)
    paid: dict[str, list[str]] = {}
    for (i, probe), score in zip(rows, scored.scores, strict=True):
        if score is not None and score > policy.max_probe_score:
            paid.setdefault(probe.name, []).append(f"{ids[i]} ({score:.2f})")
    numbers["hack_probe/tasks"] = len({i for i, _ in rows})
    numbers["hack_probe/runs"] = len(rows)
    numbers["hack_probe/paid"] = sum(len(found) for found in paid.values())
    for name in sorted(runs):
        numbers[f"hack_probe/{name}/runs"] = runs[name]
        numbers[f"hack_probe/{name}/paid"] = len(paid.get(name, []))
    for name, found in sorted(paid.items()):
        checks.append(
            AuditCheck(
                f"hack_probe/{name}",
                False,
                f"hack probe {name} paid above {policy.max_probe_score:.2f} on {len(found)} of {runs[name]} tasks, "
                f"e.g. {', '.join(found[:_EXAMPLES_IN_REASON])}: the reward pays a completion that does not solve "
                "the task",
                figures={"paid": len(found), "runs": runs[name], "limit": policy.max_probe_score},
            )
        )
    if not paid:
        checks.append(
            AuditCheck(
                "hack_probes",
                True,
                f"hack probes: none of {len(rows)} ({len(runs)} kinds over {numbers['hack_probe/tasks']} tasks) paid "
                f"above {policy.max_probe_score:.2f}: ok",
                figures={"runs": len(rows), "kinds": len(runs), "limit": policy.max_probe_score},
            )
        )


def audit_reward(
    reward_funcs: Sequence[Callable[..., Any]],
    weights: Sequence[float] | None,
    tasks: Sequence[Mapping[str, Any]],
    labelled: Sequence[LabelledCompletion],
    *,
    policy: RewardAuditPolicy | None = None,
    context: VerifyContext | None = None,
) -> RewardAudit:
    """Audit reward functions against human verdicts and reward-hack probes.

    Args:
        reward_funcs: TRL-style reward functions, e.g. from `validators.rewards.build_reward_funcs`.
        weights: one weight per function (as `GRPOConfig.reward_weights`); None weighs each 1.0.
        tasks: task records to probe on (`task_id`, `family`, `prompt`, `verifier`, optional `reference`),
            e.g. the training tasks.
        labelled: the labelled set (`load_labelled`).
        policy: floors and ceilings; the defaults when None.
        context: where the tasks' fixtures resolve for their hack probes (a SQL task's database), as the
            reward functions were given; the default as in `verify`.

    Returns:
        `RewardAudit(checks, numbers, rows)`: one `AuditCheck` per check, passing ones too (`passed` is False
        when an error-severity check failed; `failures` lists those, `reasons` every check's line); `rows` are
        the labelled rows with the reward's score and whether it agreed.

    Raises:
        RewardAuditPolicyError: weights that do not match the functions, or no functions.

    Example:
        >>> funcs, weights = build_reward_funcs({"*": 1.0})  # doctest: +SKIP
        >>> audit = audit_reward(funcs, weights, train_tasks, load_labelled(path))  # doctest: +SKIP
        >>> audit.passed, audit.reasons[0]  # doctest: +SKIP
        (True, 'agreement 1.00 (40/40 labelled rows) >= 0.95: ok')
    """
    policy = policy or RewardAuditPolicy()
    context = context or VerifyContext()
    if not reward_funcs:
        raise RewardAuditPolicyError("no reward functions to audit")
    weights = [1.0] * len(reward_funcs) if weights is None else [float(w) for w in weights]
    if len(weights) != len(reward_funcs):
        raise RewardAuditPolicyError(
            f"{len(weights)} weights for {len(reward_funcs)} reward functions; give one weight per function"
        )
    if not any(weights):
        raise RewardAuditPolicyError("every reward weight is 0; nothing would be rewarded")
    checks: list[AuditCheck] = []
    numbers: dict[str, float | int] = {}
    rows = _audit_labelled(reward_funcs, weights, labelled, policy, checks, numbers)
    _audit_probes(reward_funcs, weights, tasks, policy, checks, numbers)
    if policy.hack_probes:
        _audit_hack_probes(reward_funcs, weights, tasks, policy, context, checks, numbers)
    task_families = {str(task.get("family") or "unknown") for task in tasks}
    missing = sorted(task_families - {row.family for row in labelled})
    if missing:
        # A warning: the probes still cover those families, but nobody checked the reward accepts their answers.
        checks.append(
            AuditCheck(
                "labelled_families",
                False,
                f"note: no labelled rows for families {', '.join(missing)}; add some to the audit set",
                severity="warning",
                figures={"families_without_rows": len(missing)},
            )
        )
    return RewardAudit(checks=checks, numbers=numbers, rows=rows)
