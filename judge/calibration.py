"""How far the judge can be trusted: agreement with human labels, self-consistency, and floors to gate on.

**Audit set** (`seeds/audit/judge*.jsonl`, see `seeds/audit/README.md`): one JSON object per line,
`{"id", "task": {"family", "prompt", "reference"}, "human": {"accept", "reason"}, "tags"?}`. `load_audit_set`
reads it and raises `AuditSetError` listing every problem as `path:line: problem - fix`.

**Agreement** (`calibrate`): each judgment is one row, compared with its task's human label. The judge's side
has three values (`accept`, `reject`, `judge_error`), the human's two, so the confusion table is 3 x 2.

- `accuracy` = rows where judge and human agree / all rows. A `judge_error` row never agrees: an unusable
  verdict is a failure of the judge, and dropping those rows would make a judge that errors on hard cases look
  better than one that answers them.
- `kappa`: Cohen's kappa over the same 3 x 2 table, `(p_o - p_e) / (1 - p_e)`, with `p_o` = accuracy and
  `p_e` = sum over labels of P(judge gives it) x P(human gives it). `judge_error` is a label only the judge uses,
  so its rows lower `p_o` and add nothing to `p_e`. None when `p_e` = 1 (both sides used one label only:
  agreement beyond chance is undefined there).
- `false_accept_rate` = judge accepts / human rejects (the bad tasks let through);
  `false_reject_rate` = judge rejects / human accepts (the good tasks thrown away). Both denominators include
  the `judge_error` rows, which appear separately as `judge_error_rate` (and per human label in the table).

**Self-consistency** (`self_consistency`): the same tasks judged `n >= 2` times at temperature > 0 (`judge_tasks(
samples=n, params={"temperature": 0.7})`). `label_agreement` = tasks whose samples all give the same verdict
(`judge_error` is a verdict of its own) / tasks; `pairwise_agreement` = agreeing pairs of samples / pairs, which
still moves when one sample in five flips; `criterion_agreement[c]` = tasks whose scored samples all give `c`
the same score / tasks with at least two scored samples.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from core import SeedwheelError
from judge.run import JUDGMENT_VERDICTS, Judgment

HUMAN_LABELS = ("accept", "reject")
# The judge's files in an audit folder; `seeds/audit/` also holds other labelled sets (the reward audit's).
AUDIT_GLOB = "judge*.jsonl"
_ITEM_KEYS = {"id", "task", "human", "tags"}
_TASK_KEYS = {"family", "prompt", "reference"}
_HUMAN_KEYS = {"accept", "reason"}
_ROLES = {"system", "user", "assistant"}


class AuditSetError(SeedwheelError, ValueError):
    """An audit set file that cannot be used; `problems` holds every `path:line: problem - fix` line."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        super().__init__(f"{len(self.problems)} problem(s) in the audit set:\n" + "\n".join(self.problems))


class CalibrationInputError(SeedwheelError, ValueError):
    """Judgments and labels that do not match up (a judgment without a label, a label never judged)."""


@dataclass(frozen=True)
class AuditItem:
    """One hand-labelled example: a task and a human verdict on it.

    Attributes:
        id: unique within the audit set; used as the task's `task_id` when it is judged.
        family, prompt, reference: the task as the judge sees it.
        accept: the human verdict.
        reason: why, in a sentence (what a reviewer checks when the judge disagrees).
        tags: free labels (`good`, `wrong_reference`, `injection`, ...).
        origin: `path:line` where the item was read.
    """

    id: str
    family: str
    prompt: tuple[dict[str, str], ...]
    reference: str | None
    accept: bool
    reason: str
    tags: tuple[str, ...] = ()
    origin: str = ""

    def as_task(self) -> dict[str, Any]:
        """The item as a task record for `judge_tasks` (`task_id` is the item's id).

        Example:
            >>> item = AuditItem("a1", "arithmetic", ({"role": "user", "content": "2+2?"},), "#### 4", True, "ok")
            >>> item.as_task()["task_id"]
            'a1'
        """
        return {
            "task_id": self.id,
            "family": self.family,
            "prompt": [dict(m) for m in self.prompt],
            "reference": self.reference,
        }


