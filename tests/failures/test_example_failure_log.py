"""The bundled example log (examples/failure_log.jsonl) end to end: counts, formats, redaction, no leaks."""

import collections
import dataclasses
import json
import random

from failures import FORMATS, process_failure_log
from tests.paths import REPO, SEEDS
from validators.registry import VerifyContext

EXAMPLE = REPO / "examples" / "failure_log.jsonl"
# Every fake secret and piece of PII planted in the example; none may survive.
PLANTED = [
    "ann.lee@example.com",
    "(202) 555-0143",
    "4111 1111 1111 1111",
    "+44 20 7946 0958",
    "sk-proj-EXAMPLEonly0a1b2c3d4e5f6g7h8i9j0k",
    "192.0.2.44",
    "AKIAIOSFODNN7EXAMPLE",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "2001:db8::8a2e:370:7334",
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9",
    "EXAMPLEtoken0123456789abcdef",
    "correct-horse-42",
    "S3cretPassw0rd",
    "ghp_EXAMPLE0123456789abcdefghijklmnopqrstu",
    "xoxb-000000000000-EXAMPLE-TOKEN",
    "rk_live_EXAMPLE00000000000000",
    "AIzaSyEXAMPLE-0123456789abcdefghijklmno",
    "8fK2pQ9xL3mN7vB1cR5tY0wZ",
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
    "sk-ant-api03-EXAMPLE0a1B2c3D4e5F6g7H8i9J0kLmNoPq",
    "internal-refund-key-0042",
    "ops@example.org",
]
NATIVE_FIELDS = {
    "failure_id",
    "timestamp",
    "source",
    "family",
    "messages",
    "tools",
    "output",
    "tool_results",
    "error",
    "user_correction",
    "expected",
    "tags",
}


def test_example_exercises_every_field_and_both_transcript_shapes():
    text = EXAMPLE.read_text(encoding="utf-8")
    lines, malformed = [], 0
    for line in text.splitlines():
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            malformed += 1
    assert malformed == 1  # the example's one planted malformed line, no more
    used = set().union(*(line.keys() for line in lines))
    assert used >= NATIVE_FIELDS | {"request", "response"}
    expected_fields = set().union(*(line.get("expected", {}).keys() for line in lines))
    assert expected_fields >= {"answer", "tool_call", "output_schema", "output", "sql", "database", "rows", "tests"}
    assert all(value in text for value in PLANTED)


def test_example_counts():
    batch = process_failure_log(EXAMPLE, context=VerifyContext(seeds_dir=SEEDS))
    assert batch.summary() == {
        "records": 10,
        "rejects": 1,
        "tasks": 8,
        "review": 2,
        "redacted": {"EMAIL": 2, "PHONE": 2, "CREDIT_CARD": 1, "IP": 2, "API_KEY": 9, "SECRET": 6},
    }
    formats = collections.Counter(record["format"] for record in batch.records)
    assert set(formats) == set(FORMATS)
    assert formats == {"failure_log": 7, "chat_completion": 2, "chat_messages": 1}
    assert [(r.line, r.reason_code) for r in batch.rejects] == [(9, "invalid_json")]
    verifiers = collections.Counter(task["verifier"]["name"] for task in batch.tasks)
    assert verifiers == {
        **{"numeric_answer": 2, "tool_call": 2, "json_schema": 1, "sql_result": 1, "python_tests": 1},
        "text_answer": 1,
    }
    assert [(item["origin"], item["reason_code"]) for item in batch.review] == [
        ("failure_log.jsonl:4", "no_expected"),
        ("failure_log.jsonl:11", "no_expected"),
    ]
    assert batch.redaction.rules == {
        "anthropic_key": 1,
        "aws_access_key_id": 1,
        "aws_secret_key": 1,
        "bearer_token": 1,
        "credit_card": 1,
        "email": 2,
        "github_token": 1,
        "google_api_key": 1,
        "high_entropy": 1,
        "ipv4": 1,
        "ipv6": 1,
        "jwt": 1,
        "openai_key": 1,
        "phone_international": 1,
        "phone_us": 1,
        "private_key": 1,
        "secret_assignment": 1,
        "sensitive_key": 1,
        "slack_token": 1,
        "stripe_key": 1,
        "url_credentials": 1,
    }


def test_example_output_holds_no_planted_value():
    batch = process_failure_log(EXAMPLE, context=VerifyContext(seeds_dir=SEEDS))
    rejects = [dataclasses.asdict(reject) for reject in batch.rejects]
    dumped = json.dumps([batch.records, batch.tasks, batch.review, rejects], ensure_ascii=False)
    leaked = [value for value in PLANTED if value in dumped]
    assert leaked == []
    # Names are kept without a name detector (none runs offline here): the one planted name survives.
    assert "Ann Lee" in dumped


def test_mutated_example_lines_never_crash():
    # Byte flips, truncations, insertions and splices of the example's lines: each must become a record, a
    # task, a review item or a reject, never an exception. The python line is left out (it runs the sandbox).
    lines = [line for line in EXAMPLE.read_bytes().splitlines() if b"is_valid_sku" not in line]
    rng = random.Random(8)
    for _ in range(300):
        data = bytearray(rng.choice(lines))
        cut = rng.randrange(len(data))
        mutation = rng.randrange(4)
        if mutation == 0:
            data[cut] = rng.randrange(256)
        elif mutation == 1:
            del data[cut:]
        elif mutation == 2:
            data[cut:cut] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
        else:
            data[cut:cut] = data[: rng.randrange(len(data))]
        batch = process_failure_log([bytes(data)], context=VerifyContext(seeds_dir=SEEDS))
        blank = not bytes(data).decode("utf-8", "replace").strip()  # a blank line is skipped, like in a file
        assert len(batch.rejects) + len(batch.tasks) + len(batch.review) == (0 if blank else 1)
