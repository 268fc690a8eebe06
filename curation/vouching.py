"""Which LLM-written tasks the splits may keep: only those that something shown to work vouches for.

A task whose text an LLM wrote (its `lineage.generator` is one of the LLM generators) reaches `train_tasks` or
`eval_tasks` only when one of these vouches for it:

- `checks`: it passed its generator's current checks against its parent (`lineage.generator.params.checks`
  equals the version the generator runs now: `generators.rewrite.CHECKS_VERSION` for `llm_rewrite`, whose
  tests hold the rewrites those checks must catch);
- `judge`: the judge accepted it, and the judge's labels are in use, which they are only where its calibration
  check blocks the judging of a judge people disagree with (`JudgePolicy.use_labels == "accepted"`).

Every other task (a seed, a programmatic variant, a production failure) is written by people or by code and
needs no voucher. What is held back keeps its row and a reason, for the split's metadata.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Voucher = Literal["not_llm", "checks", "judge"]
HELD_BACK_COLUMNS = ("task_id", "family", "generator", "checks", "judge_verdict", "reason")


@dataclass(frozen=True)
class Vouching:
    """The outcome per task: `vouchers[i]` for a kept task, None for one held back (its row in `held_back`)."""

    vouchers: list[Voucher | None]
    held_back: list[dict[str, Any]]

    @property
    def kept(self) -> list[bool]:
        return [voucher is not None for voucher in self.vouchers]


def vouch(
    tasks: Sequence[Mapping[str, Any]],
    verdicts: Sequence[str],
    *,
    current_checks: Mapping[str, str],
    judge_vouches: bool,
) -> Vouching:
    """Which tasks may reach the splits, and why (see the module doc).

    Args:
        tasks: task records, with their lineage.
        verdicts: each task's `judge_verdict` (`accept`, `reject`, `judge_error`, `not_judged`).
        current_checks: the LLM generators by name, each with the version of the checks it runs now.
        judge_vouches: whether the judge's acceptance counts (its labels are in use, behind its calibration).

    Returns:
        A `Vouching`: a voucher per task (None: held back) and the held-back rows (`HELD_BACK_COLUMNS`).

    Example:
        >>> rewrite = {"task_id": "t1", "family": "sql", "lineage": {"generator": {"name": "llm_rewrite",
        ...            "params": {"checks": "rewrite-checks-v1"}}}}
        >>> result = vouch([rewrite], ["not_judged"], current_checks={"llm_rewrite": "rewrite-checks-v2"},
        ...                judge_vouches=False)
        >>> result.kept, result.held_back[0]["reason"]
        ([False], 'its checks rewrite-checks-v1 are not the current rewrite-checks-v2, and the judge does not vouch: \
its labels are not in use')
    """
    if len(tasks) != len(verdicts):
        raise ValueError(f"{len(tasks)} tasks but {len(verdicts)} verdicts: give one judge_verdict per task")
    vouchers: list[Voucher | None] = []
    held_back = []
    for task, verdict in zip(tasks, verdicts, strict=True):
        generator = (task.get("lineage") or {}).get("generator") or {}
        name = generator.get("name")
        if not isinstance(name, str) or name not in current_checks:
            vouchers.append("not_llm")
            continue
        checks = (generator.get("params") or {}).get("checks")
        if checks == current_checks[name]:
            vouchers.append("checks")
            continue
        if judge_vouches and verdict == "accept":
            vouchers.append("judge")
            continue
        vouchers.append(None)
        ran = f"its checks {checks} are not" if checks else "it was made before"
        judge = f"its verdict is {verdict}" if judge_vouches else "its labels are not in use"
        held_back.append(
            {
                "task_id": task["task_id"],
                "family": task.get("family"),
                "generator": name,
                "checks": checks,
                "judge_verdict": verdict,
                "reason": f"{ran} the current {current_checks[name]}, and the judge does not vouch: {judge}",
            }
        )
    return Vouching(vouchers, held_back)
