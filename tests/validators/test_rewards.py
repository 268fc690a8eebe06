"""The TRL reward adapter, called exactly the way GRPOTrainer._calculate_rewards calls reward functions."""

import json
import logging
import pickle

import pytest

from validators.registry import REGISTRY, Completion, Verdict, Verifier, VerifyContext
from validators.rewards import RewardConfigError, VerifierReward, build_reward_funcs

NUMERIC = {"name": "numeric_answer", "version": 1, "params": {"answer": 18}}
TAGS = {"name": "format_tags", "version": 1, "params": {"tags": ["answer"]}}


def trl_kwargs(verifiers, **extra):
    """The keyword arguments TRL adds besides dataset columns (trainer_state, log_extra, log_metric)."""
    logged = {}
    kwargs = {
        "verifier": verifiers,
        "task_id": [f"t{i}" for i in range(len(verifiers))],
        "trainer_state": object(),
        "log_extra": lambda column, values: logged.setdefault(column, []).extend(values),
        "log_metric": lambda name, value: None,
        **extra,
    }
    return kwargs, logged


@pytest.fixture
def isolated_registry(monkeypatch):
    """A registry copy for the test, so test-only verifiers never leak into other tests."""
    REGISTRY.names()  # load the built-ins before copying
    monkeypatch.setattr(REGISTRY, "_verifiers", dict(REGISTRY._verifiers))
    return REGISTRY


@pytest.mark.parametrize(
    ("completions", "expected"),
    [
        # Standard format: completions are strings.
        (["#### 18", "#### 16", "no idea"], [1.0, 0.0, 0.0]),
        # Conversational format: each completion is a list of messages.
        (
            [
                [{"role": "assistant", "content": "#### 18"}],
                [{"role": "assistant", "content": "#### 16"}],
                [{"role": "assistant", "content": "no idea"}],
            ],
            [1.0, 0.0, 0.0],
        ),
    ],
)
def test_trl_shapes(completions, expected):
    reward = VerifierReward()
    kwargs, logged = trl_kwargs([NUMERIC] * 3)
    prompts = ["Q?"] * 3 if isinstance(completions[0], str) else [[{"role": "user", "content": "Q?"}]] * 3
    rewards = reward(prompts=prompts, completions=completions, completion_ids=[[1, 2], [3], [4, 5, 6]], **kwargs)
    assert rewards == expected
    # The verdict reasons go to TRL's completions table through log_extra.
    assert logged["verifier_reward_reason"] == ["ok", "answer_mismatch: expected 18, got 16", "no_answer"]


def test_verifier_column_may_hold_json_strings():
    # Arrow/Parquet round trips often leave nested columns as JSON text.
    reward = VerifierReward()
    kwargs, _ = trl_kwargs([json.dumps(NUMERIC), json.dumps(TAGS)])
    assert reward(prompts=["a", "b"], completions=["#### 18", "<answer>x</answer>"], **kwargs) == [1.0, 1.0]


def test_an_episode_column_is_scored_instead_of_the_decoded_tokens():
    """An episode rollout hands over what each episode did; its decoded tokens interleave the tool results, and a
    claim of success among them must not be what gets paid."""
    episode = {
        "name": "episode",
        "params": {
            "environment": "files",
            "state": {"files": {"a.txt": "hi"}},
            "goal": {"changes": [{"collection": "files", "key": "a.txt", "after": None}]},
        },
    }
    deleted = '<tool_call>{"name": "delete_file", "arguments": {"path": "a.txt"}}</tool_call>'
    kwargs, _ = trl_kwargs([episode, episode, NUMERIC], episode=[deleted, "Deleted a.txt for you!", None])
    # Row 0 did delete the file; row 1's tokens hold the call (as a result would show it) but it never ran; the
    # single-turn row has no episode and is scored on its completion.
    completions = [deleted, deleted, "#### 18"]
    assert VerifierReward()(prompts=["p"] * 3, completions=completions, **kwargs) == [1.0, 0.0, 1.0]


def test_restricted_reward_marks_other_rows_not_applicable():
    # A per-verifier reward returns None (TRL: not applicable) for rows of other verifiers.
    reward = VerifierReward("numeric_answer")
    kwargs, _ = trl_kwargs([NUMERIC, TAGS])
    assert reward(prompts=["a", "b"], completions=["#### 18", "#### 18"], completion_ids=None, **kwargs) == [1.0, None]
    assert reward.__name__ == "numeric_answer"


