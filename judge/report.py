"""What a judge run found, for people: score counts, the worst-scored tasks, and a plain-text summary.

The pipeline's `judged_tasks` metadata and `seedwheel judge` read the same numbers from here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import pandas as pd

from judge.rubric import SCORES, Rubric
from judge.run import JUDGMENT_VERDICTS, JudgeRun, Judgment

RATIONALE_CHARS = 200


def score_counts(judgments: Iterable[Judgment], rubric: Rubric) -> dict[str, dict[int, int]]:
    """How often each score 1-5 was given, per criterion, over the judgments that have scores.

    Example:
        >>> score_counts(run.judgments, DEFAULT_RUBRIC)["clarity"]  # doctest: +SKIP
        {1: 0, 2: 1, 3: 0, 4: 3, 5: 12}
    """
    counts: dict[str, Counter[int]] = {name: Counter() for name in rubric.names}
    for judgment in judgments:
        for name, score in (judgment.scores or {}).items():
            if name in counts:
                counts[name][score] += 1
    return {name: {score: found[score] for score in SCORES} for name, found in counts.items()}


def lowest_score_counts(judgments: Iterable[Judgment], family_of: Mapping[str, str]) -> dict[str, dict[int, int]]:
    """Per family, how many judged tasks have each score 1-5 as their lowest criterion score.

    A task's weakest criterion is what usually decides its label, so this shows where each family's tasks fall
    short. Families come from `family_of` (task_id -> family); judgments without scores are left out.
    """
    counts: dict[str, Counter[int]] = {}
    for judgment in judgments:
        if judgment.scores:
            family = family_of.get(judgment.task_id, "?")
            counts.setdefault(family, Counter())[min(judgment.scores.values())] += 1
    return {family: {score: counts[family][score] for score in SCORES} for family in sorted(counts)}


def worst_scored(judgments: Iterable[Judgment], n: int) -> list[Judgment]:
    """The `n` scored judgments with the lowest total score (ties by task_id, so the order is stable)."""
    scored = [j for j in judgments if j.scores]
    return sorted(scored, key=lambda j: (sum((j.scores or {}).values()), j.task_id, j.sample))[:n]


def accept_rate(judgments: Sequence[Judgment]) -> float:
    """Accepted judgments over all judgments (judge errors count as not accepted); 0.0 when there are none."""
    return sum(j.accepted is True for j in judgments) / len(judgments) if judgments else 0.0


def verdicts_by_family(labelled: pd.DataFrame) -> pd.DataFrame:
    """How many tasks of each family got each verdict: a `family` column, then one column per verdict that occurs.

    Args:
        labelled: a labelled task table (`judge.labels.label_table`: `family` and `judge_verdict` columns).
    """
    return pd.crosstab(labelled["family"], labelled["judge_verdict"]).reset_index()


def worst_labelled(labelled: pd.DataFrame, n: int) -> pd.DataFrame:
    """The `n` rows of a labelled task table with the lowest total score, lowest first, with that `total` added;
    rows without scores (judge errors, tasks not judged) are left out."""
    scored = labelled[labelled["judge_scores"].notna()]
    totals = scored["judge_scores"].map(lambda scores: sum(scores.values()))
    return scored.assign(total=totals).sort_values("total").head(n)


def format_summary(run: JudgeRun, rubric: Rubric, family_of: Mapping[str, str], *, worst_n: int = 5) -> str:
    """A plain-text report of a run: verdicts, accept rate (overall and per family), judge errors, a score table
    per criterion, the worst-scored tasks with their rationale, and calls made versus cached.

    Args:
        run: the judge run.
        rubric: the rubric it used.
        family_of: task_id -> family.
        worst_n: how many of the worst-scored tasks to show.

    Returns:
        Lines joined by newlines, no trailing newline.
    """
    judgments = run.judgments
    stats = run.stats
    verdicts = Counter(j.verdict for j in judgments)
    lines = [
        f"judged {stats.tasks} tasks ({stats.judgments} judgments) with rubric {run.setup.rubric}, "
        f"model {run.setup.model}",
        "verdicts: " + ", ".join(f"{v} {verdicts[v]}" for v in JUDGMENT_VERDICTS),
        f"accept rate: {accept_rate(judgments):.1%} ({verdicts['accept']}/{len(judgments)})",
    ]
    by_family: dict[str, list[Judgment]] = {}
    for j in judgments:
        by_family.setdefault(family_of.get(j.task_id, "?"), []).append(j)
    lines.append(
        "by family: "
        + ", ".join(
            f"{family} {sum(j.accepted is True for j in group)}/{len(group)}"
            for family, group in sorted(by_family.items())
        )
    )
    if stats.errors:
        failed_ids: dict[str, list[str]] = {}
        for j in judgments:
            if j.error is not None:
                failed_ids.setdefault(j.error, []).append(j.task_id)
        lines.append(
            "judge errors: "
            + ", ".join(f"{code} {n} ({_ids(failed_ids[code])})" for code, n in stats.errors.most_common())
        )
    width = max(len("criterion"), *(len(name) for name in rubric.names))
    lines.append("")
    lines.append(f"{'criterion':<{width}} " + " ".join(f"{score:>5}" for score in SCORES))
    for name, counts in score_counts(judgments, rubric).items():
        lines.append(f"{name:<{width}} " + " ".join(f"{counts[score]:>5}" for score in SCORES))
    shown = worst_scored(judgments, worst_n)
    if shown:
        top = len(rubric.names) * max(SCORES)
        lines += ["", f"worst-scored {len(shown)}:"]
        for j in shown:
            scores = " ".join(f"{name}={score}" for name, score in (j.scores or {}).items())
            failed = f", failed {', '.join(j.failed_criteria)}" if j.failed_criteria else ""
            total = sum((j.scores or {}).values())
            lines.append(
                f"  {j.task_id} ({family_of.get(j.task_id, '?')}) {total}/{top} {j.verdict}{failed}: {scores}"
            )
            lines.append(f"    {_clip(j.rationale or '')}")
    lines += [
        "",
        f"LLM: {stats.calls} calls made, {stats.cached} answered from the cache, {stats.repair_requests} repair "
        f"requests ({stats.repaired} repaired); tokens {stats.tokens_in} in, {stats.tokens_out} out",
    ]
    return "\n".join(lines)


def _ids(task_ids: list[str], shown: int = 3) -> str:
    more = len(task_ids) - shown
    return ", ".join(task_ids[:shown]) + (f" and {more} more" if more > 0 else "")


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= RATIONALE_CHARS else text[: RATIONALE_CHARS - 1] + "…"
