"""The judge's setup history: what a run used, saved atomically, and what changed since the last run."""

import dataclasses
import json

import pytest

from judge import (
    DEFAULT_RUBRIC,
    LABEL_PARAMS,
    Criterion,
    JudgeHistoryError,
    JudgePrompt,
    JudgeSetup,
    describe_change,
    judge_tasks,
    load_setup,
    save_setup,
)
from langmodels import EndpointConfig, LLMClient
from tests.fake_server import FakeOpenAIServer

CONFIG = EndpointConfig(base_url="http://127.0.0.1:8000/v1", model="qwen-7b", max_tokens=256)
BASE = JudgeSetup.of(JudgePrompt(DEFAULT_RUBRIC, LABEL_PARAMS), CONFIG)
R2 = dataclasses.replace(
    DEFAULT_RUBRIC,
    version=2,
    criteria=(
        *DEFAULT_RUBRIC.criteria[:3],
        Criterion("on_topic", "Fits its family.", {s: f"{s}/5" for s in range(1, 6)}),
    ),
)


@pytest.mark.parametrize(
    ("previous", "current", "expected"),
    [
        # No record: nothing to compare with.
        (None, BASE, "first run"),
        (BASE, BASE, "unchanged"),
        # A new rubric version re-judges everything; its new template version is not reported twice.
        (BASE, JudgeSetup.of(JudgePrompt(R2, LABEL_PARAMS), CONFIG), "rubric task_quality-r1 -> task_quality-r2"),
        # The prompt template changed under the same rubric.
        (
            BASE,
            dataclasses.replace(BASE, template_version="judge-task_quality-r1-t3"),
            "judge prompt judge-task_quality-r1-t2 -> judge-task_quality-r1-t3",
        ),
        (
            BASE,
            JudgeSetup.of(JudgePrompt(DEFAULT_RUBRIC, LABEL_PARAMS), dataclasses.replace(CONFIG, model="qwen-14b")),
            "judge model qwen-7b -> qwen-14b",
        ),
        # Another endpoint may serve another build of the model; a local server's port does not count.
        (
            BASE,
            JudgeSetup.of(
                JudgePrompt(DEFAULT_RUBRIC, LABEL_PARAMS), dataclasses.replace(CONFIG, base_url="https://x.ai/v1")
            ),
            "judge endpoint http://loopback/v1 -> https://x.ai/v1",
        ),
        (
            BASE,
            JudgeSetup.of(
                JudgePrompt(DEFAULT_RUBRIC, LABEL_PARAMS),
                dataclasses.replace(CONFIG, base_url="http://localhost:9/v1"),
            ),
            "unchanged",
        ),
        # Generation params are in the key too.
        (
            BASE,
            JudgeSetup.of(JudgePrompt(DEFAULT_RUBRIC, LABEL_PARAMS), dataclasses.replace(CONFIG, max_tokens=64)),
            'judge params {"max_tokens":256,"temperature":0.0} -> {"max_tokens":64,"temperature":0.0}',
        ),
        # Several changes at once are all named.
        (
            BASE,
            JudgeSetup.of(JudgePrompt(R2, LABEL_PARAMS), dataclasses.replace(CONFIG, model="qwen-14b")),
            "rubric task_quality-r1 -> task_quality-r2; judge model qwen-7b -> qwen-14b",
        ),
    ],
)
def test_describe_change(previous, current, expected):
    assert describe_change(previous, current) == expected


def test_save_then_load_round_trips(tmp_path):
    path = tmp_path / "history" / "judged_tasks.json"
    assert load_setup(path) is None  # no file yet: the first run
    save_setup(path, BASE)
    assert load_setup(path) == BASE
    assert [p.name for p in path.parent.iterdir()] == ["judged_tasks.json"]  # no temporary file left behind


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[]",
        json.dumps({"format": 99, "setup": BASE.as_dict()}),
        json.dumps({"format": 1, "setup": {"rubric": "task_quality-r1"}}),
        json.dumps({"format": 1, "setup": {**BASE.as_dict(), "model": 7}}),
        json.dumps({"format": 1, "setup": {**BASE.as_dict(), "params": []}}),
    ],
)
def test_a_damaged_history_names_the_file_and_the_fix(tmp_path, text):
    path = tmp_path / "judged_tasks.json"
    path.write_text(text)
    with pytest.raises(JudgeHistoryError, match=r"judged_tasks.json: not a saved judge setup .*delete the file"):
        load_setup(path)


def test_a_judge_run_reports_its_setup():
    answer = '{"rationale": "ok", "clarity": 5, "solvability": 5, "reference_correctness": 5, "on_topic": 5}'
    task = {"task_id": "t1", "family": "arithmetic", "prompt": [{"role": "user", "content": "2+2?"}], "reference": "4"}
    with FakeOpenAIServer(responder=lambda body: answer) as server:
        client = LLMClient(EndpointConfig(base_url=server.base_url, model="fake", max_tokens=100))
        run = judge_tasks([task], client=client, params=LABEL_PARAMS)
    assert run.setup == JudgeSetup(
        "task_quality-r1",
        "judge-task_quality-r1-t2",
        "fake",
        "http://loopback/v1",
        {"max_tokens": 100, "temperature": 0.0},
    )