def test_name_is_stable_and_configurable():
    # TRL logs rewards/<__name__>/mean; the name must not depend on the instance's identity.
    assert VerifierReward().__name__ == "verifier_reward"
    assert VerifierReward("numeric_answer", name="gsm8k_correct").__name__ == "gsm8k_correct"


def test_pickle_round_trip():
    # The async rollout worker sends reward functions to a child process.
    reward = VerifierReward("numeric_answer", name="correct", context=VerifyContext())
    restored = pickle.loads(pickle.dumps(reward))
    assert restored.__name__ == "correct"
    kwargs, _ = trl_kwargs([NUMERIC])
    assert restored(prompts=["q"], completions=["#### 18"], **kwargs) == [1.0]


class Exploding(Verifier):
    """A verifier that raises, as a buggy user verifier might."""

    name = "exploding_test_verifier"
    version = 1

    def check(self, params, completion: Completion, context: VerifyContext) -> Verdict:
        raise RuntimeError("fixture missing")


def test_verifier_exception_becomes_none_and_a_warning(isolated_registry, caplog):
    isolated_registry.register(Exploding)
    reward = VerifierReward()
    kwargs, logged = trl_kwargs([{"name": "exploding_test_verifier", "params": {}}, NUMERIC])
    with caplog.at_level(logging.WARNING, logger="validators.rewards"):
        rewards = reward(prompts=["a", "b"], completions=["x", "#### 18"], **kwargs)
    # The broken row is unscored; the healthy row in the same batch still is.
    assert rewards == [None, 1.0]
    [record] = [r for r in caplog.records if r.name == "validators.rewards"]
    assert record.levelno == logging.WARNING
    assert "task t0" in record.getMessage() and "RuntimeError: fixture missing" in record.getMessage()
    assert logged["verifier_reward_reason"][0] == "verifier_error: RuntimeError"


@pytest.mark.parametrize(
    "spec",
    [
        # An unregistered verifier name in one row.
        {"name": "no_such_verifier", "params": {}},
        # A JSON string that is not JSON.
        "{not json",
        # A spec that is not an object.
        None,
    ],
)
def test_bad_rows_become_none(spec, caplog):
    reward = VerifierReward()
    kwargs, _ = trl_kwargs([spec])
    with caplog.at_level(logging.WARNING, logger="validators.rewards"):
        assert reward(prompts=["a"], completions=["#### 18"], **kwargs) == [None]
    assert caplog.records


def test_missing_verifier_column_is_a_config_error():
    # A dataset without the column is a setup mistake, not bad model output: fail loudly, naming the columns.
    with pytest.raises(RewardConfigError, match=r"needs a 'verifier' column.*got columns: task_id"):
        VerifierReward()(prompts=["a"], completions=["x"], task_id=["t0"], trainer_state=None)


def test_build_reward_funcs():
    funcs, weights = build_reward_funcs({"numeric_answer": 1.0, "format_tags": 0.2, "*": 0.5})
    assert [f.__name__ for f in funcs] == ["numeric_answer", "format_tags", "verifier"]
    assert weights == [1.0, 0.2, 0.5]
    kwargs, _ = trl_kwargs([NUMERIC, TAGS])
    completions = ["#### 18", "<answer>x</answer>"]
    assert [f(prompts=["a", "b"], completions=completions, **kwargs) for f in funcs] == [
        [1.0, None],
        [None, 1.0],
        [1.0, 1.0],
    ]


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        # A typo lists the registered names.
        ({"numerc_answer": 1.0}, "registered: .*numeric_answer"),
        # Weights must be numbers.
        ({"numeric_answer": "1"}, "must be a finite number"),
        # NaN weights would poison the summed reward.
        ({"numeric_answer": float("nan")}, "must be a finite number"),
        # Nothing to train on.
        ({}, "empty"),
    ],
)
def test_build_reward_funcs_errors(weights, message):
    with pytest.raises(RewardConfigError, match=message):
        build_reward_funcs(weights)


@pytest.mark.slow
def test_trl_sees_the_name_and_a_sync_callable():
    # TRL itself names the metric and picks the sync call path from these helpers (importing trl takes ~10 s).
    utils = pytest.importorskip("trl.trainer.utils")
    reward = VerifierReward("numeric_answer")
    assert utils.get_callable_name(reward) == "numeric_answer"
    assert not utils.is_async_callable(reward)
