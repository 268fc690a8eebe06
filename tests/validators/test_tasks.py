"""The task record: content-addressed ids and schema problems that say where and how to fix."""

import pytest

from validators.tasks import TASK_FIELDS, compute_task_id, schema_problems, task_problems

PROMPT = [{"role": "user", "content": "What is 2 + 3?"}]
VERIFIER = {"name": "numeric_answer", "version": 1, "params": {"answer": 5}}


def make_task(**overrides):
    task_id = compute_task_id(overrides.get("prompt", PROMPT), overrides.get("verifier", VERIFIER))
    task = {
        "task_id": task_id,
        "family": "arithmetic",
        "prompt": PROMPT,
        "verifier": VERIFIER,
        "reference": "2 + 3 = 5\n#### 5",
        "lineage": {"seed_id": task_id, "parent_id": None, "generator": None, "source": "seed", "failure_id": None},
        "difficulty": 1,
        "tags": ["demo"],
    }
    task.update(overrides)
    return task


def test_task_id_is_a_stable_content_hash():
    # A golden value: the id must not change across machines, Python versions or releases.
    assert compute_task_id(PROMPT, VERIFIER) == "27ba7883a6f63fe5"


@pytest.mark.parametrize(
    ("change", "same"),
    [
        # Key order in params is not content.
        ({"verifier": {"name": "numeric_answer", "version": 1, "params": {"answer": 5}}}, True),
        # A verifier bug fix (new version) keeps the task's identity.
        ({"verifier": {"name": "numeric_answer", "version": 2, "params": {"answer": 5}}}, True),
        # A different gold answer is a different task.
        ({"verifier": {"name": "numeric_answer", "version": 1, "params": {"answer": 6}}}, False),
        # So is a different prompt, even by one character.
        ({"prompt": [{"role": "user", "content": "What is 2 + 3 ?"}]}, False),
        # And a different role for the same text.
        ({"prompt": [{"role": "system", "content": "What is 2 + 3?"}]}, False),
    ],
)
def test_task_id_changes_only_with_content(change, same):
    prompt = change.get("prompt", PROMPT)
    verifier = change.get("verifier", VERIFIER)
    assert (compute_task_id(prompt, verifier) == compute_task_id(PROMPT, VERIFIER)) is same


def test_valid_task_has_no_problems():
    assert schema_problems(make_task()) == []
    assert task_problems(make_task(), check_wrong_answer=True) == []


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        # A missing field points at where it should be.
        (
            {k: v for k, v in make_task().items() if k != "lineage"},
            "missing field 'lineage' (/lineage) - add the field",
        ),
        # Wrong types name the expected type and the value.
        (
            make_task(reference=5),
            "expected ['string', 'null'], got int 5 (/reference) - change the value to the expected type",
        ),
        # Roles are an enum.
        (
            make_task(prompt=[{"role": "robot", "content": "hi"}]),
            "'robot' is not one of ['system', 'user', 'assistant', 'tool'] (/prompt/0/role)"
            " - use one of the allowed values",
        ),
        # Unknown fields are typos more often than extensions.
        (
            make_task(difficulty_level=3),
            "unknown field(s) ('difficulty_level' was unexpected) (/)"
            " - remove the field or check its spelling against the task schema",
        ),
        # Difficulty is bounded.
        (make_task(difficulty=9), "9 is greater than the maximum of 5 (/difficulty) - use a smaller value"),
        # Families are identifiers.
        (
            make_task(family="SQL"),
            "'SQL' does not match '^[a-z][a-z0-9_]*$' (/family) - use lowercase letters, digits and underscores",
        ),
    ],
)
def test_schema_problems_say_where_and_how(record, expected):
    assert [str(p) for p in schema_problems(record)] == [expected]


@pytest.mark.parametrize(
    ("record", "code", "pointer"),
    [
        # An id that is not the content hash means the record was edited after hashing.
        (make_task(task_id="0" * 16), "task_id_mismatch", "/task_id"),
        # A verifier nobody registered.
        (make_task(verifier={"name": "telepathy", "version": 1, "params": {}}), "unknown_verifier", "/verifier/name"),
        # Params are checked when the task is loaded, not when it is first scored.
        (make_task(verifier={"name": "numeric_answer", "version": 1, "params": {}}), "bad_params", "/verifier/params"),
        # The reference must pass its own verifier.
        (make_task(reference="#### 6"), "reference_failed", "/reference"),
    ],
)
def test_task_problems_codes(record, code, pointer):
    record = {**record, "task_id": record["task_id"]}
    if code != "task_id_mismatch":
        record["task_id"] = compute_task_id(record["prompt"], record["verifier"])
    problems = task_problems(record)
    assert [(p.code, p.pointer) for p in problems] == [(code, pointer)]


def test_extra_label_columns_are_not_schema_problems():
    # Downstream assets add labels (is_duplicate, split, ...) beside the record's fields.
    assert task_problems({**make_task(), "split": "train", "origin": "x.jsonl:1"}) == []
    assert set(TASK_FIELDS) == set(make_task())
