"""Failure logs in: the inbox sensor, `seedwheel failures ingest`, redaction before storage, tasks and review items."""

import json
import shutil
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
from click.testing import CliRunner

from assets.failures import LOG_ASSETS as LOG_OUTPUTS
from core.signals import dispositions_kept
from core.tables import read_table, records_from_frame
from failures import process_failure_log
from pipeline.cli import main
from pipeline.definitions import build_definitions
from pipeline.instance import open_instance
from pipeline.runs import materialize
from pipeline.settings import Settings
from tests.paths import REPO
from validators.registry import VerifyContext
from validators.tasks import TASK_FIELDS, task_problems

EXAMPLE = REPO / "examples" / "failure_log.jsonl"
LOG_ASSETS = " or ".join(f"key:{key}" for key in LOG_OUTPUTS)
PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj"
# One value per redaction rule (failures/redaction.py); none may reach a stored asset, the run log,
# metadata or the CLI's output. Names are left out: they are redacted only by a NameDetector, which the pipeline
# does not configure (docs/failures.md: names are kept by default).
PLANTED = {
    "private_key": PEM_BODY,
    "url_credentials": "Sup3r-Pw-for-db",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "anthropic_key": "sk-ant-api03-Xy7Kp2Lm9Qr4St6Uv8Wx0Yz1Ab3Cd5Ef7Gh",
    "openai_key": "sk-proj-Q7wErTyUiOpAsDfGhJkLzXcVbNm1234567890ab",
    "aws_access_key_id": "AKIAZ7Q3EXAMPLEKEY12",
    "github_token": "ghp_Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa1234",
    "slack_token": "xoxb-2048-4096-Ab1Cd2Ef3Gh4",
    "google_api_key": "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    "stripe_key": "sk_test_Zq8Xw2Lk5Mn7Pb3Rc9Td",
    "bearer_token": "Tk9mPq2Rs5Uv8Wx1",
    "aws_secret_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "secret_assignment": "hunter2-Correct-Horse",
    "sensitive_key": "tangerine-velvet-otter",  # plain words: only its key (`api_token`) marks it
    "email": "grace.hopper@example.org",
    "credit_card": "4242 4242 4242 4242",
    "credit_card_int": "4111111111111111",  # a JSON number
    "ipv6": "2001:db8:85a3::8a2e:370:7334",
    "ipv4": "198.51.100.23",
    "phone_international": "+44 20 7946 0958",
    "phone_us": "(202) 555-0143",
    "phone_local": "867-5309",
    "high_entropy": "Zx8Kq2Lm9Vb4Nc7Hd1Jf",
}
PLANTED_TEXT = (
    f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----\n"
    f"db postgres://app:{PLANTED['url_credentials']}@db.internal/x, token {PLANTED['jwt']}, "
    f"keys {PLANTED['anthropic_key']} {PLANTED['openai_key']} {PLANTED['aws_access_key_id']} "
    f"{PLANTED['github_token']} {PLANTED['slack_token']} {PLANTED['google_api_key']} {PLANTED['stripe_key']}; "
    f"sent Bearer {PLANTED['bearer_token']}; aws secret key: {PLANTED['aws_secret_key']}; "
    f"password={PLANTED['secret_assignment']}. I am {PLANTED['email']}, card {PLANTED['credit_card']}, "
    f"from {PLANTED['ipv6']} and {PLANTED['ipv4']}, phone {PLANTED['phone_international']} or "
    f"{PLANTED['phone_us']}, call me at {PLANTED['phone_local']}, session {PLANTED['high_entropy']}."
)


def ingest(settings, *files: Path):
    env = settings.environ()
    return CliRunner().invoke(main, ["failures", "ingest", *map(str, files)], env=env, catch_exceptions=False)


