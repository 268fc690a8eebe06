"""Failure logs in: the inbox sensor, `seedwheel failures ingest`, redaction before storage, tasks and review items."""

import json
from pathlib import Path

import dagster as dg
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.definitions import build_definitions
from pipeline.instance import open_instance
from pipeline.runs import materialize
from tests.paths import REPO
from validators.registry import VerifyContext
from validators.tables import read_table, records_from_frame
from validators.tasks import TASK_FIELDS, task_problems

EXAMPLE = REPO / "examples" / "failure_log.jsonl"
# One of each kind the redactor must remove; none may reach a stored asset, the run log or metadata.
PLANTED = {
    "email": "grace.hopper@example.org",
    "phone": "+1 (415) 555-0199",
    "card": "4242 4242 4242 4242",
    "ip": "198.51.100.23",
    "openai_key": "sk-proj-Q7wErTyUiOpAsDfGhJkLzXcVbNm1234567890ab",
    "aws_key": "AKIAZ7Q3EXAMPLEKEY12",
    "github_token": "ghp_Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa",
    "password": "hunter2-Correct-Horse",
}


def ingest(settings, *files: Path):
    env = settings.environ()
    return CliRunner().invoke(main, ["failures", "ingest", *map(str, files)], env=env, catch_exceptions=False)


def test_ingest_redacts_stores_per_file_and_keeps_bad_lines_with_their_number(settings):
    result = ingest(settings, EXAMPLE)
    assert result.exit_code == 0, result.output
    assert "failure_log.jsonl: 10 records, 1 rejected lines" in result.output
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


def test_no_planted_secret_reaches_storage_logs_or_metadata(settings, tmp_path):
    user = f"I am {PLANTED['email']}, call {PLANTED['phone']}. Card {PLANTED['card']} from {PLANTED['ip']}."
    config = f"key={PLANTED['openai_key']} aws={PLANTED['aws_key']} gh={PLANTED['github_token']}"
    lines = [
        {
            "messages": [{"role": "user", "content": user}],
            "output": f"Logged in with password={PLANTED['password']}",
            "error": config,
            "expected": {"answer": 3},
        },
        {
            "request": {"model": "m", "messages": [{"role": "user", "content": config}]},
            "response": {"id": "r1", "choices": [{"message": {"role": "assistant", "content": user}}]},
        },
        "{not json " + PLANTED["openai_key"],  # a bad line: its preview in the rejects is redacted too
    ]
    log = tmp_path / "planted.jsonl"
    log.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    result = ingest(settings, log)
    assert result.exit_code == 0
    assert not [kind for kind, value in PLANTED.items() if value in result.output]  # nor in what the CLI printed
    assert materialize(settings, "group:failures").success
    stored = [p for root in (settings.home, settings.dagster_home) for p in root.rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in stored)
    for path in stored:
        data = path.read_bytes()
        for kind, value in PLANTED.items():
            assert value.encode() not in data, f"{kind} found in {path}"


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
            with dg.build_sensor_context(instance=instance, cursor=cursor, resources={"inbox": inbox_resource}) as ctx:
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
