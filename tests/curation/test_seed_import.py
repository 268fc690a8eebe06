"""`seedwheel seeds import`: CSV, JSON Lines, Parquet and saved `datasets` folders into seed files that validate,
every row left out named with its file:row, reason and fix."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from curation.seed_import import ImportSpec, SeedImportError, import_seeds, template_fields
from pipeline.cli import main
from tests.paths import GSM8K
from validators.seeds import load_seeds

NUMERIC = ImportSpec(family="arithmetic", prompt="{question}", answer="answer", verifier="numeric_answer")


def _seeds(tmp_path: Path, family: str = "arithmetic") -> Path:
    return tmp_path / "seeds" / family / "imported.jsonl"


def _written(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_csv_imports_and_each_row_it_cannot_convert_is_named_by_its_line(tmp_path: Path) -> None:
    source = tmp_path / "qa.csv"
    source.write_text(
        "question,answer,note\n"
        "What is 2 + 3?,5,\n"  # line 2
        '"A farmer has 12 cows\nand buys 3 more. How many?",15,two lines\n'  # lines 3-4
        ",7,\n"  # line 5: no question
        "What is 10 / 4?,2.5,\n"  # line 6
        "What is 1 + 1?,two,\n"  # line 7: no number
        "What is 2 + 3?,5,\n"  # line 8: the same seed as line 2
        "What is 9 - 1?,8,extra,cell\n"  # line 9: four values for three columns
    )
    output = _seeds(tmp_path)
    report = import_seeds(source, NUMERIC, output)

    assert (report.rows, report.written, report.rejected_rows) == (7, 3, 4)
    located = {problem.line: problem.problem for problem in report.problems}
    assert sorted(located) == [5, 7, 8, 9]
    assert located[5].code == "empty_cell" and "'question'" in located[5].message
    assert (
        located[7].code == "bad_answer" and "'two'" in located[7].message and "correct the 'answer'" in located[7].fix
    )
    assert located[8].code == "duplicate_task_id" and f"{source}:2" in located[8].message
    assert located[9].code == "unreadable_row" and "4 values for the header's 3 columns" in located[9].message
    assert all(str(problem).startswith(f"{source}:") for problem in report.problems)

    # The written file is a seed file `seeds validate` accepts, each seed keeping its file and line.
    seeds = load_seeds([output.parent])
    assert seeds.problems == []
    assert [task["verifier"]["params"] for task in seeds.tasks] == [{"answer": 5}, {"answer": 15}, {"answer": 2.5}]
    assert [task["tags"] for task in seeds.tasks] == [["source:qa.csv:2"], ["source:qa.csv:3"], ["source:qa.csv:6"]]
    assert seeds.tasks[1]["prompt"] == [
        {"role": "user", "content": "A farmer has 12 cows\nand buys 3 more. How many?"}
    ]


def test_gsm8k_jsonl_imports_with_its_worked_solutions_as_references(tmp_path: Path) -> None:
    source = tmp_path / "gsm8k.jsonl"
    source.write_text("".join((GSM8K / "test.jsonl").read_text().splitlines(keepends=True)[:20]))
    spec = ImportSpec(
        family="arithmetic",
        prompt="{question}",
        answer="answer",
        verifier="numeric_answer",
        system="Solve the problem. End with the final answer on its own line as '#### <number>'.",
        tags=("gsm8k",),
        source="gsm8k/test",
    )
    report = import_seeds(source, spec, _seeds(tmp_path))
    assert (report.written, report.problems) == (20, [])
    first = _written(report.output)[0]
    assert first["verifier"] == {"name": "numeric_answer", "params": {"answer": 18}}
    assert first["reference"].endswith("#### 18") and first["prompt"][0]["role"] == "system"
    assert first["tags"] == ["gsm8k", "source:gsm8k/test:1"]
    assert len(load_seeds([report.output.parent]).tasks) == 20


def test_a_parquet_file_and_a_saved_datasets_folder_import_by_row(tmp_path: Path) -> None:
    import datasets

    rows = {"q": ["Capital of France?", "Capital of Peru?", "Capital of Chad?"], "a": ["Paris", "Lima", ""]}
    spec = ImportSpec(family="geo", prompt="Answer in one word. {q}", answer="a", verifier="text_answer")
    parquet = tmp_path / "geo.parquet"
    pq.write_table(pa.table(rows), parquet)
    report = import_seeds(parquet, spec, _seeds(tmp_path, "geo"))
    assert (report.written, [(p.line, p.problem.code) for p in report.problems]) == (2, [(3, "bad_answer")])
    assert _written(report.output)[1]["verifier"]["params"] == {"answers": ["Lima"]}

    folder = tmp_path / "saved"
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict(rows), "test": datasets.Dataset.from_dict(rows)}
    ).save_to_disk(str(folder))
    with pytest.raises(SeedImportError, match=r"splits test, train; pick one with --split"):
        import_seeds(folder, spec, _seeds(tmp_path, "geo"))
    report = import_seeds(folder, spec, tmp_path / "seeds" / "geo" / "saved.jsonl", split="test")
    assert report.written == 0 and {p.problem.code for p in report.problems} == {"bad_answer", "duplicate_task_id"}
    assert "geo/imported.jsonl:1" in str(report.problems[0])  # the same seeds are already in the folder


def test_a_reference_that_fails_its_own_verifier_is_left_out(tmp_path: Path) -> None:
    source = tmp_path / "qa.jsonl"
    source.write_text(
        json.dumps({"question": "2 + 2?", "gold": 4, "solution": "2 + 2 = 4\n#### 4"})
        + "\n"
        + json.dumps({"question": "3 + 3?", "gold": 6, "solution": "3 + 3 = 7\n#### 7"})
        + "\n"
    )
    spec = ImportSpec(
        family="arithmetic", prompt="{question}", answer="gold", reference="solution", verifier="numeric_answer"
    )
    report = import_seeds(source, spec, _seeds(tmp_path))
    assert report.written == 1
    [problem] = report.problems
    assert (problem.line, problem.problem.code) == (2, "reference_failed")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"prompt": "{question} {unit}"}, r"no column 'unit'; its columns are question, answer"),
        ({"prompt": "{question.upper}"}, r"not a plain column name"),
        ({"verifier": "sql_result"}, r"sql_result takes no single answer; give its params with --param-from"),
        ({"verifier": "no_such"}, r"--verifier: .*no_such.*registered: "),
        ({"answer": None}, r"a seed needs a reference"),
        ({"family": "sql"}, r"family 'sql' goes in .*seeds/sql/imported.jsonl"),
    ],
)
def test_an_import_that_cannot_start_says_why_and_writes_nothing(tmp_path: Path, change: dict, message: str) -> None:
    source = tmp_path / "qa.csv"
    source.write_text("question,answer\nWhat is 2 + 3?,5\n")
    with pytest.raises(SeedImportError, match=message):
        import_seeds(source, ImportSpec(**{**NUMERIC.__dict__, **change}), _seeds(tmp_path))
    assert not (tmp_path / "seeds").exists()


def test_a_source_that_is_not_utf8_is_one_line_naming_its_line(tmp_path: Path) -> None:
    source = tmp_path / "qa.csv"
    source.write_bytes(b"question,answer\nWhat is caf\xe9 + 1?,2\n")
    with pytest.raises(SeedImportError, match=r"qa.csv:2: not UTF-8 text .* save the file as UTF-8"):
        import_seeds(source, NUMERIC, _seeds(tmp_path))


def test_template_fields_reads_plain_columns_only() -> None:
    assert template_fields("{a} and {b} then {a} {{literal}}") == ["a", "b"]
    for bad in ("{a!r}", "{a:>10}", "{a[0]}", "{}", "{a"):
        with pytest.raises(SeedImportError):
            template_fields(bad)


def test_the_command_writes_lists_the_rows_left_out_and_exits_1(tmp_path: Path) -> None:
    source = tmp_path / "qa.csv"
    source.write_text("question,answer\nWhat is 2 + 3?,5\nWhat is 1 + 1?,two\n")
    output, rejects = _seeds(tmp_path), tmp_path / "rejects.jsonl"
    args = ["seeds", "import", str(source), "--family", "arithmetic", "--prompt", "{question}", "--answer", "answer"]
    args += ["--verifier", "numeric_answer", "--param", "rel_tol=0.01", "--tag", "mine", "-o", str(output)]
    result = CliRunner().invoke(main, [*args, "--rejects", str(rejects)])
    assert result.exit_code == 1, result.output
    assert f"{source}:3: no single final number in the answer 'two'" in result.stdout
    assert f"2 rows: wrote 1 seeds to {output}; 1 rows not converted" in result.stderr
    assert _written(output)[0]["verifier"]["params"] == {"answer": 5, "rel_tol": 0.01}
    assert [json.loads(line)["origin"] for line in rejects.read_text().splitlines()] == [f"{source}:3"]

    bad = CliRunner().invoke(main, [*args[:-2], "--param", "rel_tol"])
    assert bad.exit_code == 2 and "--param 'rel_tol': write it as KEY=VALUE" in bad.output
    missing = CliRunner().invoke(main, ["seeds", "import", str(tmp_path / "nope.csv"), *args[3:]])
    assert missing.exit_code == 2 and "nope.csv: no such file or folder" in missing.output
    assert "Traceback" not in missing.output


def test_data_files_among_the_seeds_are_reported_with_the_import_command(tmp_path: Path) -> None:
    family = tmp_path / "unit_conversion"
    family.mkdir()
    (family / "qa.csv").write_text("question,answer\nGrams in 1.25 kg?,1250\n")
    (family / "qa.jsonl").write_text(json.dumps({"question": "Grams in 2 kg?", "answer": 2000}) + "\n")
    seeds = load_seeds([tmp_path])
    assert [(Path(p.path).name, p.line, p.problem.code) for p in seeds.problems] == [
        ("qa.csv", 1, "data_file"),
        ("qa.jsonl", 1, "not_a_seed"),
    ]
    assert all("seedwheel seeds import qa." in p.problem.fix for p in seeds.problems)
    assert "its fields: question, answer" in seeds.problems[1].problem.message
