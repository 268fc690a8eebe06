"""Parsing failure logs: three line shapes into one record; a bad line is a located reject, never a crash."""

import json

import pytest

from failures import RECORD_FIELDS, ParseLimits, parse_failure_log

USER = {"role": "user", "content": "What is 7 * 6?"}


def line(**fields):
    return json.dumps(fields)


def parse_one(text):
    parsed = parse_failure_log([text], "log.jsonl")
    assert not parsed.rejects, [str(r) for r in parsed.rejects]
    return parsed.records[0]


def test_native_record_is_normalised():
    record = parse_one(
        line(
            failure_id="f-1",
            timestamp="2025-03-14T09:26:53Z",
            source={"app": "shop", "session_id": "s-9", "attempt": 2},
            family="Tool-Call",
            messages=[{"role": "system", "content": "Be brief."}, USER],
            output={"content": "41", "tool_calls": []},
            tool_results=[{"name": "calc", "content": "42"}],
            error={"type": "wrong_answer", "message": "answered 41"},
            user_correction="It is 42.",
            expected={"answer": 42},
            tags=["math", "math", "p2"],
            extra_field="ignored",
        )
    )
    assert list(record) == list(RECORD_FIELDS)
    assert record["failure_id"] == "f-1"
    assert record["origin"] == "log.jsonl:1"
    assert record["format"] == "failure_log"
    assert record["source"] == {"app": "shop", "session_id": "s-9", "attempt": 2}
    assert record["family"] == "tool_call"
    assert record["output"] == {"text": "41", "tool_calls": []}
    assert record["error"] == "answered 41"
    assert record["expected"] == {"answer": 42}
    assert record["tags"] == ["math", "p2"]


def test_derived_failure_id_is_a_stable_content_hash():
    a = line(messages=[USER], output="41")
    first, again, other = (parse_one(text)["failure_id"] for text in (a, a, line(messages=[USER], output="40")))
    assert first == again != other
    assert len(first) == 16 and int(first, 16) >= 0


def test_chat_messages_trailing_assistant_is_the_output():
    record = parse_one(line(messages=[USER, {"role": "assistant", "content": "41"}], expected={"answer": 42}))
    assert record["format"] == "chat_messages"
    assert record["messages"] == [USER]
    assert record["output"] == {"text": "41", "tool_calls": []}
    assert record["expected"] == {"answer": 42}


def test_chat_messages_without_a_reply_has_no_output():
    record = parse_one(line(messages=[USER]))
    assert record["output"] is None


def test_chat_completion_log():
    tool = {"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}
    record = parse_one(
        line(
            request={"model": "m-1", "messages": [USER], "tools": [tool], "temperature": 0},
            response={
                "id": "chatcmpl-1",
                "created": 1741946400,
                "choices": [
                    {
                        "message": {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": '{"x": 1}'}}
                            ],
                        }
                    }
                ],
                "error": {"message": "tool failed"},
            },
            expected={"tool_call": {"name": "calc", "arguments": '{"x": 2}'}},
        )
    )
    assert record["format"] == "chat_completion"
    assert record["messages"] == [USER]
    assert record["tools"] == [tool]
    assert record["output"] == {"text": None, "tool_calls": [{"name": "calc", "arguments": {"x": 1}, "id": "c1"}]}
    assert record["source"] == {"model": "m-1", "request_id": "chatcmpl-1"}
    assert record["timestamp"] == "2025-03-14T10:00:00Z"
    assert record["error"] == "tool failed"
    assert record["expected"] == {"tool_call": {"name": "calc", "arguments": {"x": 2}}}


def test_request_without_response():
    record = parse_one(line(request={"messages": [USER]}, error="timeout after 30 s"))
    assert record["output"] is None
    assert record["error"] == "timeout after 30 s"


