"""The environment contract (reset/step, limits, end reasons), isolation between episodes, each tool of `shop` and
`files`, and hostile episodes that must end cleanly with nothing changed outside the episode."""

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from validators.environments import (
    END_REASONS,
    ENVIRONMENTS,
    Answer,
    EpisodeLimits,
    EpisodeNotRunningError,
    FilesEnvironment,
    ShopEnvironment,
    ToolCallAction,
    UnknownEnvironmentError,
    actions_from_completion,
    environment_class,
)
from validators.registry import Completion, VerifyContext
from validators.verifiers.episode import replay

SHOP_STATE = {"database": "sql/shop.sqlite"}
FILES_STATE = {"files": {"a.txt": "alpha\n", "docs/b.md": "beta\n"}}


def task(state: dict[str, Any], prompt: str = "Help me.") -> dict[str, Any]:
    return {"prompt": [{"role": "user", "content": prompt}], "verifier": {"params": {"state": state}}}


def call(name: str | None, **arguments: Any) -> ToolCallAction:
    return ToolCallAction(name, arguments)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def result(observation: str) -> Any:
    return json.loads(observation)


@pytest.fixture
def shop(seed_context):
    with ShopEnvironment(context=seed_context) as env:
        env.reset(task(SHOP_STATE))
        yield env


@pytest.fixture
def files(seed_context):
    with FilesEnvironment(context=seed_context) as env:
        env.reset(task(FILES_STATE))
        yield env


# -- the contract -------------------------------------------------------------------------------------------------


def test_reset_returns_the_prompt_and_offers_openai_tools(seed_context):
    for env_class in ENVIRONMENTS.values():
        with env_class(context=seed_context) as env:
            state = SHOP_STATE if env_class is ShopEnvironment else FILES_STATE
            assert env.reset(task(state, "Do it.")) == [{"role": "user", "content": "Do it."}]
            for tool in env.tools:
                assert tool["type"] == "function"
                assert tool["function"]["parameters"]["additionalProperties"] is False
                assert callable(getattr(env, f"tool_{tool['function']['name']}"))  # every tool has its handler


def test_step_returns_the_observation_and_done(files):
    observation, done = files.step(call("read_file", path="a.txt"))
    assert (result(observation), done) == ({"path": "a.txt", "content": "alpha\n"}, False)
    observation, done = files.step(Answer("All done."))
    assert (result(observation), done) == ({"episode_end": "answered"}, True)
    assert (files.end_reason, files.turns) == ("answered", 2)


def test_step_outside_an_episode_is_an_error(files):
    files.step(Answer("done"))
    with pytest.raises(EpisodeNotRunningError):  # after the end
        files.step(Answer("again"))
    with pytest.raises(EpisodeNotRunningError):  # before any reset
        FilesEnvironment().step(Answer("hi"))


def test_unknown_environment_names_the_known_ones():
    with pytest.raises(UnknownEnvironmentError, match="shop, files"):
        environment_class("kitchen")


def test_actions_come_from_tool_calls_in_order_then_the_answer():
    messages = [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "{}"},
        {"role": "assistant", "content": "Finished."},
    ]
    assert actions_from_completion(Completion.from_any(messages)) == [
        ToolCallAction("f", "{}", "c1"),
        Answer("Finished."),
    ]


# -- isolation ----------------------------------------------------------------------------------------------------


def test_two_episodes_on_one_task_do_not_see_each_others_writes(seed_context):
    seed = seed_context.seeds_dir / "sql" / "shop.sqlite"
    before = digest(seed)
    with ShopEnvironment(context=seed_context) as first, ShopEnvironment(context=seed_context) as second:
        first.reset(task(SHOP_STATE))
        second.reset(task(SHOP_STATE))
        assert first.folder != second.folder
        first.step(call("cancel_order", order_id=1027))
        status = result(second.step(call("get_order_status", order_id=1027))[0])["status"]
        assert status == "pending"  # the other episode's cancel is not here
        assert [c.describe() for c in first.changes()] == ["orders/1027: status 'pending' -> 'cancelled'"]
        assert second.changes() == []
        folders = [first.folder, second.folder]
    assert all(folder is not None and not folder.exists() for folder in folders)  # each copy removed
    assert digest(seed) == before  # the seed database is byte-identical


def test_reset_starts_over_from_the_seed_state(files):
    files.step(call("delete_file", path="a.txt"))
    files.reset(task(FILES_STATE))
    assert files.changes() == []
    assert result(files.step(call("read_file", path="a.txt"))[0])["content"] == "alpha\n"


