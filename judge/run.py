"""`judge_tasks`: score tasks with an LLM judge, repair unusable answers once, label every task.

Two batches at most, both through the client's cache: every first-pass request at once, then one repair
request for each answer that did not parse (see `judge.parse`). Whatever is still unusable becomes a
`judge_error` judgment with its error code, detail and raw text: never an exception, never a default score.
Infrastructure errors the client raises (`EndpointRejected`, `EndpointUnavailable`, `CallBudgetExceeded`) still
raise; answers received before them are cached, so a rerun resumes.

Error codes of a `judge_error` judgment: the `judge.parse.PARSE_ERRORS` (`empty`, `json_missing`,
`json_invalid`, `not_an_object`, `missing_criteria`, `bad_score`, `score_out_of_range`, `bad_rationale`) of
the last answer, or `llm_error` when a request failed after the client's retries (the detail starts with the
client's code: `http_500`, `timeout`, ...). A failed request is not repaired (there is no answer to repair)
and is not cached, so the next run asks again.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from types import MappingProxyType
from typing import Any, Literal, get_args

from core import SeedwheelError
from judge.history import JudgeSetup
from judge.parse import ParsedAnswer, parse_judgment
from judge.prompt import JudgePrompt
from judge.rubric import DEFAULT_RUBRIC, DEFAULT_RULE, AcceptanceRule, Rubric
from langmodels import ChatRequest, ChatResult, LLMClient

logger = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
# What one judgment says; a task's `judge_verdict` label is one of these, or `not_judged` when no judgment covers it
# (over `max_per_family`). `Verdict` is the one closed set of labels, `VERDICTS` its values in order.
JudgmentVerdict = Literal["accept", "reject", "judge_error"]
Verdict = Literal[JudgmentVerdict, "not_judged"]
JUDGMENT_VERDICTS: tuple[JudgmentVerdict, ...] = get_args(JudgmentVerdict)
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
NOT_JUDGED: Verdict = "not_judged"
LLM_ERROR = "llm_error"
# Generation params for labelling runs (the pipeline's `judged_tasks`, `seedwheel judge`): greedy, so a label can
# be reproduced, and the same for both, so they share cached judgments.
LABEL_PARAMS: Mapping[str, Any] = MappingProxyType({"temperature": 0.0})


class JudgeInputError(SeedwheelError, ValueError):
    """A task the judge cannot build a prompt from; the message names its position, its id and the fix."""


@dataclass(frozen=True)
class TokenPrices:
    """What the endpoint charges per 1,000 tokens; zero for a local server.

    Example:
        >>> TokenPrices(input_per_1k=0.5, output_per_1k=1.5).cost(2000, 1000)
        2.5
    """

    input_per_1k: float = 0.0
    output_per_1k: float = 0.0

    def __post_init__(self) -> None:
        if self.input_per_1k < 0 or self.output_per_1k < 0:
            raise ValueError(
                f"token prices ({self.input_per_1k}, {self.output_per_1k}) must be >= 0 (per 1,000 tokens)"
            )

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        """The price of `tokens_in` prompt tokens and `tokens_out` completion tokens."""
        return tokens_in / 1000 * self.input_per_1k + tokens_out / 1000 * self.output_per_1k


@dataclass(frozen=True)
class Judgment:
    """The judge's label for one sample of one task.

    Attributes:
        task_id: the task judged.
        sample: which sample (0 unless `judge_tasks(samples=n)`).
        rubric: the rubric's label (`task_quality-r1`).
        template_version: the first-pass template version (the cache key's).
        scores: one integer 1-5 per criterion, or None on judge_error.
        rationale: the judge's short explanation, or None on judge_error.
        accepted: the acceptance rule's label, or None on judge_error.
        failed_criteria: criteria below their minimum (empty when accepted or on judge_error).
        error: None, or the code of a judge_error (see the module doc).
        error_detail: the exact problem(s) of a judge_error.
        raw: the text the judgment comes from - the repair's answer when a repair answered, else the first
            answer (or the error body of a failed request); clipped to `raw_max_chars`.
        first_raw: the first answer when a repair was tried, else None.
        repaired: the scores come from the repair answer.
        cached: every answer used came from the cache (no call was made for this judgment).
        tokens_in, tokens_out: usage of the answers used (first pass plus repair).
    """

    task_id: str
    sample: int
    rubric: str
    template_version: str
    scores: dict[str, int] | None
    rationale: str | None
    accepted: bool | None
    failed_criteria: tuple[str, ...]
    error: str | None
    error_detail: str | None
    raw: str | None
    first_raw: str | None
    repaired: bool
    cached: bool
    tokens_in: int
    tokens_out: int

    @property
    def verdict(self) -> JudgmentVerdict:
        """`accept`, `reject` or `judge_error`."""
        if self.accepted is None:
            return "judge_error"
        return "accept" if self.accepted else "reject"

    def as_dict(self) -> dict[str, Any]:
        """A flat row for a table (lists instead of tuples, `verdict` added).

        Example:
            >>> run.judgments[0].as_dict()["verdict"]  # doctest: +SKIP
            'accept'
        """
        row = asdict(self)
        row["failed_criteria"] = list(self.failed_criteria)
        row["verdict"] = self.verdict
        return row

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> Judgment:
        """The judgment an `as_dict` row holds (a table that crossed processes: the judging shards' steps).

        Example:
            >>> Judgment.from_dict(run.judgments[0].as_dict()) == run.judgments[0]  # doctest: +SKIP
            True
        """
        values = {f.name: row[f.name] for f in fields(cls)}
        return cls(**{**values, "failed_criteria": tuple(values["failed_criteria"] or ())})


@dataclass
class JudgeStats:
    """What one `judge_tasks` run did and cost.

    `calls` and `cached` come from the client's own counters (a request answered from the cache costs
    nothing; identical requests in one batch share one call); `tokens_in`/`tokens_out` are the usage of the calls
    made in this run, `judged_tokens_in`/`judged_tokens_out` that of every answer used, cached or not (what a
    cold run would have cost).
    """

    tasks: int = 0
    judgments: int = 0
    requests: int = 0
    repair_requests: int = 0
    calls: int = 0
    cached: int = 0
    repaired: int = 0
    accepted: int = 0
    rejected: int = 0
    judge_errors: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    tokens_in: int = 0
    tokens_out: int = 0
    judged_tokens_in: int = 0
    judged_tokens_out: int = 0

    @classmethod
    def total(cls, parts: Iterable[JudgeStats]) -> JudgeStats:
        """The stats of runs added up (the judging shards' steps).

        Example:
            >>> JudgeStats.total([JudgeStats(calls=2, errors=Counter(x=1)), JudgeStats(calls=3, errors=Counter(x=1))])
            JudgeStats(tasks=0, judgments=0, requests=0, repair_requests=0, calls=5, cached=0, repaired=0, \
accepted=0, rejected=0, judge_errors=0, errors=Counter({'x': 2}), tokens_in=0, tokens_out=0, judged_tokens_in=0, \
judged_tokens_out=0)
        """
        total = cls()
        for part in parts:
            for name in (f.name for f in fields(cls)):
                setattr(total, name, getattr(total, name) + getattr(part, name))
        return total

    def record(self) -> dict[str, Any]:
        """Plain data (`errors` a dict) that `from_record` turns back into these stats."""
        return {**asdict(self), "errors": dict(self.errors)}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> JudgeStats:
        return cls(**{**record, "errors": Counter(record["errors"] or {})})

    def cost(self, prices: TokenPrices, *, include_cached: bool = False) -> float:
        """The estimated price of this run's calls (or, with `include_cached`, of a run without a cache).

        Example:
            >>> JudgeStats(tokens_in=4000, tokens_out=500).cost(TokenPrices(0.25, 1.0))
            1.5
        """
        if include_cached:
            return prices.cost(self.judged_tokens_in, self.judged_tokens_out)
        return prices.cost(self.tokens_in, self.tokens_out)

    def as_dict(self, prices: TokenPrices | None = None) -> dict[str, Any]:
        """Flat numbers for logs and metadata (`errors/<code>` per error code; `cost` when prices are given)."""
        flat: dict[str, Any] = {k: v for k, v in asdict(self).items() if k != "errors"}
        flat.update({f"errors/{code}": n for code, n in sorted(self.errors.items())})
        if prices is not None:
            flat["cost"] = round(self.cost(prices), 6)
            flat["cost_without_cache"] = round(self.cost(prices, include_cached=True), 6)
        return flat


@dataclass
class JudgeRun:
    """The judgments of a `judge_tasks` call (task order, then sample order), its statistics, and its setup (what
    the cache keys of its judgments depend on: rubric, prompt template, judge model, endpoint, params)."""

    judgments: list[Judgment]
    stats: JudgeStats
    setup: JudgeSetup

    def rows(self) -> list[dict[str, Any]]:
        """Every judgment as a flat row (`Judgment.as_dict`)."""
        return [j.as_dict() for j in self.judgments]


@dataclass(frozen=True)
class _Job:
    task_id: str
    request: ChatRequest


def _check_task(i: int, task: Any) -> str:
    if not isinstance(task, Mapping):
        raise JudgeInputError(f"tasks[{i}] is a {type(task).__name__}, not a task record: pass task dicts")
    task_id = task.get("task_id")
    if not isinstance(task_id, str) or not task_id:
        raise JudgeInputError(f"tasks[{i}] has no task_id: judge task records (validators.tasks), which have one")
    prompt = task.get("prompt")
    if not isinstance(prompt, list) or not prompt or not all(isinstance(m, Mapping) for m in prompt):
        raise JudgeInputError(
            f"tasks[{i}] (task {task_id}) has no prompt messages: give `prompt` as [{{'role': ..., 'content': ...}}]"
        )
    return task_id


def _clip(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"


def _transport_error(result: ChatResult) -> str:
    return f"{result.error}: {result.detail}" if result.detail else str(result.error)


def judge_tasks(
    tasks: Iterable[Mapping[str, Any]],
    *,
    client: LLMClient,
    rubric: Rubric = DEFAULT_RUBRIC,
    rule: AcceptanceRule = DEFAULT_RULE,
    samples: int = 1,
    params: Mapping[str, Any] | None = None,
    raw_max_chars: int = 4000,
    progress: Progress | None = None,
) -> JudgeRun:
    """Judge every task `samples` times: one batch of first-pass requests, then one batch of repairs.

    Args:
        tasks: task records (`task_id`, `family`, `prompt`, `reference` are used).
        client: the LLM client (its cache makes a rerun free; a new rubric or template version re-judges all).
        rubric: the criteria (default `DEFAULT_RUBRIC`).
        rule: the acceptance rule that turns scores into a label (default `DEFAULT_RULE`).
        samples: judgments per task; sample `i` is `ChatRequest(sample=i)`, so for self-consistency pass
            `samples >= 2` with a temperature above 0 in `params`.
        params: generation overrides for every request (`temperature`, `max_tokens`, `seed`, ...).
        raw_max_chars: how much raw text a judgment keeps.
        progress: `progress(done, total)` as answers arrive; `total` grows by the repairs once they are known.

    Returns:
        A `JudgeRun`: one `Judgment` per (task, sample), in task order then sample order, and `JudgeStats`.

    Raises:
        JudgeInputError: a task without `task_id` or prompt messages (before any call).
        ValueError: `samples < 1`, `raw_max_chars < 80`, or a rule that names criteria the rubric lacks.
        EndpointRejected, EndpointUnavailable, CallBudgetExceeded: from the client.

    Example:
        >>> rule = AcceptanceRule({"reference_correctness": 5})
        >>> run = judge_tasks(tasks, client=client, rule=rule)  # doctest: +SKIP
        >>> [(j.task_id, j.verdict, j.failed_criteria) for j in run.judgments][:1]  # doctest: +SKIP
        [('5c4f6470173c47e1', 'reject', ('reference_correctness',))]
    """
    if samples < 1:
        raise ValueError(f"samples ({samples}) must be >= 1 (use 3-5 with temperature > 0 for self-consistency)")
    if raw_max_chars < 80:
        raise ValueError(f"raw_max_chars ({raw_max_chars}) must be >= 80 to keep a readable raw text")
    rule.check_rubric(rubric)
    prompt = JudgePrompt(rubric, params)
    jobs: list[_Job] = []
    task_count = 0
    for i, task in enumerate(tasks):
        task_id = _check_task(i, task)
        task_count += 1
        jobs.extend(_Job(task_id, prompt.request(task, sample=sample)) for sample in range(samples))

    before = (client.stats.calls, client.stats.hits, client.stats.tokens_in, client.stats.tokens_out)
    first = client.complete_many_sync([job.request for job in jobs], progress=progress) if jobs else []
    parsed: list[ParsedAnswer | None] = [
        parse_judgment(r.text, rubric, finish_reason=r.finish_reason) if r.ok else None for r in first
    ]
    to_repair = [(i, p) for i, p in enumerate(parsed) if p is not None and not p.ok]
    repairs: dict[int, ChatResult] = {}
    if to_repair:
        requests = [prompt.repair_request(jobs[i].request, first[i].text or "", p.problem) for i, p in to_repair]
        offset = len(jobs)
        shifted = (lambda done, total: progress(offset + done, offset + total)) if progress is not None else None
        answers = client.complete_many_sync(requests, progress=shifted)
        repairs = {i: answer for (i, _), answer in zip(to_repair, answers, strict=True)}

    stats = JudgeStats(
        tasks=task_count, judgments=len(jobs), requests=len(jobs) + len(repairs), repair_requests=len(repairs)
    )
    judgments = []
    for i, job in enumerate(jobs):
        judgment = _judgment(job, first[i], parsed[i], repairs.get(i), rubric, rule, raw_max_chars)
        judgments.append(judgment)
        stats.repaired += judgment.repaired
        stats.judged_tokens_in += judgment.tokens_in
        stats.judged_tokens_out += judgment.tokens_out
        if judgment.error is not None:
            stats.judge_errors += 1
            stats.errors[judgment.error] += 1
        elif judgment.accepted:
            stats.accepted += 1
        else:
            stats.rejected += 1
    stats.calls = client.stats.calls - before[0]
    stats.cached = client.stats.hits - before[1]
    stats.tokens_in = client.stats.tokens_in - before[2]
    stats.tokens_out = client.stats.tokens_out - before[3]
    logger.log(
        logging.WARNING if stats.judge_errors else logging.INFO,
        "judge %s: %d judgments of %d tasks, %d accepted, %d rejected, %d judge_error %s; %d calls, %d cached, "
        "%d repairs (%d repaired)",
        prompt.template_version,
        stats.judgments,
        stats.tasks,
        stats.accepted,
        stats.rejected,
        stats.judge_errors,
        dict(stats.errors) or "",
        stats.calls,
        stats.cached,
        stats.repair_requests,
        stats.repaired,
    )
    return JudgeRun(judgments, stats, judge_setup(client, rubric=rubric, params=params))


def judge_setup(
    client: LLMClient, *, rubric: Rubric = DEFAULT_RUBRIC, params: Mapping[str, Any] | None = None
) -> JudgeSetup:
    """The setup `judge_tasks(client=client, rubric=rubric, params=params)` judges under (what its judgments' cache
    keys depend on), known without a call: the record a sharded run keeps once for all its shards."""
    return JudgeSetup.of(JudgePrompt(rubric, params), client.config)


def _judgment(
    job: _Job,
    first: ChatResult,
    parsed: ParsedAnswer | None,
    repair: ChatResult | None,
    rubric: Rubric,
    rule: AcceptanceRule,
    raw_max_chars: int,
) -> Judgment:
    base: dict[str, Any] = {
        "task_id": job.task_id,
        "sample": job.request.sample,
        "rubric": rubric.label,
        "template_version": job.request.template_version,
        "first_raw": None,
        "repaired": False,
        "cached": first.cached,
        "tokens_in": first.tokens_in,
        "tokens_out": first.tokens_out,
    }
    if parsed is None:  # the first request failed after the client's retries: nothing to parse or repair
        return _error(base, LLM_ERROR, _transport_error(first), first.raw, raw_max_chars)
    raw = first.text
    if repair is not None:
        first_problem = parsed.problem
        base.update(
            first_raw=_clip(first.text, raw_max_chars),
            cached=first.cached and repair.cached,
            tokens_in=first.tokens_in + repair.tokens_in,
            tokens_out=first.tokens_out + repair.tokens_out,
        )
        if not repair.ok:
            detail = f"repair request failed ({_transport_error(repair)}); first answer: {first_problem}"
            return _error(base, LLM_ERROR, detail, first.text, raw_max_chars)
        raw = repair.text
        parsed = parse_judgment(repair.text, rubric, finish_reason=repair.finish_reason)
        if not parsed.ok:
            detail = f"{parsed.detail}; first answer: {first_problem}"
            return _error(base, parsed.error or "", detail, repair.text, raw_max_chars)
        base["repaired"] = True
    if parsed.scores is None:  # unreachable: a parsed answer without an error has scores
        return _error(base, parsed.error or "", parsed.detail or "", raw, raw_max_chars)
    accepted, failed = rule.evaluate(parsed.scores)
    return Judgment(
        **base,
        scores=parsed.scores,
        rationale=parsed.rationale,
        accepted=accepted,
        failed_criteria=failed,
        error=None,
        error_detail=None,
        raw=_clip(raw, raw_max_chars),
    )


def _error(base: dict[str, Any], code: str, detail: str, raw: str | None, raw_max_chars: int) -> Judgment:
    return Judgment(
        **base,
        scores=None,
        rationale=None,
        accepted=None,
        failed_criteria=(),
        error=code,
        error_detail=detail,
        raw=_clip(raw, raw_max_chars),
    )
