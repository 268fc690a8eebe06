"""The `seedwheel` command line, driven as a user drives it."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

from core.signals import dispositions_kept
from core.tables import read_table
from pipeline.cli import main
from tests.paths import REPO, SEEDS


def test_seeds_validate_passes_on_the_bundled_seeds():
    result = CliRunner().invoke(main, ["seeds", "validate", str(SEEDS)])
    assert result.exit_code == 0, result.output
    assert "0 problems" in result.output


def test_seeds_validate_reports_each_problem_and_exits_1(tmp_path, monkeypatch):
    folder = tmp_path / "arithmetic"
    folder.mkdir()
    good = {"prompt": "1 + 1?", "verifier": {"name": "numeric_answer", "params": {"answer": 2}}, "reference": "#### 2"}
    (folder / "bad.jsonl").write_text(json.dumps(good) + "\n{not json}\n" + json.dumps({"prompt": "x"}) + "\n")
    monkeypatch.chdir(tmp_path)  # paths are shown relative to the working directory
    result = CliRunner().invoke(main, ["seeds", "validate", "arithmetic"])
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "arithmetic/bad.jsonl:2: invalid JSON: Expecting property name enclosed in double quotes at column 2 (/)"
        " - fix the JSON syntax; a .jsonl file holds one complete JSON object per line",
        "arithmetic/bad.jsonl:3: missing field 'verifier' (/verifier) - add the field",
        "arithmetic/bad.jsonl:3: no reference: without a known-good completion, nothing shows that the verifier"
        " can be passed (/reference) - add `reference`: an answer that passes this seed's verifier, as the model"
        " should write it",
    ]
    assert "1 files, 1 valid seeds, 3 problems" in result.stderr


def test_seeds_validate_missing_path_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(main, ["seeds", "validate", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "no such seed file or folder" in result.output


@pytest.mark.slow
def test_run_materializes_and_records_the_run(tmp_path):
    home, dagster_home = tmp_path / "home", tmp_path / "dagster"
    env = {**os.environ, "SEEDWHEEL_HOME": str(home), "DAGSTER_HOME": str(dagster_home), "SEEDWHEEL_SEEDS": str(SEEDS)}
    seedwheel = Path(sys.executable).with_name("seedwheel")
    result = subprocess.run(
        # The seeds group only: the whole graph is the integration test's job.
        [seedwheel, "run", "--profile", "quickstart", "--select", "group:seeds"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "succeeded" in result.stdout
    tasks = read_table(home / "seed_tasks.parquet")
    assert re.search(rf"^seed_tasks +{len(tasks)} +{home}/seed_tasks.parquet$", result.stdout, re.M)  # the summary
    assert (home / "seed_rejects.parquet").exists()
    # The run is in the persistent instance, where the UI finds it.
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        [run] = instance.get_runs()
        assert run.is_success
        assert run.tags["seedwheel/profile"] == "quickstart"


@pytest.mark.parametrize(
    ("select", "message"),
    [
        ("no_such_asset", "matches no asset"),
        ("checkpoint_eval or promotion", "not a Dagster asset selection"),  # bare names need `key:` with `or`
    ],
)
def test_run_rejects_a_selection_it_cannot_use(settings, select, message):
    result = CliRunner().invoke(main, ["run", "--select", select, "--home", str(settings.home)])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--job", "nightly"], "no job 'nightly'; the jobs: flywheel_job, regeneration_job, training_job"),
        (["--job", "training_job", "--select", "promotion"], "--select 'promotion' and --job 'training_job'"),
        # On a new home: training reads the splits, which only the regeneration makes.
        (["--job", "training_job"], "train_tasks (read by difficulty_profile, episodes, grpo_checkpoint"),
    ],
)
def test_run_job_names_the_jobs_and_what_they_need(settings, args, message):
    result = CliRunner().invoke(main, ["run", *args, "--home", str(settings.home)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert message in result.output


def test_a_selection_that_reads_a_table_nobody_made_is_refused_before_it_runs(settings):
    # On a new home, the curation stages read failure_tasks, which only group:failures makes.
    select = "seed_tasks,task_variants,validated_tasks,deduplicated_tasks"
    result = CliRunner().invoke(main, ["run", "--select", select, "--home", str(settings.home)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "the selection reads failure_tasks (read by task_rejects, task_variants, validated_tasks" in result.output
    assert "make them first (seedwheel run --select group:failures;" in result.output
    assert not (settings.home / "seed_tasks.parquet").exists()  # nothing ran


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["seeds", "validate", "--help"], ["ui", "--help"]])
def test_help(args):
    assert CliRunner().invoke(main, args).exit_code == 0


def test_ui_execs_dagster_dev_on_its_home_with_the_stop_signals_at_their_defaults(tmp_path, monkeypatch):
    # The exec is the process boundary: what `dagster dev` would start with, recorded instead of run.
    started: dict[str, object] = {}
    monkeypatch.setattr(os, "execvpe", lambda file, args, env: started.update(args=args, env=env))
    with dispositions_kept():
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a shell's background job: `seedwheel ui --home DIR &`
        result = CliRunner().invoke(main, ["ui", "--port", "3999", "--home", str(tmp_path / "home")])
        handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert result.exit_code == 0, result.output
    assert started["args"][1:] == ["dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", "3999"]
    assert started["env"]["SEEDWHEEL_HOME"] == str(tmp_path / "home")
    # Inherited as they are: dagster dev copies SIGINT's handler onto SIGTERM, so an ignored SIGINT made `kill` moot.
    assert handlers == (signal.SIG_DFL, signal.SIG_DFL)


def test_workspace_points_at_the_definitions():
    assert "pipeline.definitions" in (REPO / "workspace.yaml").read_text()


@pytest.mark.slow
def test_verify_scores_the_example_completions_against_the_bundled_seeds(tmp_path):
    out = tmp_path / "verdicts.jsonl"
    examples = REPO / "examples" / "completions.jsonl"
    result = CliRunner().invoke(main, ["verify", str(SEEDS), str(examples), "-o", str(out)])
    assert result.exit_code == 0, result.output
    verdicts = [json.loads(line) for line in out.read_text().splitlines()]
    notes = [json.loads(line)["note"] for line in examples.read_text().splitlines()]
    assert len(verdicts) == len(notes)
    for verdict, note in zip(verdicts, notes, strict=True):
        # References pass; every hostile or wrong example fails, with a reason code.
        assert verdict["passed"] is (note in PASSING_NOTES), (note, verdict)
    assert "verifier" in result.stderr and "pass rate" in result.stderr


PASSING_NOTES = {
    "the reference answer",
    "free-form answer with a marker",
    "fenced JSON with prose around it",
    "an OpenAI-style tool_calls message",
}


def test_verify_names_the_line_of_a_bad_completion(tmp_path):
    completions = tmp_path / "c.jsonl"
    completions.write_text('{"task_id": "0000000000000000", "completion": "x"}\n')
    result = CliRunner().invoke(main, ["verify", str(SEEDS), str(completions)])
    assert result.exit_code == 1  # the rows that could be read are scored; the bad ones are listed
    assert f"{completions}:1: task_id 0000000000000000 is not in {SEEDS}" in result.output


def test_user_verifier_from_config_judges_seeds(tmp_path, monkeypatch):
    # A team's own verifier, registered by dotted path in SEEDWHEEL_VERIFIERS, without editing the package.
    (tmp_path / "team_verifiers.py").write_text(
        "from validators import Verdict, Verifier\n"
        "class Shout(Verifier):\n"
        "    name = 'shout'\n"
        "    params_schema = {'type': 'object', 'additionalProperties': False}\n"
        "    def check(self, params, completion, context):\n"
        "        return Verdict.ok() if completion.text.isupper() else Verdict.fail('not_shouting')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SEEDWHEEL_VERIFIERS", "team_verifiers:Shout")
    folder = tmp_path / "seeds" / "shouting"
    folder.mkdir(parents=True)
    (folder / "a.jsonl").write_text(json.dumps({"prompt": "Say hi", "verifier": {"name": "shout"}, "reference": "HI"}))
    result = CliRunner().invoke(main, ["seeds", "validate", str(folder)])
    assert result.exit_code == 0, result.output
    assert "1 valid seeds, 0 problems" in result.stderr


def test_dedup_labels_every_row_in_input_order(tmp_path):
    rows = [
        {"id": 0, "text": "Janet has 16 ducks and sells the eggs at the market every single morning."},
        {"id": 1, "text": "A train leaves Paris at noon and arrives in Lyon two hours later."},
        {"id": 2, "text": "janet has 16 ducks and sells the eggs at the market every single morning!"},  # exact
        {"id": 3, "text": "Janet has 16 ducks and she sells the eggs at the market every single morning."},  # near
    ]
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(main, ["dedup", str(source)])
    assert result.exit_code == 0, result.output
    labelled = [json.loads(line) for line in (tmp_path / "rows.dedup.jsonl").read_text().splitlines()]
    assert [(r["id"], r["is_duplicate"], r["duplicate_of"]) for r in labelled] == [
        (0, False, None),
        (1, False, None),
        (2, True, 0),
        (3, True, 0),
    ]
    assert "4 rows, 2 duplicates (1 exact, 1 near)" in result.stderr


def test_dedup_names_the_bad_line(tmp_path):
    source = tmp_path / "rows.jsonl"
    source.write_text('{"text": "fine"}\n{"body": "no text field"}\n')
    result = CliRunner().invoke(main, ["dedup", str(source)])
    assert result.exit_code == 2
    assert f"{source}:2" in result.output and "--text-field" in result.output
