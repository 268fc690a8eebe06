"""Redaction: every planted secret vanishes, near-misses survive, the report never holds a value."""

import json
import random
import string

import pytest

from failures import (
    RedactionConfig,
    is_sensitive_key,
    looks_random,
    redact,
    redact_text,
)

JWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
PEM_RSA = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7EXAMPLE\nabc/def+ghi==\n-----END RSA PRIVATE KEY-----"

# (text with a planted value, the planted value, the placeholder it must become)
PLANTED = [
    # plain e-mail address
    ("write to ann.lee@example.com today", "ann.lee@example.com", "EMAIL"),
    # plus-tag and a multi-label domain
    ("cc first.last+billing@mail.example.co.uk", "first.last+billing@mail.example.co.uk", "EMAIL"),
    # US number with parentheses
    ("call (202) 555-0143 now", "(202) 555-0143", "PHONE"),
    # US number with dashes
    ("phone 202-555-0143", "202-555-0143", "PHONE"),
    # US number with dots
    ("tel. 202.555.0143", "202.555.0143", "PHONE"),
    # US number with the country code
    ("reach me at 1-202-555-0199", "1-202-555-0199", "PHONE"),
    # international, +1 with spaces
    ("mobile +1 415 555 0199", "+1 415 555 0199", "PHONE"),
    # international, UK
    ("office +44 20 7946 0958", "+44 20 7946 0958", "PHONE"),
    # international, France, pairs of digits
    ("bureau +33 1 23 45 67 89", "+33 1 23 45 67 89", "PHONE"),
    # international without separators
    ("whatsapp +4930901820", "+4930901820", "PHONE"),
    # 7-digit local number after a phone word
    ("call me at 555-0143 tonight", "555-0143", "PHONE"),
    # Visa test card in groups of four
    ("card 4111 1111 1111 1111 exp 12/28", "4111 1111 1111 1111", "CREDIT_CARD"),
    # the same with dashes
    ("card 4111-1111-1111-1111", "4111-1111-1111-1111", "CREDIT_CARD"),
    # the same contiguous
    ("pan=4111111111111111;", "4111111111111111", "CREDIT_CARD"),
    # Mastercard test number
    ("mc 5555 5555 5555 4444", "5555 5555 5555 4444", "CREDIT_CARD"),
    # Amex grouping 4-6-5
    ("amex 3782 822463 10005", "3782 822463 10005", "CREDIT_CARD"),
    # Discover test number
    ("discover 6011111111111117", "6011111111111117", "CREDIT_CARD"),
    # IPv4 documentation address
    ("host 192.0.2.44 is down", "192.0.2.44", "IP"),
    # IPv4 with a port
    ("GET http://198.51.100.7:8080/health", "198.51.100.7", "IP"),
    # IPv6, compressed
    ("from 2001:db8::8a2e:370:7334.", "2001:db8::8a2e:370:7334", "IP"),
    # IPv4-mapped IPv6
    ("peer ::ffff:192.0.2.1 reset", "::ffff:192.0.2.1", "IP"),
    # OpenAI legacy key
    (
        "key sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0U1v2W3x4",
        "sk-A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
        "API_KEY",
    ),
    # OpenAI project key
    (
        "OPENAI_API_KEY sk-proj-EXAMPLEonly0a1b2c3d4e5f6g7h8i9j0k",
        "sk-proj-EXAMPLEonly0a1b2c3d4e5f6g7h8i9j0k",
        "API_KEY",
    ),
    # Anthropic key
    (
        "x sk-ant-api03-EXAMPLE0a1B2c3D4e5F6g7H8i9J0kLmNoPq y",
        "sk-ant-api03-EXAMPLE0a1B2c3D4e5F6g7H8i9J0kLmNoPq",
        "API_KEY",
    ),
    # AWS access key id (AWS's documented example)
    ("id AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE", "API_KEY"),
    # AWS secret key after its name
    (
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "SECRET",
    ),
    # AWS secret key in prose
    (
        "the AWS secret key is wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "SECRET",
    ),
    # GitHub personal access token (classic)
    ("ghp_EXAMPLE0123456789abcdefghijklmnopqrstu", "ghp_EXAMPLE0123456789abcdefghijklmnopqrstu", "API_KEY"),
    # GitHub OAuth token
    ("gho_EXAMPLE0123456789abcdefghijklmnopqrstu", "gho_EXAMPLE0123456789abcdefghijklmnopqrstu", "API_KEY"),
    # GitHub fine-grained token
    ("github_pat_11EXAMPLE0123456789_abcdefghijklmnop", "github_pat_11EXAMPLE0123456789_abcdefghijklmnop", "API_KEY"),
    # Slack bot token
    ("slack xoxb-000000000000-EXAMPLE-TOKEN", "xoxb-000000000000-EXAMPLE-TOKEN", "API_KEY"),
    # Slack user token
    ("xoxp-1111-2222-EXAMPLE", "xoxp-1111-2222-EXAMPLE", "API_KEY"),
    # Google API key
    ("maps AIzaSyEXAMPLE-0123456789abcdefghijklmno", "AIzaSyEXAMPLE-0123456789abcdefghijklmno", "API_KEY"),
    # Stripe secret key
    ("stripe sk_live_EXAMPLE000000000000000", "sk_live_EXAMPLE000000000000000", "API_KEY"),
    # Stripe restricted key
    ("stripe rk_live_EXAMPLE000000000000000", "rk_live_EXAMPLE000000000000000", "API_KEY"),
    # JSON Web Token on its own
    (f"session={JWT}", JWT, "API_KEY"),
    # Bearer token in a header
    ("Authorization: Bearer EXAMPLEtoken0123456789abcdef", "EXAMPLEtoken0123456789abcdef", "API_KEY"),
    # HTTP basic credentials (base64 of user:password)
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA==", "API_KEY"),
    # RSA private key block
    (f"key:\n{PEM_RSA}\nend", "MIIEowIBAAKCAQEA7EXAMPLE", "SECRET"),
    # OpenSSH private key cut off by a log limit (no END line)
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA", "b3BlbnNzaC1rZXktdjEAAAA", "SECRET"),
    # password assignment
    ("login with password=hunter2! please", "hunter2!", "SECRET"),
    # api_key with a quoted value containing spaces
    ("api_key: 'abc def 123'", "abc def 123", "SECRET"),
    # JSON text inside a string
    ('{"client_secret": "s3cr3t-value"}', "s3cr3t-value", "SECRET"),
    # environment-style assignment with a prefix
    ("DB_PASSWORD=correct-horse-42", "correct-horse-42", "SECRET"),
    # header-style key with dashes
    ("X-Api-Key: abcd1234efgh", "abcd1234efgh", "SECRET"),
    # Authorization with the token scheme
    ("Authorization: token abc123def456", "abc123def456", "SECRET"),
    # credentials in a URL
    ("postgres://app_user:S3cretPassw0rd@db.example.com:5432/shop", "S3cretPassw0rd", "SECRET"),
    # random-looking session cookie
    ("my session cookie is 8fK2pQ9xL3mN7vB1cR5tY0wZ.", "8fK2pQ9xL3mN7vB1cR5tY0wZ", "SECRET"),
    # a long hex secret (32 hex digits)
    ("X-Session: 9f86d081884c7d659a2feaa0c55ad015", "9f86d081884c7d659a2feaa0c55ad015", "SECRET"),
    # a random token inside a URL path
    ("https://example.com/reset/Zx8Kq2Lm9Vb4Nc7Hd1Jf3Pq/confirm", "Zx8Kq2Lm9Vb4Nc7Hd1Jf3Pq", "SECRET"),
]


