"""verl interop: exported rows load as verl's RL dataset, and `compute_score`, loaded by file path as verl's
`custom_reward_function` is, gives each row the registry's verdict."""

import json
import subprocess
import sys
import textwrap

import datasets
import pandas as pd
import pyarrow.parquet as pq
import pytest

import interop.verl
from core import SeedwheelError
from interop.verl import VERL_SCHEMA, VerlExportError, compute_score, dataset_rows, export_rows
from tests.paths import copy_seeds
from validators.registry import REGISTRY, VerifyContext, verify
from validators.seeds import load_seeds
from validators.tasks import TASK_FIELDS

# One file per family whose gold differs in shape: a number, expected JSON fields, an expected tool call, a SQLite
# fixture and gold query, unit tests run in the sandbox, a multi-turn episode's goal.
SEED_FILES = (
    "arithmetic/gsm8k_train_slice.jsonl",
    "json_extraction/commerce.yaml",
    "tool_call/smart_home.yaml",
    "sql/shop_questions.yaml",
    "python_function/strings.yaml",
    "episode/files.yaml",
)
PER_FAMILY = 4  # enough rows per family to see its verdicts, few enough for the fast tier
# A completion no task of these families accepts when its verifier knows no wrong answer of its own (tool_call
# and sql): no call, no query.
NOT_AN_ANSWER = "I am not able to help with that."


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """A copy of the seed sets (the SQL tasks' database among them): scoring never reads the repository's."""
    return copy_seeds(tmp_path_factory.mktemp("seeds"), sorted({name.split("/")[0] for name in SEED_FILES}))


@pytest.fixture(scope="module")
def tasks(seeds):
    """Real task records: the first few validated seeds of each family."""
    loaded = load_seeds([seeds / name for name in SEED_FILES], context=VerifyContext(seeds_dir=seeds))
    assert not loaded.problems
    by_family: dict[str, list[dict]] = {}
    for task in loaded.tasks:
        by_family.setdefault(task["family"], []).append({k: task[k] for k in TASK_FIELDS})
    assert len(by_family) == len(SEED_FILES)
    return [task for family in by_family.values() for task in family[:PER_FAMILY]]


def wrong_answer(task) -> str:
    spec = task["verifier"]
    return REGISTRY.get(spec["name"], spec.get("version")).wrong_answer(spec["params"]) or NOT_AN_ANSWER


