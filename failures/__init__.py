"""Production logs become tasks: parse JSONL traffic and failure logs, redact PII and secrets, count every
interaction per model (`failures.traffic`), derive tasks or review items from the failures.

```
failure log (JSONL) --parse_failure_log--> records + rejects --redact--> redacted records
                    --failure_task--> task records (source: production_failure) | review items (+ a seed stub)
```

`process_failure_log(path)` runs all three steps and returns a `FailureBatch`; nothing unredacted is in it.

## The failure-log format

JSONL, one interaction per line (UTF-8, at most `ParseLimits.max_line_bytes`, blank lines skipped). A traffic
log holds every interaction and says which model served each and how it went (`model`, `outcome`); a failure
log holds failures only, and may leave both out:

| field | type | required | meaning |
| --- | --- | --- | --- |
| `failure_id` | string | no | a stable id; else derived: 16 hex digits of SHA-256 of the line's canonical JSON |
| `timestamp` | ISO 8601 string, or Unix seconds | no | when it failed (`2025-03-14T09:26:53Z`) |
| `source` | object of scalar ids | no | where it came from: `{"app", "session_id", "request_id", ...}` |
| `family` | string | no | task family hint (`tool_call`, `sql`, ...); inferred when absent |
| `messages` | list of chat messages | yes | the conversation the agent was given (`{role, content, ...}`) |
| `tools` | list of OpenAI tool schemas | no | the tools offered: `{"type": "function", "function": {...}}` |
| `output` | string, `{text, tool_calls}`, or null | yes* | what the agent produced (*it marks the native shape) |
| `tool_results` | list | no | what its tools returned |
| `error` | string, or `{message, ...}` | no | the error that was raised or reported |
| `user_correction` | string | no | what the user said was wrong, or the right answer in their words |
| `expected` | object | no | the expected outcome, the verifier's gold data (below) |
| `tags` | list of strings | no | free labels, carried to the task |
| `model` | string | no | the model or version that served it (chat completion: the response's `model`) |
| `outcome` | string | no | `passed`/`failed` (a verdict), `corrected` (by a user), `unknown`; `failed` if absent |

A message has `role` (`system`, `developer`, `user`, `assistant`, `tool` or `function`), `content` and
optionally `tool_calls`, `tool_call_id` and `name`. `content` is a string, null, or
OpenAI content parts (text parts are joined, others become `[image_url]`-style markers). Tool calls are
OpenAI `{"type": "function", "function": {"name", "arguments": "<JSON>"}}` or `{name, arguments}`; JSON-string
arguments are parsed (arguments that are not JSON are kept as text: they may be the failure).

`expected` fields: `answer` (number, or text), `tool_call` (`{name, arguments}`), `output_schema` (a JSON
Schema the output had to satisfy), `output` (the right output: an object for JSON tasks), `sql` (the gold
query), `database` (its SQLite file, relative to seeds/), `ordered`, `rows` (the expected result, for a
reviewer), `tests` (Python asserts), `entry_point`, `code` (a correct solution), `episode` (a tool loop's
expected state: `{environment, state, goal, tool_calls?}`, see docs/failures.md). Unknown fields are rejected
(a typo would otherwise silently send the failure to review). `failures.derive` says which
verifier each becomes.

Two common transcript shapes are accepted as well and normalised into the same record:

- `{"messages": [...]}` (`format: chat_messages`): a trailing assistant message is the `output`;
- a Chat Completions log (`format: chat_completion`): `{"request": {"model", "messages", "tools"},
  "response": {"id", "created", "choices": [{"message": {...}}], "error"}}`. `messages`/`tools` come from the
  request, `output` from the first choice's message, `source.model` / `source.request_id` from the model and
  response id, `timestamp` from `created`, `error` from the response's error.

The native fields above may sit beside either shape at the top level (an `expected` added by a reviewer, say).

## The normalised record

Only `failed` and `corrected` interactions are failures (`failures.traffic.is_failure`): they alone go on to
tasks and review. Every interaction, failed or not, becomes a text-free traffic row (`traffic_rows`) that the
failure rates per model, night and family are counted from (`rate_table`, Wilson intervals).

`RECORD_FIELDS`: the fields above (`output` as `{text, tool_calls}` or null, `tools`/`tool_results`/`tags` as
lists, absent optionals as null), plus `origin` (`<log name>:<line>`) and `format`. `redact` adds
`redaction` (counts by kind), which `failure_task` requires. Rejected lines become `FailureReject(source, line,
reason_code, reason, raw)`: `reason` says what is wrong, where (a JSON pointer) and how to fix it; `raw` is a
preview of the line; both are redacted (the whole line, then cut to the preview). Codes: `invalid_json`,
`not_utf8`, `line_too_long`, `too_deep`, `invalid_text`, `not_an_object`, `no_conversation`, `wrong_type`,
`bad_value`, `unknown_field`.

## Redaction and names

See `failures.redaction` for every rule, its placeholder and the measured entropy threshold. Names are
redacted only through a pluggable `NameDetector` (`failures.names`): no maintained PII library finds names
offline with what PyPI alone provides (Presidio needs a spaCy model, and spaCy's models are published on
GitHub, not PyPI), so by default names are kept. `PresidioNameDetector` works where Presidio and a spaCy
model are installed; `KnownNamesDetector` redacts names you already know.
"""

from failures.batch import FailureBatch, LogTables, derive_failure_tasks, log_tables, process_failure_log
from failures.derive import (
    FAMILY_VERIFIERS,
    UNKNOWN_FAMILY,
    Derived,
    UnredactedRecordError,
    failure_fields,
    failure_task,
    infer_family,
    seed_stub,
)
from failures.log import (
    EXPECTED_FIELDS,
    FORMATS,
    OUTCOMES,
    RECORD_FIELDS,
    FailureReject,
    ParsedLog,
    ParseLimits,
    parse_failure_log,
)
from failures.names import KnownNamesDetector, NameDetector, NameDetectorUnavailableError, PresidioNameDetector
from failures.redaction import (
    KINDS,
    RedactionConfig,
    RedactionReport,
    is_card_number,
    is_sensitive_key,
    looks_random,
    redact,
    redact_text,
    shannon_entropy,
)
from failures.traffic import RateReport, rate_report, rate_table, traffic_rows, wilson_interval

__all__ = [
    "EXPECTED_FIELDS",
    "FAMILY_VERIFIERS",
    "FORMATS",
    "KINDS",
    "OUTCOMES",
    "RECORD_FIELDS",
    "UNKNOWN_FAMILY",
    "Derived",
    "FailureBatch",
    "FailureReject",
    "KnownNamesDetector",
    "LogTables",
    "NameDetector",
    "NameDetectorUnavailableError",
    "ParseLimits",
    "ParsedLog",
    "PresidioNameDetector",
    "RateReport",
    "RedactionConfig",
    "RedactionReport",
    "UnredactedRecordError",
    "derive_failure_tasks",
    "failure_fields",
    "failure_task",
    "infer_family",
    "is_card_number",
    "is_sensitive_key",
    "log_tables",
    "looks_random",
    "parse_failure_log",
    "process_failure_log",
    "rate_report",
    "rate_table",
    "redact",
    "redact_text",
    "seed_stub",
    "shannon_entropy",
    "traffic_rows",
    "wilson_interval",
]
