"""The task record's TypedDicts say what its JSON Schema says: the same keys, required keys and enums."""

from typing import get_args

import pytest

from curation.validity import TASK_REJECT_COLUMNS, reject_row
from validators.records import ChatMessage, GeneratorSpec, Lineage, Role, Source, TaskRecord, VerifierSpec
from validators.tasks import TASK_FIELDS, Problem, schema_problems, task_schema

SCHEMA = task_schema()
PROPERTIES = SCHEMA["properties"]


@pytest.mark.parametrize(
    ("typed", "schema"),
    [
        (TaskRecord, SCHEMA),
        (ChatMessage, PROPERTIES["prompt"]["items"]),
        (VerifierSpec, PROPERTIES["verifier"]),
        (Lineage, PROPERTIES["lineage"]),
        (GeneratorSpec, PROPERTIES["lineage"]["properties"]["generator"]),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_typed_dict_keys_are_the_schema_properties(typed, schema):
    assert set(typed.__annotations__) == set(schema["properties"])
    assert typed.__required_keys__ == frozenset(schema["required"])  # NotRequired exactly where the schema allows


def test_enums_are_the_literals():
    assert set(get_args(Role)) == set(PROPERTIES["prompt"]["items"]["properties"]["role"]["enum"])
    assert set(get_args(Source)) == set(PROPERTIES["lineage"]["properties"]["source"]["enum"])


def test_task_fields_are_the_schema_properties_in_order():
    # TASK_FIELDS is read from TaskRecord; its order is the column order of every task table.
    assert tuple(PROPERTIES) == TASK_FIELDS


def test_a_record_built_to_the_type_passes_the_schema():
    record: TaskRecord = {
        "task_id": "0123456789abcdef",
        "family": "arithmetic",
        "prompt": [{"role": "user", "content": "What is 2 + 2?"}],
        "verifier": {"name": "numeric_answer", "version": 1, "params": {"answer": 4}},
        "reference": "#### 4",
        "lineage": {"seed_id": None, "parent_id": None, "generator": None, "source": "seed", "failure_id": None},
        "difficulty": 1,
        "tags": ["easy"],
    }
    assert schema_problems(record) == []


def test_the_reject_row_has_the_typed_columns():
    row = reject_row({"task_id": "t", "family": "sql", "lineage": {}}, [Problem("bad", "/", "broken", "fix it")])
    assert tuple(row) == TASK_REJECT_COLUMNS
