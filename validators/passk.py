"""pass@k: the chance that at least one of k samples solves a task, estimated without bias from n >= k samples.

Chen et al. 2021 ("Evaluating Large Language Models Trained on Code"): with n samples of which c pass,
`pass@k = 1 - C(n-c, k) / C(n, k)`. The binomials overflow floats for large n, so the ratio is computed as the
product `prod_{i=n-c+1}^{n} (1 - k/i)`, which stays in [0, 1] and loses no precision that matters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from core import SeedwheelError


class PassAtKError(SeedwheelError, ValueError):
    """pass@k asked of results that cannot give it (too few samples, k < 1, or no tasks)."""


def pass_at_k_estimate(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task with `n` samples of which `c` passed.

    Args:
        n: samples drawn for the task.
        c: how many of them passed (0 <= c <= n).
        k: the k in pass@k (1 <= k <= n).

    Returns:
        The probability in [0, 1] that a random size-k subset of the samples contains a pass.

    Raises:
        PassAtKError: when the numbers are inconsistent.

    Example:
        >>> round(pass_at_k_estimate(n=10, c=3, k=1), 6)
        0.3
    """
    if not 0 <= c <= n:
        raise PassAtKError(f"passed count c={c} must be between 0 and the sample count n={n}")
    if not 1 <= k <= n:
        raise PassAtKError(f"k={k} must be between 1 and the sample count n={n}; draw at least k samples per task")
    if n - c < k:
        return 1.0  # every size-k subset must contain a pass
    fail_all = 1.0
    for i in range(n - c + 1, n + 1):
        fail_all *= 1.0 - k / i
    return 1.0 - fail_all


def pass_at_k(results: Mapping[str, Sequence[bool]], ks: Iterable[int]) -> dict[str, float]:
    """Mean unbiased pass@k over tasks, for each k.

    Args:
        results: task_id -> one pass/fail per sampled completion.
        ks: the k values, e.g. (1, 5, 10).

    Returns:
        `{"pass@1": ..., "pass@5": ...}` in the order of `ks`, each the mean over tasks.

    Raises:
        PassAtKError: no tasks, k < 1, or a task with fewer samples than some k (the message names it).

    Example:
        >>> pass_at_k({"a": [True, False], "b": [False, False]}, ks=[1, 2])
        {'pass@1': 0.25, 'pass@2': 0.5}
    """
    if not results:
        raise PassAtKError("pass@k needs at least one task with results")
    out: dict[str, float] = {}
    for k in ks:
        if k < 1:
            raise PassAtKError(f"k={k} must be at least 1")
        short = [(task_id, len(samples)) for task_id, samples in results.items() if len(samples) < k]
        if short:
            task_id, n = short[0]
            raise PassAtKError(
                f"pass@{k} needs at least {k} samples per task, but task {task_id} has {n}"
                f" ({len(short)} task(s) too few); sample more or drop k={k}"
            )
        estimates = [pass_at_k_estimate(len(s), sum(bool(x) for x in s), k) for s in results.values()]
        out[f"pass@{k}"] = sum(estimates) / len(estimates)
    return out