def load_audit_set(path: str | Path) -> list[AuditItem]:
    """Read a judge audit set: one `.jsonl` file, or every `judge*.jsonl` file in a folder (sorted by name).

    Args:
        path: a file, or a folder such as `seeds/audit` (other labelled sets beside the judge's are left alone).

    Returns:
        The items, in file and line order.

    Raises:
        AuditSetError: every problem found, each as `path:line: problem - fix` (nothing is returned then).

    Example:
        >>> items = load_audit_set("seeds/audit")  # doctest: +SKIP
        >>> sum(not i.accept for i in items) > 0  # doctest: +SKIP
        True
    """
    path = Path(path)
    files = sorted(path.glob(AUDIT_GLOB)) if path.is_dir() else [path]
    if not files:
        raise AuditSetError([f"{path}: no {AUDIT_GLOB} files - add one audit file (see seeds/audit/README.md)"])
    items: list[AuditItem] = []
    problems: list[str] = []
    first_seen: dict[str, str] = {}
    for file in files:
        try:
            lines = file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{file}: cannot read ({exc}) - give a readable UTF-8 JSONL file")
            continue
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            where = f"{file}:{number}"
            item, item_problems = _read_item(line, where)
            problems.extend(f"{where}: {p}" for p in item_problems)
            if item is None:
                continue
            if item.id in first_seen:
                problems.append(f"{where}: id {item.id!r} is also used at {first_seen[item.id]} - give each a new id")
                continue
            first_seen[item.id] = where
            items.append(item)
    if problems:
        raise AuditSetError(problems)
    if not items:
        raise AuditSetError([f"{path}: the audit set is empty - add labelled items (see seeds/audit/README.md)"])
    return items


def _read_item(line: str, where: str) -> tuple[AuditItem | None, list[str]]:
    try:
        record = json.loads(line)
    except ValueError as exc:
        return None, [f"not valid JSON ({exc}) - write one JSON object per line"]
    if not isinstance(record, dict):
        return None, [f"a JSON {type(record).__name__}, not an object - write one JSON object per line"]
    problems = []
    unknown = sorted(set(record) - _ITEM_KEYS)
    if unknown:
        problems.append(f"unknown field(s) {unknown} - use only {sorted(_ITEM_KEYS)}")
    item_id = record.get("id")
    if not isinstance(item_id, str) or not item_id.strip():
        problems.append("missing or empty 'id' - give a unique string such as 'sql-wrong-reference-2'")
    task = record.get("task")
    human = record.get("human")
    if not isinstance(task, dict):
        problems.append("missing 'task' object - give {'family', 'prompt', 'reference'}")
        task = {}
    if not isinstance(human, dict):
        problems.append("missing 'human' object - give {'accept': true|false, 'reason': '...'}")
        human = {}
    problems.extend(_task_problems(task))
    if human:
        unknown = sorted(set(human) - _HUMAN_KEYS)
        if unknown:
            problems.append(f"unknown field(s) {unknown} in 'human' - use only 'accept' and 'reason'")
        if not isinstance(human.get("accept"), bool):
            problems.append("'human.accept' must be true or false - give the human verdict")
        if not isinstance(human.get("reason"), str) or not human.get("reason", "").strip():
            problems.append("'human.reason' is missing or empty - say in a sentence why the task is (not) acceptable")
    tags = record.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        problems.append("'tags' must be a list of strings - e.g. [\"wrong_reference\"]")
        tags = []
    if problems or not isinstance(item_id, str):  # a bad id is one of the problems
        return None, problems
    item = AuditItem(
        id=item_id,
        family=task["family"],
        prompt=tuple({"role": m["role"], "content": m["content"]} for m in task["prompt"]),
        reference=task["reference"],
        accept=human["accept"],
        reason=human["reason"].strip(),
        tags=tuple(tags),
        origin=where,
    )
    return item, []


def _task_problems(task: Mapping[str, Any]) -> list[str]:
    if not task:
        return []
    problems = []
    unknown = sorted(set(task) - _TASK_KEYS)
    if unknown:
        problems.append(f"unknown field(s) {unknown} in 'task' - use only {sorted(_TASK_KEYS)}")
    family = task.get("family")
    if not isinstance(family, str) or not family.strip():
        problems.append("'task.family' is missing - name the task family, e.g. 'sql'")
    prompt = task.get("prompt")
    if not isinstance(prompt, list) or not prompt:
        problems.append("'task.prompt' is missing or empty - give a list of {'role', 'content'} messages")
    else:
        for i, message in enumerate(prompt):
            if (
                not isinstance(message, dict)
                or message.get("role") not in _ROLES
                or not isinstance(message.get("content"), str)
            ):
                problems.append(
                    f"'task.prompt[{i}]' is not a chat message - give "
                    "{'role': 'system'|'user'|'assistant', 'content': '<text>'}"
                )
    if "reference" not in task:
        problems.append("'task.reference' is missing - give the reference answer, or null when the task has none")
    elif task["reference"] is not None and not isinstance(task["reference"], str):
        problems.append("'task.reference' must be a string or null - write the answer as text")
    return problems