def test_content_parts_and_tool_calls_are_normalised():
    record = parse_one(
        line(
            messages=[
                {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
                {"role": "user", "content": [{"type": "text", "text": "What is this?"}, {"type": "image_url"}]},
                {"role": "assistant", "content": None, "tool_calls": [{"name": "look", "arguments": "{bad json"}]},
                {"role": "tool", "tool_call_id": "c1", "content": "a cat"},
            ],
            output="A dog.",
            tools=[{"name": "look", "description": "Describe the image."}],
        )
    )
    assert record["messages"][1]["content"] == "What is this?\n[image_url]"
    # Arguments that are not JSON are kept as text: they may be the very failure.
    assert record["messages"][2]["tool_calls"] == [{"name": "look", "arguments": "{bad json"}]
    assert record["messages"][3] == {"role": "tool", "content": "a cat", "tool_call_id": "c1"}
    assert record["tools"] == [
        {"type": "function", "function": {"name": "look", "description": "Describe the image."}}
    ]


def test_traffic_fields_model_and_outcome():
    # A traffic line names its model and outcome; a line without an outcome is a failure (a failure log's lines).
    assert parse_one(line(messages=[USER], output="42", model="agent@v2", outcome="passed"))["outcome"] == "passed"
    plain = parse_one(line(messages=[USER], output="41"))
    assert (plain["model"], plain["outcome"]) == (None, "failed")
    # A Chat Completions log's model is the one the response names (what served it), else the request's.
    request = {"model": "agent", "messages": [USER]}
    served = parse_one(line(request=request, response={"model": "agent-2026-12-01", "choices": []}, outcome="unknown"))
    assert (served["model"], served["outcome"]) == ("agent-2026-12-01", "unknown")
    assert parse_one(line(request=request))["model"] == "agent"


def test_unix_timestamp_becomes_iso():
    assert parse_one(line(messages=[USER], output="x", timestamp=0))["timestamp"] == "1970-01-01T00:00:00Z"


DEEP = (
    '{"messages": [{"role": "user", "content": "hi"}], "output": "x", "tool_results": ' + "[" * 100 + "]" * 100 + "}"
)

# (line, reason code, a fragment the reason must contain: what or where)
BAD_LINES = [
    # not JSON at all
    ("{not json", "invalid_json", "column 2"),
    # JSON, but not an object
    ("[1, 2]", "not_an_object", "got array"),
    # no conversation
    (line(output="x"), "no_conversation", "messages is missing"),
    # an empty conversation
    (line(messages=[], output="x"), "no_conversation", "messages is empty"),
    # only the agent's reply
    (line(messages=[{"role": "assistant", "content": "hi"}]), "no_conversation", "only message"),
    # messages of the wrong type
    (line(messages="hi"), "wrong_type", "(/messages)"),
    # an unknown role
    (line(messages=[{"role": "robot", "content": "x"}]), "bad_value", "/messages/0/role"),
    # content of the wrong type
    (line(messages=[{"role": "user", "content": 5}]), "wrong_type", "/messages/0/content"),
    # a tool call without a name
    (line(messages=[USER], output={"tool_calls": [{"arguments": {}}]}), "wrong_type", "/output/tool_calls/0/name"),
    # a timestamp that is not ISO 8601
    (line(messages=[USER], timestamp="yesterday"), "bad_value", "not ISO 8601"),
    # a misspelt expected field
    (line(messages=[USER], expected={"anwser": 42}), "unknown_field", "/expected/anwser"),
    # expected tool-call arguments that are not an object
    (line(messages=[USER], expected={"tool_call": {"name": "f", "arguments": "[1]"}}), "wrong_type", "arguments"),
    # a boolean answer
    (line(messages=[USER], expected={"answer": True}), "wrong_type", "/expected/answer"),
    # tags as a string
    (line(messages=[USER], tags="a,b"), "wrong_type", "/tags"),
    # nested source ids
    (line(messages=[USER], source={"user": {"id": 1}}), "wrong_type", "/source/user"),
    # a family that is no family name
    (line(messages=[USER], family="Tool Call!"), "bad_value", "/family"),
    # NaN is not JSON
    ('{"messages": [{"role": "user", "content": "x"}], "output": NaN}', "invalid_json", "NaN"),
    # a number that overflows a float
    (line(messages=[USER])[:-1] + ', "output": 1e400}', "invalid_json", "(/output)"),
    # an integer too long to convert
    (line(messages=[USER])[:-1] + ', "output": ' + "1" * 5000 + "}", "invalid_json", "huge numbers"),
    # a lone surrogate escape
    ('{"messages": [{"role": "user", "content": "\\ud800"}]}', "invalid_text", "/messages/0/content"),
    # nesting past the limit
    (DEEP, "too_deep", "64 levels"),
    # nesting deep enough to exhaust the JSON parser
    ("[" * 200_000, "too_deep", "64 levels"),
    # a failure_id that is not printable
    (line(messages=[USER], failure_id="a\nb"), "bad_value", "/failure_id"),
    # an outcome that is none of the four
    (line(messages=[USER], output="x", outcome="ok"), "bad_value", "/outcome"),
    # an outcome as a boolean
    (line(messages=[USER], output="x", outcome=True), "wrong_type", "/outcome"),
    # a model that is not a string
    (line(messages=[USER], output="x", model=2), "wrong_type", "/model"),
]


@pytest.mark.parametrize(("text", "code", "fragment"), BAD_LINES)
def test_bad_line_is_a_located_reject_and_the_rest_flows(text, code, fragment):
    good = line(messages=[USER], output="41")
    parsed = parse_failure_log([good, text, good], "log.jsonl")
    assert [r["origin"] for r in parsed.records] == ["log.jsonl:1", "log.jsonl:3"]
    (reject,) = parsed.rejects
    assert (reject.source, reject.line, reject.reason_code) == ("log.jsonl", 2, code)
    assert fragment in reject.reason
    assert " - " in reject.reason  # every reason ends with how to fix it
    assert str(reject).startswith("log.jsonl:2: ")


def test_reject_preview_is_redacted_and_capped():
    bad = '{"messages": "ann.lee@example.com ' + "x" * 1000 + '"'
    (reject,) = parse_failure_log([bad], "log.jsonl", limits=ParseLimits(raw_preview_chars=100)).rejects
    assert "ann.lee@example.com" not in reject.raw
    assert "[EMAIL]" in reject.raw
    assert len(reject.raw) <= 100


def test_reject_preview_is_redacted_before_it_is_cut():
    # The e-mail straddles the 100th character: cut first, its start would be kept and match no rule.
    bad = "{not json " + "x" * 84 + " ann.lee@example.com"
    (reject,) = parse_failure_log([bad], "log.jsonl", limits=ParseLimits(raw_preview_chars=100)).rejects
    assert reject.raw == bad[:95] + "[EMAI"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        # A short value is quoted, redacted.
        (line(messages=[{"role": "ann.lee@example.com", "content": "x"}]), 'got "[EMAIL]"'),
        (line(messages=[USER], timestamp="+1 202 555 0143"), "timestamp '[PHONE]' is not"),
        # A long one is not quoted at all: cut, it could keep half a secret.
        (line(messages=[USER], family="x" * 30 + " ann.lee@example.com"), "family <52 characters> is not"),
        # Keys are quoted in pointers.
        (line(messages=[USER], source={"ann.lee@example.com": [1]}), "/source/[EMAIL]"),
    ],
)
def test_reject_reason_quotes_no_unredacted_value(text, shown):
    (reject,) = parse_failure_log([text], "log.jsonl").rejects
    assert shown in reject.reason
    assert "ann.lee" not in reject.reason and "555 0143" not in reject.reason


