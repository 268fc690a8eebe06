"""`play_and_score`: a policy scored on a mix of tasks, episode tasks played turn by turn and the others sampled in
one turn, the verdicts merged back in task order. A scripted policy plays the episodes; the tiny model samples the
single-turn tasks (and would write garbage calls if it were asked to play an episode)."""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.paths import SEEDS
from tests.training.scripted import Scripted, reference_script, request
from tests.training.tiny import TINY_TASKS
from training.episodes import SCORED_FIELDS, PlayedEpisodesError, play_and_score, sample_episodes
from training.evaluation import sample_and_score
from training.stats import EvaluationError, evaluate
from validators.registry import VerifyContext
from validators.seeds import load_seeds
from validators.verifiers.episode import CLAIM_OF_SUCCESS, episode_calls

SINGLE_TURN = TINY_TASKS[:2]  # an arithmetic task and a JSON one


@pytest.fixture(scope="module")
def episode_tasks(seed_context: VerifyContext) -> list[dict[str, Any]]:
    """Two shop episodes whose references make at least two calls (a turn cap of 1 cuts them short)."""
    seeds = load_seeds([SEEDS / "episode"], root=SEEDS.parent, context=seed_context)
    shop = [t for t in seeds.tasks if t["verifier"]["params"]["environment"] == "shop"]
    return [t for t in shop if len(episode_calls(t["reference"])) >= 2][:2]


def never(conversations: Sequence[Sequence[Mapping[str, Any]]], seeds: Sequence[int]) -> list[str]:
    raise AssertionError("the episodes were played again")


def test_each_kind_goes_to_its_sampler_and_the_rows_come_back_in_task_order(
    tiny_model_dir: Path, episode_tasks: list[dict[str, Any]], seed_context: VerifyContext
) -> None:
    solved, claimed = episode_tasks
    # Interleaved on purpose: the merge must follow `tasks`, not the samplers' order.
    tasks = [SINGLE_TURN[0], solved, SINGLE_TURN[1], claimed]
    policy = Scripted(
        {request(solved["prompt"]): reference_script(solved), request(claimed["prompt"]): [CLAIM_OF_SUCCESS]}
    )
    options = {"k": 2, "max_new_tokens": 4, "temperature": 1.0, "seed": 3, "workers": 1, "context": seed_context}

    sampled = play_and_score(tiny_model_dir, tasks, generate=policy, **options)

    assert [(r["task_id"], r["sample"]) for r in sampled.rows] == [(t["task_id"], s) for t in tasks for s in (0, 1)]
    assert all(tuple(row) == SCORED_FIELDS for row in sampled.rows)  # one shape for every row
    # Only the episodes reached the turn-by-turn policy, every live one each round.
    assert set(policy.seen) == {request(solved["prompt"]), request(claimed["prompt"])}
    episodes = {r["task_id"]: r for r in sampled.rows if r["turns"] is not None}
    assert set(episodes) == {solved["task_id"], claimed["task_id"]}
    assert episodes[solved["task_id"]]["end_reason"] == "answered"
    assert [m["role"] for m in episodes[solved["task_id"]]["turns"]][:2] == ["assistant", "tool"]  # a tool answered
    assert sampled.passed[solved["task_id"]] == [True, True] and sampled.passed[claimed["task_id"]] == [False, False]
    # The single-turn tasks were sampled exactly as sample_and_score samples them alone, with the same settings.
    alone = sample_and_score(tiny_model_dir, SINGLE_TURN, **options)
    single = [r for r in sampled.rows if r["turns"] is None]
    assert [(r["task_id"], r["completion"], r["passed"]) for r in single] == [
        (r["task_id"], r["completion"], r["passed"]) for r in alone.rows
    ]
    assert all(r["end_reason"] is None for r in single)
    assert sampled.families == {t["task_id"]: t["family"] for t in tasks}
    # The statistics take every row alike: an episode is one sample of its task.
    report = evaluate(sampled.passed, sampled.families, ks=[1, 2], resamples=50)
    assert report.families["episode"]["pass@1"].value == 0.5


def test_played_episodes_are_used_as_they_are(episode_tasks: list[dict[str, Any]], seed_context: VerifyContext):
    solved, claimed = episode_tasks
    plays = {request(solved["prompt"]): reference_script(solved), request(claimed["prompt"]): [CLAIM_OF_SUCCESS]}
    played = sample_episodes("sft", episode_tasks, k=2, context=seed_context, workers=1, generate=Scripted(plays))
    stray = {**played[0], "task_id": "not-profiled"}  # a task the caller did not ask for: ignored

    # No model is loaded (no single-turn task) and the policy is never called again.
    sampled = play_and_score("unused", [claimed, solved], k=2, played=[stray, *played], generate=never)

    expected = {(r["task_id"], r["sample"]): r for r in played}
    assert [(r["task_id"], r["sample"]) for r in sampled.rows] == [
        (t["task_id"], s) for t in (claimed, solved) for s in (0, 1)
    ]
    for row in sampled.rows:
        source = expected[row["task_id"], row["sample"]]
        assert {name: row[name] for name in SCORED_FIELDS} == {name: source[name] for name in SCORED_FIELDS}
    assert sampled.passed == {claimed["task_id"]: [False, False], solved["task_id"]: [True, True]}


@pytest.mark.parametrize(
    ("keep", "k", "match"),
    [
        # Played with k=1, asked for k=2: the profile would count 1 sample as 2.
        (lambda row: row["sample"] == 0, 2, r"samples \[0\], not samples 0..1 \(k=2\)"),
        # Played with k=2, asked for k=1: not the table this policy's profile played.
        (lambda row: True, 1, r"samples \[0, 1\], not samples 0..0 \(k=1\)"),
        # An episode task the table never played (another selection).
        (lambda row: row["sample"] == 0 and row["task_id"] != "second", 1, r"task second: .*samples \[\]"),
    ],
)
def test_played_episodes_of_another_k_or_other_tasks_are_refused(episode_tasks, seed_context, keep, k, match):
    tasks = [episode_tasks[0], {**episode_tasks[1], "task_id": "second"}]
    plays = {request(t["prompt"]): [CLAIM_OF_SUCCESS] for t in tasks}
    played = sample_episodes("sft", tasks, k=2, context=seed_context, workers=1, generate=Scripted(plays))

    with pytest.raises(PlayedEpisodesError, match=match):
        play_and_score("unused", tasks, k=k, played=[row for row in played if keep(row)], generate=never)


def test_the_turn_cap_reaches_the_episodes(episode_tasks: list[dict[str, Any]], seed_context: VerifyContext) -> None:
    task = episode_tasks[0]
    policy = Scripted({request(task["prompt"]): reference_script(task)})

    [row] = play_and_score("unused", [task], max_turns=1, context=seed_context, workers=1, generate=policy).rows

    # One call, then the cap: the reference needed more turns.
    assert (row["end_reason"], row["passed"]) == ("max_turns", False)


def test_a_task_id_shared_by_an_episode_and_a_single_turn_task_is_refused(episode_tasks) -> None:
    tasks = [SINGLE_TURN[0], {**episode_tasks[0], "task_id": SINGLE_TURN[0]["task_id"]}]
    with pytest.raises(EvaluationError, match="twice"):
        play_and_score("unused", tasks, generate=never)