def audit_labels(items: Iterable[AuditItem]) -> dict[str, bool]:
    """`{item id: human accept}`, the `labels` argument of `calibrate`.

    Example:
        >>> audit_labels([AuditItem("a1", "arithmetic", (), None, False, "no reference")])
        {'a1': False}
    """
    return {item.id: item.accept for item in items}


def calibration_sample(items: Iterable[AuditItem], per_family: int | None) -> list[AuditItem]:
    """The audit items a calibration run judges: all of them, or about `per_family` of each family, split evenly
    between the human accepts and rejects (`per_family // 2` of each, at least one), so both verdicts stay
    represented; the first ones by id, returned in id order.

    Args:
        items: the audit set (`load_audit_set`).
        per_family: items per family, or None for every item.

    Returns:
        The chosen items, sorted by id.

    Example:
        >>> items = [AuditItem(f"a{i}", "sql", (), None, i % 2 == 0, "") for i in range(6)]
        >>> [item.id for item in calibration_sample(items, 2)]
        ['a0', 'a1']
    """
    items = list(items)
    if per_family is None:
        return items
    taken: Counter[tuple[str, bool]] = Counter()
    chosen = []
    for item in sorted(items, key=lambda i: (i.family, not i.accept, i.id)):
        if taken[(item.family, item.accept)] < max(1, per_family // 2):
            taken[(item.family, item.accept)] += 1
            chosen.append(item)
    return sorted(chosen, key=lambda i: i.id)


@dataclass(frozen=True)
class Calibration:
    """Agreement between judge and human labels (definitions in the module doc).

    Attributes:
        rows: judgments compared.
        agreements: rows where the judge's verdict equals the human's.
        accuracy, kappa, false_accept_rate, false_reject_rate, judge_error_rate: see the module doc (a rate
            whose denominator is zero is None).
        confusion: `{judge verdict: {human label: count}}`, every cell present.
        counts: totals per side: `judge_accept`, `judge_reject`, `judge_error`, `human_accept`, `human_reject`.
        disagreements: `(task_id, judge verdict, human label)` of every row that disagrees, for review.
    """

    rows: int
    agreements: int
    accuracy: float
    kappa: float | None
    false_accept_rate: float | None
    false_reject_rate: float | None
    judge_error_rate: float
    confusion: dict[str, dict[str, int]]
    counts: dict[str, int]
    disagreements: tuple[tuple[str, str, str], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """Numbers for metadata and JSON (confusion cells flattened as `confusion/<judge>/<human>`)."""
        flat: dict[str, Any] = {
            "rows": self.rows,
            "agreements": self.agreements,
            "accuracy": self.accuracy,
            "kappa": self.kappa,
            "false_accept_rate": self.false_accept_rate,
            "false_reject_rate": self.false_reject_rate,
            "judge_error_rate": self.judge_error_rate,
            **self.counts,
        }
        for judge, row in self.confusion.items():
            flat.update({f"confusion/{judge}/{human}": n for human, n in row.items()})
        return flat

    def table(self) -> str:
        """The confusion table as aligned text (judge verdicts down, human labels across)."""
        corner = "judge \\ human"
        lines = [f"{corner:<14}{'accept':>8}{'reject':>8}{'total':>8}"]
        for judge in JUDGMENT_VERDICTS:
            row = self.confusion[judge]
            lines.append(f"{judge:<14}{row['accept']:>8}{row['reject']:>8}{sum(row.values()):>8}")
        lines.append(f"{'total':<14}{self.counts['human_accept']:>8}{self.counts['human_reject']:>8}{self.rows:>8}")
        return "\n".join(lines)


def _rate(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def cohen_kappa(confusion: Mapping[str, Mapping[str, int]]) -> float | None:
    """Cohen's kappa of a confusion table `{rater A label: {rater B label: count}}`; labels may differ per side.

    Args:
        confusion: counts; a label one rater never uses simply has no matching cell on the other side.

    Returns:
        `(p_o - p_e) / (1 - p_e)`, or None when `p_e` = 1 (or the table is empty).

    Example:
        >>> cohen_kappa({"accept": {"accept": 20, "reject": 5}, "reject": {"accept": 10, "reject": 15}})
        0.4
    """
    total = sum(n for row in confusion.values() for n in row.values())
    if not total:
        return None
    observed = sum(row.get(label, 0) for label, row in confusion.items()) / total
    a_totals = {label: sum(row.values()) for label, row in confusion.items()}
    b_totals: Counter[str] = Counter()
    for row in confusion.values():
        b_totals.update(row)
    expected = sum(a_totals[label] * b_totals.get(label, 0) for label in a_totals) / (total * total)
    if expected >= 1:
        return None
    return round((observed - expected) / (1 - expected), 12)


def calibrate(judgments: Iterable[Judgment], labels: Mapping[str, bool]) -> Calibration:
    """Compare judge verdicts with human labels (definitions in the module doc).

    Args:
        judgments: the judge's output; each judgment is one row (with `samples > 1`, every sample counts).
        labels: `{task_id: human accept}` (`audit_labels(items)`).

    Returns:
        A `Calibration`.

    Raises:
        CalibrationInputError: a judgment whose task has no label, a label with no judgment, or no rows.

    Example:
        >>> calibration = calibrate(run.judgments, audit_labels(items))  # doctest: +SKIP
        >>> calibration.kappa  # doctest: +SKIP
        0.72
    """
    confusion: dict[str, dict[str, int]] = {judge: dict.fromkeys(HUMAN_LABELS, 0) for judge in JUDGMENT_VERDICTS}
    judged: set[str] = set()
    disagreements = []
    unlabelled = []
    for judgment in judgments:
        if judgment.task_id not in labels:
            unlabelled.append(judgment.task_id)
            continue
        judged.add(judgment.task_id)
        human = "accept" if labels[judgment.task_id] else "reject"
        confusion[judgment.verdict][human] += 1
        if judgment.verdict != human:
            disagreements.append((judgment.task_id, judgment.verdict, human))
    if unlabelled:
        raise CalibrationInputError(
            f"{len(unlabelled)} judgment(s) have no human label (e.g. task {unlabelled[0]}): judge only the audit "
            "items, or add labels for these tasks"
        )
    never = sorted(set(labels) - judged)
    if never:
        raise CalibrationInputError(
            f"{len(never)} labelled task(s) were not judged (e.g. {never[0]}): pass the judgments of every audit item"
        )
    rows = sum(n for row in confusion.values() for n in row.values())
    if not rows:
        raise CalibrationInputError("no judgments to compare: judge the audit items first")
    agreements = confusion["accept"]["accept"] + confusion["reject"]["reject"]
    human_accept = sum(row["accept"] for row in confusion.values())
    human_reject = rows - human_accept
    counts = {
        "judge_accept": sum(confusion["accept"].values()),
        "judge_reject": sum(confusion["reject"].values()),
        "judge_error": sum(confusion["judge_error"].values()),
        "human_accept": human_accept,
        "human_reject": human_reject,
    }
    return Calibration(
        rows=rows,
        agreements=agreements,
        accuracy=agreements / rows,
        kappa=cohen_kappa(confusion),
        false_accept_rate=_rate(confusion["accept"]["reject"], human_reject),
        false_reject_rate=_rate(confusion["reject"]["accept"], human_accept),
        judge_error_rate=counts["judge_error"] / rows,
        confusion=confusion,
        counts=counts,
        disagreements=tuple(disagreements),
    )


@dataclass(frozen=True)
class Consistency:
    """How often the judge agrees with itself over repeated samples (definitions in the module doc).

    Attributes:
        tasks: tasks with at least two samples.
        samples: judgments counted (of those tasks).
        label_agreement: share of tasks whose samples all gave the same verdict.
        pairwise_agreement: share of sample pairs (within a task) with the same verdict.
        criterion_agreement: per criterion, share of tasks whose scored samples all gave the same score.
        criterion_tasks: tasks with at least two scored samples (the denominator of `criterion_agreement`).
        unstable: ids of tasks whose verdict changed between samples.
    """

    tasks: int
    samples: int
    label_agreement: float | None
    pairwise_agreement: float | None
    criterion_agreement: dict[str, float | None] = field(default_factory=dict)
    criterion_tasks: int = 0
    unstable: tuple[str, ...] = ()


def self_consistency(judgments: Iterable[Judgment]) -> Consistency:
    """Agreement of the judge with itself over the samples of each task.

    Args:
        judgments: from `judge_tasks(..., samples=n)` with `n >= 2` at temperature > 0; tasks with one sample
            are left out (nothing to compare).

    Returns:
        A `Consistency` (rates are None when no task has two samples).

    Example:
        >>> consistency = self_consistency(judge_tasks(items, client=client, samples=3,  # doctest: +SKIP
        ...                                            params={"temperature": 0.7}).judgments)
        >>> consistency.label_agreement  # doctest: +SKIP
        0.93
    """
    by_task: dict[str, list[Judgment]] = defaultdict(list)
    for judgment in judgments:
        by_task[judgment.task_id].append(judgment)
    groups = {task_id: group for task_id, group in by_task.items() if len(group) >= 2}
    unanimous = pairs = agreeing_pairs = 0
    unstable = []
    criteria: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # name -> [agreeing tasks, tasks]
    criterion_tasks = 0
    for task_id, group in groups.items():
        verdicts = [j.verdict for j in group]
        if len(set(verdicts)) == 1:
            unanimous += 1
        else:
            unstable.append(task_id)
        for a, b in combinations(verdicts, 2):
            pairs += 1
            agreeing_pairs += a == b
        scored = [j.scores for j in group if j.scores is not None]
        if len(scored) >= 2:
            criterion_tasks += 1
            for name in scored[0]:
                criteria[name][1] += 1
                criteria[name][0] += len({s.get(name) for s in scored}) == 1
    return Consistency(
        tasks=len(groups),
        samples=sum(len(g) for g in groups.values()),
        label_agreement=_rate(unanimous, len(groups)),
        pairwise_agreement=_rate(agreeing_pairs, pairs),
        criterion_agreement={name: _rate(agree, total) for name, (agree, total) in criteria.items()},
        criterion_tasks=criterion_tasks,
        unstable=tuple(unstable),
    )


@dataclass(frozen=True)
class CalibrationFloors:
    """The least agreement with humans a judge needs before its labels are used.

    Args:
        min_kappa: Cohen's kappa floor (0.6 is "substantial" agreement on the Landis-Koch scale).
        min_accuracy: accuracy floor.
        max_false_accept: the largest share of human-rejected tasks the judge may accept.
        max_judge_error: the largest share of rows that may end as judge_error.

    Example:
        >>> CalibrationFloors(min_kappa=1.5)
        Traceback (most recent call last):
        ...
        ValueError: min_kappa (1.5) must be between -1 and 1, e.g. 0.6
    """

    min_kappa: float = 0.6
    min_accuracy: float = 0.8
    max_false_accept: float = 0.15
    max_judge_error: float = 0.05

    def __post_init__(self) -> None:
        if not -1 <= self.min_kappa <= 1:
            raise ValueError(f"min_kappa ({self.min_kappa}) must be between -1 and 1, e.g. 0.6")
        for name in ("min_accuracy", "max_false_accept", "max_judge_error"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ValueError(f"{name} ({value}) must be a share between 0 and 1")


def check(calibration: Calibration, floors: CalibrationFloors) -> tuple[bool, list[str]]:
    """Whether a calibration meets the floors, and a sentence for every floor it misses.

    Args:
        calibration: from `calibrate`.
        floors: the thresholds.

    Returns:
        `(passed, reasons)`; `reasons` is empty when it passed.

    Example:
        >>> check(calibration, CalibrationFloors(min_kappa=0.8))  # doctest: +SKIP
        (False, ['kappa 0.47 is below the floor 0.80'])
    """
    reasons = []
    if calibration.kappa is None:
        reasons.append("kappa is undefined (judge and humans each used one label only): add items of both labels")
    elif calibration.kappa < floors.min_kappa:
        reasons.append(f"kappa {calibration.kappa:.2f} is below the floor {floors.min_kappa:.2f}")
    if calibration.accuracy < floors.min_accuracy:
        reasons.append(f"accuracy {calibration.accuracy:.2f} is below the floor {floors.min_accuracy:.2f}")
    false_accept = calibration.false_accept_rate
    if false_accept is None:
        reasons.append("false-accept rate is undefined (no human-rejected item): add bad items to the audit set")
    elif false_accept > floors.max_false_accept:
        reasons.append(f"false-accept rate {false_accept:.2f} is above the ceiling {floors.max_false_accept:.2f}")
    if calibration.judge_error_rate > floors.max_judge_error:
        reasons.append(
            f"judge_error rate {calibration.judge_error_rate:.2f} is above the ceiling {floors.max_judge_error:.2f}"
        )
    return not reasons, reasons