def test_file_with_bad_bytes_huge_line_bom_and_blank_lines(tmp_path):
    good = line(messages=[USER], output="41").encode()
    huge = b'{"messages": [{"role": "user", "content": "' + b"x" * 5000 + b'"}]}'
    path = tmp_path / "failures-2025-03-14.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + good + b"\n\n" + b'{"messages": "caf\xe9"}\n' + huge + b"\r\n" + good)
    parsed = parse_failure_log(path, limits=ParseLimits(max_line_bytes=1000))
    assert [r["origin"] for r in parsed.records] == ["failures-2025-03-14.jsonl:1", "failures-2025-03-14.jsonl:5"]
    assert [(r.line, r.reason_code) for r in parsed.rejects] == [(3, "not_utf8"), (4, "line_too_long")]
    assert "0xe9 at column 18" in parsed.rejects[0].reason
    assert f"{len(huge):,} bytes" in parsed.rejects[1].reason


def test_huge_last_line_without_newline(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"x" * 300_000)
    (reject,) = parse_failure_log(path, limits=ParseLimits(max_line_bytes=1000)).rejects
    assert (reject.line, reject.reason_code) == (1, "line_too_long")
    assert "300,000 bytes" in reject.reason


def test_lines_may_be_bytes_and_sources_default():
    parsed = parse_failure_log([line(messages=[USER], output="41").encode() + b"\n"])
    assert parsed.records[0]["origin"] == "<lines>:1"


def test_missing_file_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        parse_failure_log(tmp_path / "nope.jsonl")


def test_limits_check_themselves():
    with pytest.raises(ValueError, match="max_depth"):
        ParseLimits(max_depth=0)