# -- each tool ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        # Case ignored in the email.
        (call("find_customer", email="Alice.Martin@example.com"), {"customer_id": 1, "name": "Alice Martin"}),
        (call("find_customer", email="nobody@example.com"), {"error": "no customer with email 'nobody@example.com'"}),
        (
            call("list_orders", customer_id=6),
            {
                "customer_id": 6,
                "orders": [
                    {"order_id": 1013, "order_date": "2024-02-17", "status": "delivered", "total_cents": 6200},
                    {"order_id": 1026, "order_date": "2024-07-05", "status": "pending", "total_cents": 3500},
                ],
            },
        ),
        (call("list_orders", customer_id=99), {"error": "no customer 99"}),
        (
            call("get_order_status", order_id=1004),
            {
                "order_id": 1004,
                "customer_id": 1,
                "status": "delivered",
                "order_date": "2023-10-27",
                "shipped_date": "2023-10-28",
                "items": [
                    {"product": "Designing Data-Intensive Applications", "quantity": 1, "unit_price_cents": 4800}
                ],
                "total_cents": 4800,
                "refunded_cents": 0,
            },
        ),
        (call("get_order_status", order_id=1), {"error": "no order 1"}),
        (
            call("refund_order", order_id=1004, amount_cents=800, reason="late"),
            {"refund_id": 1, "order_id": 1004, "amount_cents": 800, "refunded_cents": 800},
        ),
        # More than was paid.
        (
            call("refund_order", order_id=1004, amount_cents=4801, reason="x"),
            {"error": "order 1004 has 4800 cents left to refund, not 4801"},
        ),
        # Pending orders are cancelled, not refunded; cancelled ones were never paid.
        (
            call("refund_order", order_id=1026, amount_cents=100, reason="x"),
            {"error": "order 1026 is pending: only shipped or delivered orders are refunded; cancel it instead"},
        ),
        (
            call("refund_order", order_id=1005, amount_cents=100, reason="x"),
            {"error": "order 1005 is cancelled: only shipped or delivered orders are refunded"},
        ),
        (call("cancel_order", order_id=1026), {"order_id": 1026, "status": "cancelled"}),
        (
            call("cancel_order", order_id=1004),
            {"error": "order 1004 is delivered: only pending orders can be cancelled"},
        ),
    ],
)
def test_shop_tools(shop, action, expected):
    assert result(shop.step(action)[0]) == expected


def test_a_second_refund_counts_what_the_first_paid(shop):
    shop.step(call("refund_order", order_id=1004, amount_cents=4000, reason="a"))
    observation, _ = shop.step(call("refund_order", order_id=1004, amount_cents=1000, reason="b"))
    assert result(observation) == {"error": "order 1004 has 800 cents left to refund, not 1000"}
    assert [c.describe() for c in shop.changes()] == [
        'refunds/1: inserted {"refund_id": 1, "order_id": 1004, "amount_cents": 4000, "reason": "a"}'
    ]


@pytest.mark.parametrize(
    ("action", "expected", "changes"),
    [
        (call("list_files", folder="."), {"folder": ".", "files": ["a.txt", "docs/b.md"]}, []),
        (call("list_files", folder="docs"), {"folder": "docs", "files": ["docs/b.md"]}, []),
        (call("list_files", folder="nope"), {"error": "no folder 'nope'"}, []),
        (call("read_file", path="docs/b.md"), {"path": "docs/b.md", "content": "beta\n"}, []),
        (call("read_file", path="docs"), {"error": "no file 'docs' (it is a folder)"}, []),
        (
            call("write_file", path="new/c.txt", content="gamma"),
            {"written": "new/c.txt", "characters": 5},
            ['files/new/c.txt: inserted {"content": "gamma"}'],
        ),
        (call("write_file", path="a.txt/x", content=""), {"error": "cannot write 'a.txt/x': File exists"}, []),
        (
            call("move_file", source="a.txt", destination="old/a.txt"),
            {"moved": "a.txt", "to": "old/a.txt"},
            ["files/a.txt: deleted", 'files/old/a.txt: inserted {"content": "alpha\\n"}'],
        ),
        (
            call("move_file", source="a.txt", destination="docs/b.md"),
            {"error": "'docs/b.md' exists; delete it first or choose another name"},
            [],
        ),
        (call("delete_file", path="a.txt"), {"deleted": "a.txt"}, ["files/a.txt: deleted"]),
        (call("delete_file", path="zzz.txt"), {"error": "no file 'zzz.txt'"}, []),
    ],
)
def test_files_tools(files, action, expected, changes):
    assert result(files.step(action)[0]) == expected
    assert [c.describe() for c in files.changes()] == changes