def planted_log(path: Path) -> Path:
    """A failure log with every planted value in records of each format and in two rejected lines."""
    arguments = {"api_token": PLANTED["sensitive_key"], "card": int(PLANTED["credit_card_int"])}
    lines = [
        {
            "messages": [{"role": "user", "content": PLANTED_TEXT}],
            "output": {"text": PLANTED_TEXT, "tool_calls": [{"name": "pay", "arguments": arguments}]},
            "error": PLANTED_TEXT,
            "expected": {"answer": 3},
        },
        {
            "request": {"model": "m", "messages": [{"role": "user", "content": PLANTED_TEXT}]},
            "response": {"id": "r1", "choices": [{"message": {"role": "assistant", "content": PLANTED_TEXT}}]},
        },
        "{not json " + PLANTED_TEXT.replace("\n", " "),  # rejected: its preview is stored, redacted
        {"messages": [{"role": PLANTED["email"], "content": "hi"}]},  # rejected: its reason quotes the role
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def planted_values_in(data: bytes | str) -> list[str]:
    text = data if isinstance(data, str) else data.decode("latin-1")  # every byte as one character
    return [kind for kind, value in PLANTED.items() if value in text]


def kept_files(settings) -> list[Path]:
    """Every file under the storage root, the Dagster home, the inbox and every `<home>*` folder beside the root."""
    roots = {settings.home, settings.dagster_home, Path(settings.failure_inbox)}
    roots |= set(settings.home.parent.glob(f"{settings.home.name}*"))
    return sorted({path for root in roots for path in root.rglob("*") if path.is_file()})


def assert_no_planted_value_kept(settings) -> None:
    """No planted value in any kept file, as bytes or, for Parquet (whose pages may be compressed), per column."""
    for path in kept_files(settings):
        assert not planted_values_in(path.read_bytes()), path
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            for column in table.column_names:
                found = planted_values_in(json.dumps(table[column].to_pylist(), default=str, ensure_ascii=False))
                assert not found, f"{found} in {path} column {column}"


def test_ingest_redacts_stores_per_file_and_keeps_bad_lines_with_their_number(settings):
    result = ingest(settings, EXAMPLE)
    assert result.exit_code == 0, result.output
    assert "failure_log.jsonl: 10 interactions, 10 failures, 1 rejected lines" in result.output
    logs = read_table(settings.home / "failure_logs" / "failure_log.jsonl.parquet")
    rejects = read_table(settings.home / "failure_rejects" / "failure_log.jsonl.parquet")
    assert len(logs) == 10 and logs["failure_id"].is_unique
    assert rejects["line"].tolist() == [int(rejects["line"].iloc[0])] and rejects["reason"].iloc[0]
    assert "ann.lee@example.com" not in logs.to_json()  # the example's own PII is gone before storage

    summary = materialize(settings, "group:failures")
    assert summary.success, summary.failures
    tasks = records_from_frame(read_table(settings.home / "failure_tasks.parquet"))
    review = read_table(settings.home / "review_queue.parquet")
    assert len(tasks) + len(review) == len(logs)
    assert tasks and len(review)
    context = VerifyContext(seeds_dir=settings.seeds_dir)
    for task in tasks:
        assert task["lineage"]["source"] == "production_failure" and task["lineage"]["failure_id"]
        assert task_problems({k: task[k] for k in TASK_FIELDS}, context) == [], task["task_id"]
    assert all(stub.startswith("#") or "TODO" in stub for stub in review["seed_stub"])


def test_a_log_whose_every_line_is_rejected_fails_and_says_where_and_why(settings, tmp_path):
    log = tmp_path / "broken.jsonl"
    log.write_text('{"messages": "not a list"}\n{not json\n')
    result = ingest(settings, log)
    assert result.exit_code == 1, result.output
    assert "broken.jsonl: 0 interactions, 0 failures, 2 rejected lines" in result.output
    assert f"{log}:1: " in result.output and f"{log}:2: " in result.output
    table = settings.home / "failure_rejects" / "broken.jsonl.parquet"
    assert f"every rejected line, with its reason: {table}" in result.output
    assert f"no line of {log} could be read" in result.output


def test_the_planted_log_fires_every_rule(tmp_path):
    # Else the scan below could pass because a value was never a secret to the redactor.
    batch = process_failure_log(planted_log(tmp_path / "planted.jsonl"))
    assert set(batch.redaction.rules) == set(PLANTED) - {"credit_card_int"}  # its rule is credit_card
    assert [r.reason_code for r in batch.rejects] == ["invalid_json", "bad_value"]


def test_no_planted_value_is_kept_anywhere_by_ingest_or_the_inbox(settings, tmp_path, capfd):
    """Ingest a log, drop another into the inbox, materialize everything: no planted value in any kept file."""
    user_log = planted_log(tmp_path / "user" / "planted.jsonl")  # the user's own file, outside the project
    original = user_log.read_bytes()
    result = ingest(settings, user_log)
    assert result.exit_code == 0, result.output
    assert "planted.jsonl: 2 interactions, 2 failures, 2 rejected lines" in result.output
    assert f"{user_log}:4: " in result.output  # the rejected lines, their (redacted) reasons printed too
    assert user_log.read_bytes() == original  # read in place, left as it was
    inbox = Path(settings.failure_inbox)
    assert not inbox.exists() or not any(inbox.iterdir())  # ingest copies nothing into the inbox

    inbox.mkdir(parents=True, exist_ok=True)
    shutil.copy(user_log, inbox / "dropped.jsonl")  # a log that arrives as the sensor sees them
    dropped = materialize(settings, LOG_ASSETS, partition="dropped.jsonl")
    assert dropped.success, dropped.failures
    assert not (inbox / "dropped.jsonl").exists()  # the raw log is deleted once its records are stored
    assert len(read_table(settings.home / "failure_rejects" / "dropped.jsonl.parquet")) == 2
    assert materialize(settings, "group:failures").success

    assert {p.suffix for p in kept_files(settings)} >= {".parquet", ".db"}
    assert_no_planted_value_kept(settings)
    printed = capfd.readouterr()
    assert not planted_values_in(result.output + printed.out + printed.err)  # CLI output and run logs


def test_the_sensor_adds_each_new_or_changed_file_once(settings):
    inbox = Path(settings.failure_inbox)
    inbox.mkdir(parents=True)
    (inbox / "a.jsonl").write_text(EXAMPLE.read_text())
    (inbox / "b.jsonl").write_text(EXAMPLE.read_text().splitlines()[0] + "\n")
    (inbox / "notes.txt").write_text("not a log")
    definitions = build_definitions(settings)
    sensor = definitions.resolve_sensor_def("failure_inbox")
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED  # the quickstart: switched on in the UI
    with open_instance(settings) as instance:

        def tick(cursor: str | None) -> dg.SensorResult:
            inbox_resource = definitions.resources["inbox"]
            context = dg.build_sensor_context(instance=instance, cursor=cursor, resources={"inbox": inbox_resource})
            with dispositions_kept(), context as ctx:  # a tick rewrites the stop signals' handlers
                return sensor(ctx)

        first = tick(None)
        assert [r.partition_key for r in first.run_requests] == ["a.jsonl", "b.jsonl"]
        assert len({r.run_key for r in first.run_requests}) == 2
        [added] = first.dynamic_partitions_requests
        assert added.partition_keys == ["a.jsonl", "b.jsonl"]
        instance.add_dynamic_partitions("failure_files", added.partition_keys)
        # An overlapping or repeated tick with the same cursor asks for the same runs: the run keys dedupe them.
        assert [r.run_key for r in tick(None).run_requests] == [r.run_key for r in first.run_requests]
        assert tick(first.cursor).run_requests == []  # nothing new
        with open(inbox / "b.jsonl", "a") as handle:  # b grows: one new run, no new partition
            handle.write(EXAMPLE.read_text().splitlines()[1] + "\n")
        changed = tick(first.cursor)
        assert [r.partition_key for r in changed.run_requests] == ["b.jsonl"]
        assert changed.run_requests[0].run_key != first.run_requests[1].run_key
        assert changed.dynamic_partitions_requests[0].partition_keys == []


def drop(settings, name: str = "a.jsonl", text: str | None = None) -> Path:
    """A log arriving in the inbox as the sensor sees them."""
    inbox = Path(settings.failure_inbox)
    inbox.mkdir(parents=True, exist_ok=True)
    (inbox / name).write_text(EXAMPLE.read_text() if text is None else text)
    return inbox / name


def test_a_log_taken_out_of_the_inbox_is_not_requested_again(settings):
    log = drop(settings)
    definitions = build_definitions(settings)
    sensor = definitions.resolve_sensor_def("failure_inbox")
    with open_instance(settings) as instance:

        def tick(cursor: str | None) -> dg.SensorResult:
            context = dg.build_sensor_context(instance=instance, cursor=cursor, resources=definitions.resources)
            with dispositions_kept(), context as ctx:  # a tick rewrites the stop signals' handlers
                return sensor(ctx)

        first = tick(None)
        assert [r.partition_key for r in first.run_requests] == ["a.jsonl"]
        summary = materialize(settings, LOG_ASSETS, partition="a.jsonl")
        assert summary.success, summary.failures
        assert not log.exists()
        after = tick(first.cursor)
        assert after.run_requests == [] and json.loads(after.cursor) == {}  # the cursor forgets what left
        drop(settings, text=EXAMPLE.read_text().splitlines()[0] + "\n")  # a new log under the same name
        assert [r.partition_key for r in tick(after.cursor).run_requests] == ["a.jsonl"]


def test_a_quarantine_receives_the_raw_log_outside_the_project(settings, tmp_path):
    quarantine = tmp_path / "quarantine"
    settings = Settings.from_env(
        {"SEEDWHEEL_FAILURE_QUARANTINE": str(quarantine)},
        home=settings.home,
        seeds_dir=settings.seeds_dir,
        dagster_home=settings.dagster_home,
        models_dir=settings.models_dir,
    )
    log = drop(settings)
    summary = materialize(settings, LOG_ASSETS, partition="a.jsonl")
    assert summary.success, summary.failures
    assert not log.exists()
    assert (quarantine / summary.run_id / "a.jsonl").read_text() == EXAMPLE.read_text()  # as it arrived


def test_a_rerun_after_the_raw_log_left_fails_with_the_fix_and_keeps_the_records(settings):
    drop(settings)
    assert materialize(settings, LOG_ASSETS, partition="a.jsonl").success
    stored = read_table(settings.home / "failure_logs" / "a.jsonl.parquet")
    rerun = materialize(settings, LOG_ASSETS, partition="a.jsonl")
    assert not rerun.success
    [failure] = rerun.failures
    assert "a.jsonl is not in the inbox" in failure and "its failure_logs partition already holds them" in failure
    assert read_table(settings.home / "failure_logs" / "a.jsonl.parquet").equals(stored)


def test_the_raw_log_stays_until_every_table_is_stored_and_the_rerun_resumes(settings):
    log = drop(settings)
    blocker = settings.home / "failure_rejects" / "a.jsonl.parquet" / "x"  # the second table cannot be written
    blocker.parent.mkdir(parents=True)
    blocker.write_text("")
    failed = materialize(settings, LOG_ASSETS, partition="a.jsonl")
    assert not failed.success
    assert (settings.home / "failure_logs" / "a.jsonl.parquet").exists()  # the first table was stored
    assert log.read_text() == EXAMPLE.read_text()  # but the raw log stays for the rerun
    shutil.rmtree(blocker.parent)
    rerun = materialize(settings, LOG_ASSETS, partition="a.jsonl")
    assert rerun.success, rerun.failures
    assert not log.exists()


def test_ingesting_a_log_already_in_the_inbox_takes_it_out_as_the_sensor_would(settings):
    log = drop(settings)
    result = ingest(settings, log)
    assert result.exit_code == 0, result.output
    assert "a.jsonl: 10 interactions, 10 failures" in result.output
    assert not log.exists()


def traffic_line(i: int, model: str, outcome: str, night: int) -> str:
    return json.dumps(
        {
            "messages": [{"role": "user", "content": f"What is {i} + {i}?"}],
            "output": str(2 * i if outcome == "passed" else i),
            "model": model,
            "outcome": outcome,
            "timestamp": f"2026-12-0{night}T02:00:00Z",
            "expected": {"answer": 2 * i},
        }
    )


def test_a_traffic_log_is_counted_per_model_and_only_its_failures_become_tasks(settings, tmp_path):
    nights = {
        "night1.jsonl": [traffic_line(i, "v1", "failed" if i < 6 else "passed", 1) for i in range(10)],
        "night2.jsonl": [traffic_line(i, "v2", "failed" if i < 12 else "passed", 2) for i in range(10, 20)]
        + [traffic_line(99, "v2", "unknown", 2)],
    }
    for name, text in nights.items():
        (tmp_path / name).write_text("\n".join(text) + "\n")
        result = ingest(settings, tmp_path / name)
        assert result.exit_code == 0, result.output
    assert "night2.jsonl: 11 interactions, 2 failures" in result.output
    assert len(read_table(settings.home / "failure_logs" / "night1.jsonl.parquet")) == 6

    summary = materialize(settings, "group:failures")
    assert summary.success, summary.failures
    rates = read_table(settings.home / "failure_rates.parquet")
    overall = rates[rates["family"] == "all"].set_index(["night", "model"])
    assert overall.loc[(1, "v1"), "failure_rate"] == 0.6 and overall.loc[(2, "v2"), "failure_rate"] == 0.2
    assert overall.loc[(2, "v2"), "unknown"] == 1
    assert len(read_table(settings.home / "failure_tasks.parquet")) == 8  # the failures only
    metadata = next(a.metadata for a in summary.assets if a.key == "failure_rates")
    assert metadata["nights"] == 2 and metadata["v2/failure_rate"] == 0.2
    assert metadata["failure_rate_plot"].startswith("![failure rate per night")
    assert "0.60 [0.31, 0.83]" in metadata["per_night"]  # 6 of 10, with its Wilson interval

    # A log stored before traffic rows were kept has none: the rates are counted from the others.
    (settings.home / "production_traffic" / "night1.jsonl.parquet").unlink()
    summary = materialize(settings, "failure_rates")
    assert summary.success, summary.failures
    assert set(read_table(settings.home / "failure_rates.parquet")["model"]) == {"v2"}
