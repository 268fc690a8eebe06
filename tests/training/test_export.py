"""Exported splits load with `datasets` as TRL expects, and the reward scores them from the loaded columns."""

import json

import datasets
import pyarrow.parquet as pq
import pytest

from core.tables import frame_from_records, read_table, write_table
from tests.paths import SEEDS
from training.export import EXPORT_SCHEMA, ExportError, export_split
from validators.rewards import VerifierReward
from validators.seeds import load_seeds

# Three families whose verifier params differ in shape (a number, a JSON Schema with expected fields, tool
# schemas with an expected call); no SQLite fixtures or sandbox, so loading them is quick.
SEED_FILES = ("arithmetic/gsm8k_train_slice.jsonl", "json_extraction/commerce.yaml", "tool_call/smart_home.yaml")


@pytest.fixture(scope="module")
def seed_tasks():
    seed_set = load_seeds([SEEDS / name for name in SEED_FILES])
    assert not seed_set.problems
    return seed_set.tasks


def load(path, kind, tmp_path):
    """`load_dataset` as a user calls it, with its cache kept under tmp_path."""
    return datasets.load_dataset(kind, data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))


def test_parquet_loads_as_a_trl_conversational_dataset(seed_tasks, tmp_path):
    exported = export_split(seed_tasks, tmp_path / "export", "train")
    assert exported.rows == len(seed_tasks)
    ds = load(exported.parquet, "parquet", tmp_path)
    assert ds.column_names == ["task_id", "family", "prompt", "verifier", "reference", "seed_id"]
    # A native list of structs, not JSON text: TRL applies the chat template to it as is.
    assert isinstance(ds.features["prompt"], datasets.List)
    first = ds[0]["prompt"]
    assert isinstance(first, list) and all(set(m) == {"role", "content"} for m in first)
    assert first == seed_tasks[0]["prompt"]
    assert {row["family"] for row in ds} == {"arithmetic", "json_extraction", "tool_call"}


def test_reward_scores_loaded_rows_with_trl_argument_shapes(seed_tasks, tmp_path):
    ds = load(export_split(seed_tasks, tmp_path, "train").parquet, "parquet", tmp_path)
    reward = VerifierReward()
    for row in ds:
        # One row as TRL passes it: lists with one value per completion, extra columns as keywords.
        kwargs = {"verifier": [row["verifier"]], "task_id": [row["task_id"]], "family": [row["family"]]}
        assert reward(prompts=[row["prompt"]], completions=[row["reference"]], **kwargs) == [1.0], row["task_id"]
        # The reward is not vacuous: an answer with nothing in it fails the same row.
        assert reward(prompts=[row["prompt"]], completions=["I am not sure."], **kwargs) == [0.0], row["task_id"]
    # The whole dataset as one batch, completions in the conversational shape.
    completions = [[{"role": "assistant", "content": ref}] for ref in ds["reference"]]
    assert reward(prompts=ds["prompt"], completions=completions, verifier=ds["verifier"]) == [1.0] * len(ds)


def test_jsonl_loads_to_the_same_rows(seed_tasks, tmp_path):
    exported = export_split(seed_tasks, tmp_path, "eval")
    from_parquet = load(exported.parquet, "parquet", tmp_path)
    from_jsonl = load(exported.jsonl, "json", tmp_path)
    # verifier stays text in JSONL too, or `datasets` would infer one struct for every family's params.
    assert from_jsonl.features == from_parquet.features
    assert from_jsonl.to_list() == from_parquet.to_list()


def test_verifier_text_keeps_each_familys_params_exactly(seed_tasks, tmp_path):
    exported = export_split(seed_tasks, tmp_path, "train")
    rows = read_table(exported.parquet)  # decodes the verifier column named in the schema metadata
    assert list(rows["verifier"]) == [t["verifier"] for t in seed_tasks]
    assert list(rows["seed_id"]) == [t["lineage"]["seed_id"] for t in seed_tasks]
    # Why not a struct column: the families' params share almost no keys.
    shapes = {t["family"]: frozenset(t["verifier"]["params"]) for t in seed_tasks}
    assert len(set(shapes.values())) == 3


def test_dataframe_input_and_empty_split(seed_tasks, tmp_path):
    # The pipeline hands DataFrames read back from Parquet.
    write_table(frame_from_records(seed_tasks), tmp_path / "tasks.parquet")
    frame = read_table(tmp_path / "tasks.parquet")
    assert export_split(frame, tmp_path / "a", "train").rows == len(seed_tasks)
    # An empty eval split still has the full schema, so a trainer fails on zero rows, not on a missing column.
    empty = export_split([], tmp_path / "b", "eval")
    assert empty.rows == 0
    assert pq.read_table(empty.parquet).schema.equals(EXPORT_SCHEMA)
    assert empty.jsonl.read_text() == ""


def good_task():
    return {
        "task_id": "0123456789abcdef",
        "family": "arithmetic",
        "prompt": [{"role": "user", "content": "2+2?"}],
        "verifier": {"name": "numeric_answer", "version": 1, "params": {"answer": 4}},
        "reference": "#### 4",
        "lineage": {"seed_id": "0123456789abcdef"},
    }


@pytest.mark.parametrize(
    ("change", "name", "message"),
    [
        # A record without its verifier cannot be rewarded.
        ({"verifier": None}, "train", r"lacks verifier"),
        # A bare string prompt is TRL's standard format, not the conversational one this export promises.
        ({"prompt": "2+2?"}, "train", r"prompt must be a list of \{role, content\} messages"),
        # Prompt as JSON text: the table was read without decoding nested columns.
        ({"prompt": json.dumps([{"role": "user", "content": "x"}])}, "train", r"read tables with .*read_table"),
        # No messages at all.
        ({"prompt": []}, "train", r"prompt must be a list"),
        # A message without content.
        ({"prompt": [{"role": "user"}]}, "train", r"prompt must be a list"),
        # Verifier text that is not JSON.
        ({"verifier": "{numeric"}, "train", r"verifier is text but not JSON"),
        # A name that would write outside out_dir.
        ({}, "../train", r"plain file stem"),
        # A name that would hide the file.
        ({}, ".train", r"plain file stem"),
    ],
)
def test_refuses_what_it_cannot_export_and_keeps_the_old_files(tmp_path, change, name, message):
    export_split([good_task()], tmp_path, "train")
    before = sorted((p.name, p.read_bytes()) for p in tmp_path.iterdir())
    with pytest.raises(ExportError, match=message):
        export_split([good_task(), {**good_task(), **change}], tmp_path, name)
    # Nothing half-written: the previous export is intact and no temporary file is left behind.
    assert sorted((p.name, p.read_bytes()) for p in tmp_path.iterdir()) == before


def test_verifier_given_as_text_is_kept_canonical(tmp_path):
    # Rows read raw from an older table carry the spec as text; it is re-encoded the same way as a dict.
    as_dict = export_split([good_task()], tmp_path / "a", "x")
    spec = json.dumps(good_task()["verifier"], indent=2)
    as_text = export_split([{**good_task(), "verifier": spec}], tmp_path / "b", "x")
    assert as_dict.jsonl.read_text() == as_text.jsonl.read_text()
