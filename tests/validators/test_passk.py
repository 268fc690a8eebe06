"""Unbiased pass@k, checked against brute-force enumeration of k-subsets."""

import itertools
import math

import pytest

from validators.passk import PassAtKError, pass_at_k, pass_at_k_estimate


def brute_force(samples, k):
    """The fraction of size-k subsets of the samples that contain at least one pass."""
    subsets = list(itertools.combinations(samples, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize(
    ("n", "c", "k"),
    [
        # pass@1 is the plain pass rate.
        (5, 2, 1),
        # Middle k.
        (6, 2, 3),
        # Too few failures to fill a k-subset: certain pass.
        (5, 4, 2),
        # No passes: zero.
        (4, 0, 2),
        # All pass.
        (4, 4, 4),
        # k = n: one subset, the whole sample.
        (7, 1, 7),
        # A larger case with many subsets.
        (10, 3, 4),
    ],
)
def test_estimate_matches_enumeration(n, c, k):
    samples = [True] * c + [False] * (n - c)
    assert pass_at_k_estimate(n, c, k) == pytest.approx(brute_force(samples, k), abs=1e-12)


def test_estimate_is_stable_for_large_n():
    # C(1000, 500) overflows a float; the product form does not.
    value = pass_at_k_estimate(1000, 3, 500)
    assert 0.0 <= value <= 1.0
    assert value == pytest.approx(1 - math.comb(997, 500) / math.comb(1000, 500))


def test_pass_at_k_averages_over_tasks():
    results = {"a": [True, False, False, False], "b": [False] * 4, "c": [True, True, False, True]}
    expected = {f"pass@{k}": sum(brute_force(s, k) for s in results.values()) / len(results) for k in (1, 2, 4)}
    out = pass_at_k(results, ks=[1, 2, 4])
    assert list(out) == ["pass@1", "pass@2", "pass@4"]
    assert out == pytest.approx(expected)


@pytest.mark.parametrize(
    ("results", "ks", "message"),
    [
        # A task with fewer samples than k: named, with the fix.
        ({"a": [True] * 5, "b": [True] * 2}, [5], r"task b has 2 .*; sample more or drop k=5"),
        # k must be positive.
        ({"a": [True]}, [0], "k=0 must be at least 1"),
        # No tasks.
        ({}, [1], "at least one task"),
    ],
)
def test_pass_at_k_errors(results, ks, message):
    with pytest.raises(PassAtKError, match=message):
        pass_at_k(results, ks)


@pytest.mark.parametrize(
    ("n", "c", "k"),
    [
        # More passes than samples.
        (3, 4, 1),
        # k larger than n.
        (3, 1, 4),
    ],
)
def test_estimate_rejects_inconsistent_counts(n, c, k):
    with pytest.raises(PassAtKError):
        pass_at_k_estimate(n, c, k)