def test_exported_parquet_reads_back_as_verls_dataset_with_the_tasks_prompts_and_specs(tasks, seeds, tmp_path):
    path = tmp_path / "verl" / "train.parquet"
    assert export_rows(tasks, path, split="train", context=VerifyContext(seeds_dir=seeds)) == len(tasks)
    assert pq.read_schema(path).remove_metadata() == VERL_SCHEMA
    frame = pd.read_parquet(path)
    assert list(frame.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    # verl's RLHFDataset reads the file with `datasets` and indexes rows as dicts.
    rows = datasets.load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
    assert len(rows) == len(tasks)
    for index, (row, task) in enumerate(zip(rows, tasks, strict=True)):
        assert row["prompt"] == task["prompt"]
        assert row["data_source"] == f"seedwheel/{task['family']}" and row["ability"] == task["family"]
        assert row["reward_model"]["style"] == "rule"
        assert json.loads(row["reward_model"]["ground_truth"]) == task["verifier"]  # the spec, exactly
        info = row["extra_info"]
        assert (info["task_id"], info["split"], info["index"]) == (task["task_id"], "train", index)
        assert (info["seed_id"], info["reference"]) == (task["lineage"]["seed_id"], task["reference"])


def test_compute_score_loaded_by_file_path_as_verl_does_gives_the_registrys_verdicts(tasks, seeds, tmp_path):
    rows = dataset_rows(tasks, "train", context=VerifyContext(seeds_dir=seeds))
    cases = [
        {"row": row, "completion": completion}
        for row, task in zip(rows, tasks, strict=True)
        for completion in (task["reference"], wrong_answer(task))
    ]
    (tmp_path / "cases.json").write_text(json.dumps(cases), encoding="utf-8")
    # What verl.utils.import_utils.load_module does with `custom_reward_function.path`: a spec from the file under
    # a made-up name, not put in sys.modules, then getattr(module, custom_reward_function.name). A fresh process,
    # started in a folder without seeds, so nothing of the test's imports or working directory helps it.
    script = textwrap.dedent(
        """
        import importlib.util, json, os, sys
        path, seeds_dir = sys.argv[1], sys.argv[2]
        spec = importlib.util.spec_from_file_location(f"custom_module_{hash(os.path.abspath(path))}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        compute_score = getattr(module, "compute_score")
        reward_kwargs = {"seeds_dir": seeds_dir}  # custom_reward_function.reward_kwargs, merged in by verl
        scores = [
            compute_score(
                data_source=case["row"]["data_source"],
                solution_str=case["completion"],
                ground_truth=case["row"]["reward_model"]["ground_truth"],
                extra_info=case["row"]["extra_info"],
                **reward_kwargs,
            )
            for case in json.load(open("cases.json"))
        ]
        print(json.dumps({"module": module.__name__, "in_sys_modules": module.__name__ in sys.modules,
                          "scores": scores}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, interop.verl.__file__, str(seeds)],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["module"].startswith("custom_module_") and not result["in_sys_modules"]
    scores = result["scores"]
    context = VerifyContext(seeds_dir=seeds)
    for case, task, score in zip(cases, [t for t in tasks for _ in range(2)], scores, strict=True):
        expected = verify(task, case["completion"], context=context)
        assert score == {
            "score": expected.score,
            "acc": 1.0 if expected.passed else 0.0,
            "passed": expected.passed,
            "reason": expected.reason,
        }, task["task_id"]
    references, wrongs = scores[0::2], scores[1::2]
    assert all(s["passed"] and s["score"] == 1.0 for s in references)
    # Every family has completions its verifier fails, and they score 0 (no family here gives partial credit).
    failed = {task["family"] for task, s in zip(tasks, wrongs, strict=True) if not s["passed"] and s["score"] == 0}
    assert failed == {task["family"] for task in tasks}
    assert all(set(s) == {"score", "acc", "passed", "reason"} for s in scores)  # one key set: verl's lists align


SPEC = '{"name":"numeric_answer","params":{"answer":4},"version":1}'


@pytest.mark.parametrize(
    ("data_source", "ground_truth", "says"),
    [
        # A verl dataset's own row (GSM8K's ground truth is the bare answer): not a row this function scores.
        ("openai/gsm8k", "4", "is not a seedwheel row"),
        # Not JSON: a bare answer written where the spec belongs.
        ("seedwheel/arithmetic", "4.0 apples", "ground_truth is not JSON"),
        # JSON, but not a verifier spec.
        ("seedwheel/arithmetic", '{"answer": 4}', "is not a verifier spec"),
        # A verifier this installation lacks (data exported by a newer seedwheel, or a typo).
        ("seedwheel/arithmetic", '{"name":"numeric_anser","params":{"answer":4}}', "unknown verifier 'numeric_anser'"),
        # A version newer than any registered one.
        ("seedwheel/arithmetic", SPEC.replace('"version":1', '"version":99'), "has no version 99"),
    ],
)
def test_a_row_it_cannot_score_raises_naming_the_task_and_the_fix(data_source, ground_truth, says):
    with pytest.raises(SeedwheelError) as raised:
        compute_score(data_source, "#### 4", ground_truth, {"task_id": "t-42"})
    message = str(raised.value)
    assert says in message and isinstance(raised.value, ValueError)
    assert "seedwheel" in raised.value.hint  # the fix names the export or the installation
    if data_source.startswith("seedwheel/"):
        assert "t-42" in message


def test_a_sql_row_without_its_seeds_folder_raises_with_the_reward_kwargs_fix(tasks, seeds, tmp_path, monkeypatch):
    row = next(
        r for r in dataset_rows(tasks, "train", context=VerifyContext(seeds_dir=seeds)) if r["ability"] == "sql"
    )
    monkeypatch.chdir(tmp_path)  # no ./seeds here, and no $SEEDWHEEL_SEEDS
    monkeypatch.delenv("SEEDWHEEL_SEEDS")
    with pytest.raises(SeedwheelError, match=r"reward_kwargs\.seeds_dir") as raised:
        compute_score(row["data_source"], "SELECT 1", row["reward_model"]["ground_truth"], row["extra_info"])
    assert row["extra_info"]["task_id"] in str(raised.value)
    # Given the folder, as verl passes reward_kwargs, the same row scores.
    scored = compute_score(
        row["data_source"], "SELECT 1", row["reward_model"]["ground_truth"], row["extra_info"], seeds_dir=str(seeds)
    )
    assert scored["passed"] is False and scored["reason"]


def test_export_refuses_a_spec_the_registry_refuses_and_a_file_that_is_not_parquet(tasks, seeds, tmp_path):
    context = VerifyContext(seeds_dir=seeds)
    broken = {**tasks[0], "verifier": {**tasks[0]["verifier"], "params": {"answer": "four"}}}
    with pytest.raises(VerlExportError, match=rf"task {tasks[0]['task_id']} \(row 1\).*answer") as raised:
        export_rows([tasks[1], broken], tmp_path / "train.parquet", context=context)
    assert raised.value.hint
    assert not (tmp_path / "train.parquet").exists()  # nothing half-written
    with pytest.raises(VerlExportError, match=r"\*\.parquet"):
        export_rows(tasks, tmp_path / "train.jsonl", context=context)
