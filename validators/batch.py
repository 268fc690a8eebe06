"""Judge many completions at once: `verify` over a thread pool.

Threads, not processes: the expensive verifiers (`python_tests`) spend their time waiting on a sandboxed child
process, which releases the GIL, so a thread per core keeps every core busy without pickling tasks or paying
a worker start-up. In-process verifiers (`numeric_answer`, `sql_result`) gain little from threads but lose
nothing either, since they take microseconds to milliseconds.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from validators.registry import Completion, Verdict, VerifyContext, verify


def verify_many(
    tasks: Sequence[Mapping[str, Any]],
    completions: Sequence[str | Mapping[str, Any] | Iterable[Mapping[str, Any]] | Completion],
    *,
    workers: int | None = None,
    context: VerifyContext | None = None,
) -> list[Verdict]:
    """`verify(tasks[i], completions[i])` for every i, in parallel, verdicts in input order.

    Args:
        tasks: task records (or any mapping with `verifier`), one per completion.
        completions: the completions, in any form `verify` accepts.
        workers: threads to use; defaults to the machine's CPU count. 1 runs inline.
        context: passed to every `verify` call.

    Returns:
        One `Verdict` per completion. An exception from a verifier (a broken task, not a bad completion)
        propagates, as it would from `verify`.

    Raises:
        ValueError: `tasks` and `completions` differ in length, or `workers` < 1.

    Example:
        >>> spec = {"verifier": {"name": "numeric_answer", "params": {"answer": 4}}}
        >>> [v.passed for v in verify_many([spec, spec], ["#### 4", "#### 5"], workers=2)]
        [True, False]
    """
    if len(tasks) != len(completions):
        raise ValueError(f"verify_many got {len(tasks)} tasks but {len(completions)} completions; pass one task each")
    workers = (os.cpu_count() or 1) if workers is None else workers
    if workers < 1:
        raise ValueError(f"verify_many needs workers >= 1, got {workers}")
    context = context or VerifyContext()
    if workers == 1 or len(tasks) <= 1:
        return [verify(t, c, context=context) for t, c in zip(tasks, completions, strict=True)]
    with ThreadPoolExecutor(max_workers=min(workers, len(tasks)), thread_name_prefix="verify") as pool:
        return list(
            pool.map(lambda pair: verify(pair[0], pair[1], context=context), zip(tasks, completions, strict=True))
        )