@pytest.mark.parametrize(("text", "planted", "kind"), PLANTED)
def test_planted_value_vanishes(text, planted, kind):
    redacted, report = redact_text(text)
    assert planted not in redacted
    assert f"[{kind}]" in redacted
    assert report.counts.get(kind, 0) >= 1


# Text that must come out unchanged.
NEAR_MISSES = [
    # an order number: digits alone are never a phone or a card
    "Order 1234567890 shipped",
    # an epoch timestamp in milliseconds (13 digits, no card-network prefix)
    "epoch 1700000000123",
    # a 16-digit number that fails the Luhn check
    "ref 4111 1111 1111 1112",
    # an ISO date and an ISO timestamp
    "on 2024-01-15 at 2025-03-14T09:26:53Z",
    # a clock time (not an IPv6 address)
    "at 09:26:53 UTC",
    # money and a percentage
    "total $1,234.56 (+12.5%)",
    # a long decimal
    "pi is 3.14159265358979",
    # a three-part version never looks like an address
    "upgrade to 1.2.3",
    # a four-part version marked as a version (decided: kept)
    "v1.2.3.4 and version 1.2.3.4 and requests==2.31.0.1 and pkg@1.2.3.4",
    # an ISBN
    "ISBN 978-3-16-148410-0",
    # a MAC address
    "MAC 00:1A:2B:3C:4D:5E",
    # loopback and link-local IPv6 (decided: kept)
    "bind ::1 or fe80::1",
    # short hex: a colour, a short commit, a 16-hex task id
    "#ff8800 a1b2c3d 5c4f6470173c47e1",
    # a UUID request id (decided: kept)
    "request 123e4567-e89b-12d3-a456-426614174000",
    # long ordinary words
    "supercalifragilisticexpialidocious internationalization",
    # CamelCase and snake_case identifiers with digits
    "Olmo3RotaryEmbedding take_2d_axis0_int8_float64",
    # model ids
    "gpt-4o-mini-2024-07-18 claude-3-5-sonnet-20241022",
    # a file path
    "failures/redaction.py",
    # Python code that mentions passwords and tokens
    "def login(user, password: str) -> bool:\n    token = get_token()\n    pw = os.environ['DB_PASSWORD']",
    # slicing and C++ scopes are not IPv6
    "a[::2] and std::vector<int>",
    # keyword arguments that are not secrets
    "generate(max_tokens=512, token_type='bearer')",
    # an assignment whose value is masked or a reference
    "password: ******** and api_key: ${API_KEY}",
    # "bearer" as a word
    "the bearer of this note; a Bearer token",
    # "sk-" that is not a key
    "task-manager and sk-learn",
    # SQL
    "SELECT COUNT(*) AS n FROM orders WHERE id = 42",
    # scores with a plus sign
    "score +5 and +12",
]


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_miss_survives(text):
    redacted, report = redact_text(text)
    assert redacted == text
    assert report.total == 0