# -- end reasons --------------------------------------------------------------------------------------------------


def run(env_class: type, state: dict[str, Any], actions: list[Any], **kwargs: Any) -> Any:
    with env_class(**kwargs) as env:
        env.reset(task(state))
        for action in actions:
            if env.step(action)[1]:
                break
        return env.end_reason, env.end_detail, env.turns, [c.describe() for c in env.changes()]


def test_every_end_reason():
    ticks = iter([0.0, 0.5, 5.0])  # reset, then one turn in time, then one too late
    cases = {
        "answered": run(FilesEnvironment, FILES_STATE, [Answer("ok")]),
        "max_turns": run(
            FilesEnvironment, FILES_STATE, [call("read_file", path="a.txt")] * 3, limits=EpisodeLimits(max_turns=2)
        ),
        "invalid_call": run(FilesEnvironment, FILES_STATE, [call("format_disk")]),
        "tool_error": run(
            FilesEnvironment,
            FILES_STATE,
            [call("read_file", path="nope")] * 2,
            limits=EpisodeLimits(max_tool_errors=2),
        ),
        "timeout": run(
            FilesEnvironment,
            FILES_STATE,
            [call("delete_file", path="a.txt"), call("delete_file", path="docs/b.md")],
            limits=EpisodeLimits(max_seconds=1.0),
            clock=lambda: next(ticks),
        ),
    }
    assert set(cases) == set(END_REASONS)
    assert cases == {
        "answered": ("answered", "", 1, []),
        "max_turns": ("max_turns", "2 turns without an answer", 2, []),
        "invalid_call": (
            "invalid_call",
            "unknown tool 'format_disk'; the tools are "
            + ", ".join(t["function"]["name"] for t in FilesEnvironment.tools),
            1,
            [],
        ),
        "tool_error": ("tool_error", "read_file: no file 'nope'", 2, []),
        # The second turn started after the limit: it did not run.
        "timeout": ("timeout", "the episode ran past 1.0 s", 1, ["files/a.txt: deleted"]),
    }


@pytest.mark.parametrize(
    ("action", "detail"),
    [
        (call(None), "a call without a tool name"),
        (
            ToolCallAction("read_file", "{not json"),
            "read_file: arguments_invalid: arguments are not JSON (line 1 col 2)",
        ),
        (ToolCallAction("read_file", "[1]"), "read_file: arguments_invalid: arguments must be an object, got list"),
        (call("read_file"), "read_file: missing_argument: /path is required by read_file"),
        (call("read_file", path=7), "read_file: wrong_type: /path expected string, got integer 7"),
        (
            call("read_file", path="a.txt", mode="w"),
            "read_file: arguments_invalid: /: Additional properties are not allowed ('mode' was unexpected)",
        ),
    ],
)
def test_a_call_the_contract_refuses_ends_the_episode_unrun(action, detail):
    assert run(FilesEnvironment, FILES_STATE, [action, call("delete_file", path="a.txt")]) == (
        "invalid_call",
        detail,
        1,
        [],
    )


def test_limits_check_themselves():
    with pytest.raises(ValueError, match="max_turns must be a positive integer, got 0"):
        EpisodeLimits(max_turns=0)
    with pytest.raises(ValueError, match="max_seconds must be a positive number"):
        EpisodeLimits(max_seconds=-1)


# -- hostile episodes ---------------------------------------------------------------------------------------------


def hostile(
    context: VerifyContext, environment: str, state: dict[str, Any], completion: Any, goal: dict[str, Any]
) -> Any:
    params = {"environment": environment, "state": state, "goal": goal}
    return replay(params, completion, context)


REFUND_1004 = {"changes": [{"collection": "refunds", "after": {"order_id": 1004, "amount_cents": 4800}}]}


def tool_calls(*calls: tuple[str, Any]) -> list[dict[str, Any]]:
    """One assistant message per call, arguments as a JSON string (OpenAI's shape)."""
    return [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": arguments}}],
        }
        for i, (name, arguments) in enumerate(calls)
    ]


