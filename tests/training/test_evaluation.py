"""Evaluation: sampling from a tiny local model, every completion scored by its task's verifier."""

from pathlib import Path

import pytest

from tests.training.tiny import TINY_TASKS
from training.evaluation import sample_and_score
from training.stats import EvaluationError, evaluate


@pytest.mark.parametrize(
    ("call", "match"),
    [
        # No sample per task: nothing to score.
        (lambda: sample_and_score("unused", [], k=0), "at least 1"),
        # A negative temperature is no sampling setting (0 is greedy).
        (lambda: sample_and_score("unused", [], temperature=-1.0), "temperature"),
        # A task listed twice would be counted twice; k asks for more samples.
        (lambda: sample_and_score("unused", [{"task_id": "a"}, {"task_id": "a"}]), "twice"),
        # A task without an id cannot be reported.
        (lambda: sample_and_score("unused", [{"family": "x"}]), "task_id"),
        # An episode in one turn would write every call blind: it is played turn by turn, elsewhere.
        (lambda: sample_and_score("unused", [{"task_id": "e", "verifier": {"name": "episode"}}]), "play_and_score"),
    ],
)
def test_bad_sampling_arguments_raise_with_a_reason(call, match) -> None:
    with pytest.raises(EvaluationError, match=match):
        call()


def test_sample_and_score_gives_every_completion_a_verdict(tiny_model_dir: Path) -> None:
    # Four completions per generate call: batches of 4 and 2, so a short last batch is covered too.
    sampled = sample_and_score(
        tiny_model_dir, TINY_TASKS, k=2, max_new_tokens=4, temperature=1.0, seed=3, batch_size=4, workers=1
    )
    again = sample_and_score(
        tiny_model_dir, TINY_TASKS, k=2, max_new_tokens=4, temperature=1.0, seed=3, batch_size=4, workers=1
    )

    assert {t: len(v) for t, v in sampled.passed.items()} == {"add": 2, "json": 2, "clips": 2}
    assert sampled.families == {"add": "arithmetic", "json": "json_extraction", "clips": "arithmetic"}
    assert [(r["task_id"], r["sample"]) for r in sampled.rows] == [
        (t["task_id"], s) for t in TINY_TASKS for s in range(2)
    ]
    assert all(isinstance(r["completion"], str) and r["reason"] for r in sampled.rows)
    assert [r["completion"] for r in again.rows] == [r["completion"] for r in sampled.rows]
    # Each task samples from its own seeded generator: another batch size draws the same completions.
    alone = sample_and_score(
        tiny_model_dir, TINY_TASKS, k=2, max_new_tokens=4, temperature=1.0, seed=3, batch_size=2, workers=1
    )
    assert [r["completion"] for r in alone.rows] == [r["completion"] for r in sampled.rows]
    assert len({r["completion"] for r in sampled.rows}) > 1
    # The verdicts feed evaluation directly.
    report = evaluate(sampled.passed, sampled.families, ks=[1, 2], resamples=100)
    assert set(report.families) == {"arithmetic", "json_extraction"}


def test_a_prompt_longer_than_the_context_gets_empty_failing_samples(tiny_model_dir: Path) -> None:
    huge = {**TINY_TASKS[0], "task_id": "huge", "prompt": [{"role": "user", "content": "word " * 5000}]}
    sampled = sample_and_score(tiny_model_dir, [huge, TINY_TASKS[1]], k=2, max_new_tokens=4, workers=1)

    assert [r["completion"] for r in sampled.rows[:2]] == ["", ""]
    assert sampled.passed["huge"] == [False, False]
    assert len(sampled.rows) == 4


def test_greedy_sampling_repeats_itself(tiny_model_dir: Path) -> None:
    sampled = sample_and_score(tiny_model_dir, TINY_TASKS[:1], k=2, max_new_tokens=3, temperature=0.0, workers=1)

    first, second = (r["completion"] for r in sampled.rows)
    assert first == second