def test_bare_dotted_quad_is_an_address():
    # Decided: a dotted quad with no version marker is redacted (a log cannot tell it from an address).
    assert redact_text("upgrade to 1.2.3.4 now")[0] == "upgrade to [IP] now"


def test_redacted_record_json_holds_no_planted_value():
    record = {
        "failure_id": "f1",
        "source": {"app": "shop", "user": "ann.lee@example.com"},
        "messages": [
            {"role": "user", "content": text}
            for text, _, _ in PLANTED[:20]  # the rest goes elsewhere in the record
        ],
        "output": {
            "text": PLANTED[20][0],
            "tool_calls": [{"name": "send", "arguments": {"body": PLANTED[21][0], "password": "hunter2"}}],
        },
        "tool_results": [text for text, _, _ in PLANTED[22:40]],
        "error": " | ".join(text for text, _, _ in PLANTED[40:]),
        "expected": {"tool_call": {"name": "send", "arguments": {"to": "bob@example.org"}}},
    }
    clean, report = redact(record)
    dumped = json.dumps(clean, ensure_ascii=False)
    for _, planted, _ in PLANTED:
        assert planted not in dumped
    for value in ("hunter2", "bob@example.org", "ann.lee@example.com"):
        assert value not in dumped
    assert report.total >= len(PLANTED)


def test_report_holds_counts_only():
    text = " ".join(text for text, _, _ in PLANTED)
    _, report = redact_text(text)
    shown = f"{report} {report!r} {json.dumps(report.counts)} {json.dumps(report.rules)}"
    for _, planted, _ in PLANTED:
        assert planted not in shown
    assert set(report.counts) == {"EMAIL", "PHONE", "CREDIT_CARD", "IP", "API_KEY", "SECRET"}


def test_sensitive_keys_and_keys_and_numbers():
    record = {
        "failure_id": "f1",
        "arguments": {"password": "hunter2", "pin": 1234, "api_key": 12345, "ann@example.com": "owner"},
        # A JSON Schema property named like a secret keeps its schema: only scalars under the key are replaced.
        "schema": {"properties": {"password": {"type": "string"}}},
        "card_as_number": 4111111111111111,
        "count": 42,
    }
    clean, report = redact(record)
    assert clean["arguments"] == {"password": "[SECRET]", "pin": 1234, "api_key": "[SECRET]", "[EMAIL]": "owner"}
    assert clean["schema"] == {"properties": {"password": {"type": "string"}}}
    assert clean["card_as_number"] == "[CREDIT_CARD]"
    assert clean["count"] == 42
    assert report.rules == {"credit_card": 1, "email": 1, "sensitive_key": 2}


def test_keys_that_collide_after_redaction_both_survive():
    clean, _ = redact({"args": {"ann@example.com": 1, "bob@example.com": 2}})
    assert clean["args"] == {"[EMAIL]": 1, "[EMAIL]#2": 2}