def test_sql_injection_in_arguments_changes_nothing_but_the_episode_copy(seed_context):
    before = digest(seed_context.seeds_dir / "sql" / "shop.sqlite")
    completion = tool_calls(
        # A value spliced into SQL would match every customer; bound, it matches none.
        ("find_customer", json.dumps({"email": "x') OR 1=1 --"})),
        # Text where an integer goes is refused by the tool's schema: the call does not run.
        ("get_order_status", json.dumps({"order_id": "1004; DROP TABLE orders"})),
    )
    outcome = hostile(seed_context, "shop", SHOP_STATE, completion, REFUND_1004)
    assert outcome.transcript[1]["content"] == json.dumps({"error": 'no customer with email "x\') OR 1=1 --"'})
    assert (outcome.end_reason, outcome.changes, outcome.verdict.passed) == ("invalid_call", [], False)
    assert outcome.end_detail.startswith("get_order_status: wrong_type: /order_id expected integer")
    # SQL in a text value is stored as text, and the tables are all there.
    drop = "'); DROP TABLE orders; --"
    stored = hostile(
        seed_context,
        "shop",
        SHOP_STATE,
        tool_calls(("refund_order", json.dumps({"order_id": 1004, "amount_cents": 4800, "reason": drop}))),
        REFUND_1004,
    )
    assert stored.verdict.passed  # the refund is right, whatever its reason says
    assert [c.after for c in stored.changes] == [
        {"refund_id": 1, "order_id": 1004, "amount_cents": 4800, "reason": drop}
    ]
    assert digest(seed_context.seeds_dir / "sql" / "shop.sqlite") == before


def test_five_hundred_turns_stop_at_the_turn_limit(seed_context):
    completion = tool_calls(*[("get_order_status", '{"order_id": 1004}')] * 500)
    outcome = hostile(seed_context, "shop", SHOP_STATE, completion, REFUND_1004)
    assert (outcome.end_reason, outcome.turns, outcome.verdict.code) == ("max_turns", 30, "max_turns")
    assert len([m for m in outcome.transcript if m["role"] == "tool"]) == 30  # the other 470 never ran


def test_ten_megabytes_of_arguments_end_the_episode_unparsed(seed_context):
    before = digest(seed_context.seeds_dir / "sql" / "shop.sqlite")
    huge = json.dumps({"order_id": 1004, "amount_cents": 4800, "reason": "x" * 10_000_000})
    outcome = hostile(seed_context, "shop", SHOP_STATE, tool_calls(("refund_order", huge)), REFUND_1004)
    assert outcome.end_reason == "invalid_call"
    assert outcome.end_detail == f"'refund_order': {len(huge) + 12} bytes, over the limit of 16384 bytes"
    assert (outcome.changes, outcome.verdict.passed) == ([], False)
    assert digest(seed_context.seeds_dir / "sql" / "shop.sqlite") == before


def test_a_tool_that_does_not_exist_ends_the_episode(seed_context):
    outcome = hostile(seed_context, "shop", SHOP_STATE, tool_calls(("drop_database", "{}")), REFUND_1004)
    assert (outcome.end_reason, outcome.verdict.code, outcome.changes) == ("invalid_call", "invalid_call", [])
    assert outcome.end_detail.startswith("unknown tool 'drop_database'")


def test_claiming_success_without_a_call_fails(seed_context):
    claim = [{"role": "assistant", "content": "I have refunded order 1004 in full. Anything else?"}]
    outcome = hostile(seed_context, "shop", SHOP_STATE, claim, REFUND_1004)
    assert (outcome.end_reason, outcome.turns, outcome.changes) == ("answered", 1, [])
    assert outcome.verdict.reason == 'missing_change: refunds/*: {"order_id": 1004, "amount_cents": 4800}'


def test_paths_outside_the_episode_folder_are_refused(seed_context, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative escape would land here
    (tmp_path / "outside.txt").write_text("keep\n")
    completion = tool_calls(
        ("write_file", json.dumps({"path": "../outside.txt", "content": "owned"})),
        ("read_file", json.dumps({"path": "/etc/passwd"})),
        ("move_file", json.dumps({"source": "a.txt", "destination": "../../a.txt"})),
    )
    goal = {"changes": [{"collection": "files", "key": "a.txt", "after": None}]}
    outcome = hostile(seed_context, "files", FILES_STATE, completion, goal)
    errors = [json.loads(m["content"]) for m in outcome.transcript if m["role"] == "tool"]
    assert errors == [
        {"error": "'../outside.txt' leaves the folder"},
        {"error": "'/etc/passwd' is absolute"},
        {"episode_end": "tool_error", "detail": "move_file: '../../a.txt' leaves the folder"},
    ]
    assert (outcome.end_reason, outcome.changes) == ("tool_error", [])
    assert (tmp_path / "outside.txt").read_text() == "keep\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside.txt"]