def test_failure_id_made_of_pii_becomes_a_hash():
    clean, _ = redact({"failure_id": "ann@example.com-42"})
    assert clean["failure_id"].startswith("redacted-")
    assert clean["failure_id"] == redact({"failure_id": "ann@example.com-42"})[0]["failure_id"]
    assert "ann" not in clean["failure_id"]


def test_redaction_marks_the_record_and_is_idempotent():
    once, first = redact({"failure_id": "f1", "messages": [{"role": "user", "content": "ann@example.com"}]})
    twice, second = redact(once)
    assert once["redaction"] == first.counts == {"EMAIL": 1}
    assert twice == once
    assert second.total == 0


@pytest.mark.parametrize(
    ("name", "sensitive"),
    [
        ("password", True),  # the word itself
        ("db_password", True),  # a prefixed name
        ("X-Api-Key", True),  # a header
        ("clientSecret", True),  # camelCase
        ("access_token", True),  # an OAuth field
        ("Authorization", True),  # the HTTP header
        ("max_tokens", False),  # a generation parameter
        ("token_count", False),  # a count of tokens
        ("token_type", False),  # says "bearer", not a secret
        ("password_hint", False),  # the sensitive word is not last
    ],
)
def test_is_sensitive_key(name, sensitive):
    assert is_sensitive_key(name) is sensitive


def _random_tokens(alphabet, length, n, seed):
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(length)) for _ in range(n)]


@pytest.mark.parametrize(
    ("alphabet", "length", "floor"),
    [
        (string.ascii_letters + string.digits, 24, 0.95),  # alphanumeric keys
        (string.ascii_letters + string.digits, 32, 0.98),
        (string.ascii_letters + string.digits + "-_", 40, 0.98),  # base64url
        (string.ascii_lowercase + string.digits, 32, 0.7),  # lowercase keys: the weak spot, documented
    ],
)
def test_high_entropy_detection_rate(alphabet, length, floor):
    tokens = _random_tokens(alphabet, length, 400, seed=length)
    rate = sum(looks_random(token) for token in tokens) / len(tokens)
    assert rate >= floor


def test_names_are_kept_without_a_detector():
    assert redact_text("Thanks, Ann Lee!")[0] == "Thanks, Ann Lee!"


class _SloppyDetector:
    """Returns overlapping, reversed and out-of-range spans; redaction must cope."""

    def find_names(self, text):
        return [(0, 3), (1, 5), (5, 2), (-1, 2), (0, 10_000)]


def test_name_detector_bad_spans_are_ignored():
    text, report = redact_text("Ann went home", RedactionConfig(name_detector=_SloppyDetector()))
    assert text == "[NAME] went home"
    assert report.counts == {"NAME": 1}


def test_config_checks_itself():
    with pytest.raises(ValueError, match="find_names"):
        RedactionConfig(name_detector=object())
    with pytest.raises(ValueError, match="min_secret_chars"):
        RedactionConfig(min_secret_chars=4)
    with pytest.raises(ValueError, match="entropy_factor"):
        RedactionConfig(entropy_factor=1.5)


@pytest.mark.parametrize(
    "text",
    [
        "a_" * 50_000,  # one endless identifier
        "1 " * 50_000,  # digit groups that almost make cards and phones
        "1." * 50_000,  # almost dotted quads
        ":" * 100_000,  # almost IPv6
        "a@" * 50_000,  # almost e-mail addresses
        "+1 " * 33_000,  # almost international numbers
        "-----BEGIN PRIVATE KEY-----" * 3_000,  # BEGIN lines without END
        "password=" * 11_000,  # assignments without values
        "Ab1" * 33_000,  # one endless random-looking token
        ("a." * 30 + "@") * 1_600,  # long dotted local parts
    ],
)
def test_hostile_text_is_redacted_in_linear_time(text):
    # Hostile text is redacted without an error; that it takes linear time is measured in
    # bench/bench_adversarial_inputs.py, not timed here.
    redacted, _ = redact_text(text)
    assert redacted


def test_a_models_version_digest_is_kept_but_a_secret_in_its_name_is_not():
    # A version name with a digest looks random to the entropy rule, and is no secret: it stays readable.
    clean, report = redact({"model": "smollm2-135m-instruct-b179c9523d0e", "output": "b179c9523d0e7f1aQz9X"})
    assert clean["model"] == "smollm2-135m-instruct-b179c9523d0e" and clean["output"] == "[SECRET]"
    # Any other rule still applies to it, and is counted.
    clean, report = redact({"model": "agent for ann@example.com"})
    assert clean["model"] == "agent for [EMAIL]" and report.rules == {"email": 1}
