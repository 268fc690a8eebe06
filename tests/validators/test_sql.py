"""`sql_result`: read-only execution, result comparison, reason codes, params checks and the gold cache."""

import os
import sqlite3
from pathlib import Path

import pytest

from tests.paths import SEEDS
from validators.registry import REGISTRY, VerifyContext, spec_problems, verify
from validators.seeds import discover_seed_files, read_seed_file
from validators.verifiers.sql import QueryResult, SqlTaskError, compare_results, counterfactual

GOLD = "SELECT name, price FROM items WHERE price > 1 ORDER BY price DESC"


@pytest.fixture
def context(tmp_path: Path) -> VerifyContext:
    """A tiny shop database in tmp_path, found through seeds_dir like a bundled fixture."""
    conn = sqlite3.connect(tmp_path / "shop.db")
    conn.executescript(
        """
        CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price REAL NOT NULL);
        INSERT INTO items VALUES (1, 'apple', 1.5), (2, 'bread', 2.0), (3, 'candy', 0.1), (4, 'dates', 3.25);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, item_id INTEGER REFERENCES items(id), qty INTEGER);
        INSERT INTO orders VALUES (1, 1, 3), (2, 2, 1), (3, 1, 2);
        """
    )
    conn.commit()
    conn.close()
    return VerifyContext(seeds_dir=tmp_path)


def sql_task(gold: str = GOLD, **extra) -> dict:
    return {"verifier": {"name": "sql_result", "params": {"database": "shop.db", "gold_query": gold, **extra}}}


@pytest.mark.parametrize(
    ("completion", "reason"),
    [
        # The gold query itself, fenced.
        (f"```sql\n{GOLD}\n```", "ok"),
        # Same rows in another order: order does not matter by default.
        ("SELECT name, price FROM items WHERE price > 1", "ok"),
        # Another way to the same rows, with a trailing semicolon and a comment.
        ("-- items above one\nSELECT name, price FROM items WHERE price >= 1.5;", "ok"),
        # Integral floats equal ints and float noise is tolerated.
        ("SELECT name, price + 1e-12 FROM items WHERE price > 1", "ok"),
        # A row too many.
        ("SELECT name, price FROM items", "result_mismatch: expected 3 rows, got 4"),
        # Same count, different rows.
        (
            "SELECT name, price FROM items WHERE price < 3",
            "result_mismatch: first differing row (sorted): expected ('dates', 3.25), got ('candy', 0.1)",
        ),
        # Text is not a number.
        (
            "SELECT name, CAST(price AS TEXT) FROM items WHERE price > 1",
            "result_mismatch: first differing row (sorted): expected ('apple', 1.5), got ('apple', '1.5')",
        ),
        # A column too many.
        ("SELECT name, price, id FROM items WHERE price > 1", "result_mismatch: expected 2 columns, got 3"),
        # ATTACH could read or create other files.
        ("ATTACH DATABASE 'other.db' AS other", "not_read_only: ATTACH"),
        # VACUUM INTO would write a copy of the database.
        ("VACUUM INTO 'copy.db'", "not_read_only: VACUUM"),
        # A writing PRAGMA.
        ("PRAGMA journal_mode = WAL", "not_read_only: PRAGMA"),
        # Inserting.
        ("INSERT INTO items VALUES (9, 'eggs', 4.0)", "not_read_only: INSERT"),
        # Inserting behind a CTE: the authorizer catches what the keyword check cannot.
        ("WITH x AS (SELECT 1) INSERT INTO items SELECT 9, 'eggs', 4.0 FROM x", "not_read_only: INSERT items"),
        # Dropping.
        ("DROP TABLE items", "not_read_only: DROP"),
        # Two statements, the second a write.
        ("SELECT 1; DROP TABLE items", "multiple_statements: send exactly one SQL statement"),
        # A recursive CTE without a bound that returns one row at the end: the time limit ends it.
        (
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*), 1 FROM c",
            "timeout: limit 0.5s",
        ),
        # An unbounded recursive CTE streaming rows: the row cap ends it.
        (
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x, x FROM c",
            "result_mismatch: expected 3 rows, got more than 10000",
        ),
        # A syntax error.
        ("SELECT name FROM items WHERE", "sql_error: incomplete input"),
        # A misspelt keyword.
        ("SELEC name FROM items", "sql_error: expected a query starting with SELECT, WITH or VALUES, got SELEC"),
        # An unknown column.
        ("SELECT nam, price FROM items", "sql_error: no such column: nam"),
        # Empty.
        ("", "no_sql"),
        # Only a comment.
        ("```sql\n-- nothing\n```", "no_sql"),
        # A huge value is refused by SQLITE_LIMIT_LENGTH.
        ("SELECT randomblob(100000000), 1", "sql_error: string or blob too big"),
    ],
)
def test_verdicts(context, completion, reason):
    verdict = verify(sql_task(timeout_s=0.5), completion, context=context)
    assert verdict.reason == reason
    assert verdict.passed == (reason == "ok")


COUNT_GOLD = "SELECT COUNT(*) FROM items WHERE price > 1"
JOIN_GOLD = "SELECT COUNT(*) FROM orders o JOIN items i ON i.id = o.item_id WHERE i.price > 1"
ONE_ROW_GOLD = "SELECT name FROM items WHERE price > 3"


@pytest.mark.parametrize(
    ("gold", "completion", "reason"),
    [
        # The constant: no table read at all.
        (COUNT_GOLD, "SELECT 3;", "not_from_data: does not read items, which the gold query reads"),
        # A constant row through VALUES.
        (COUNT_GOLD, "SELECT * FROM (VALUES (3));", "not_from_data: does not read items"),
        # The constant beside the table: items is read (SQLite reports it with no column), the value is not.
        (COUNT_GOLD, "SELECT 3 FROM items LIMIT 1;", "not_from_data: the result stays the same when items row"),
        # The constant behind a filter that reads a column: only the counterfactual sees through it.
        (COUNT_GOLD, "SELECT 3 FROM items WHERE price > 1 LIMIT 1", "not_from_data: the result stays the same"),
        # The constant behind the gold query itself.
        (COUNT_GOLD, f"SELECT 3 WHERE EXISTS ({COUNT_GOLD})", "not_from_data: the result stays the same"),
        # Arithmetic that zeroes the data out.
        (COUNT_GOLD, "SELECT COUNT(*) * 0 + 3 FROM items", "not_from_data: the result stays the same"),
        # One matching row: removing it empties the gold, so a value of it changes instead, and the constant stays.
        (ONE_ROW_GOLD, f"SELECT 'dates' WHERE EXISTS ({ONE_ROW_GOLD})", "not_from_data: the result stays the same"),
        # The right count without the table the question is about.
        (JOIN_GOLD, "SELECT COUNT(*) FROM orders", "not_from_data: does not read items, which the gold query reads"),
        # The gold query.
        (COUNT_GOLD, COUNT_GOLD, "ok"),
        # COUNT(*) reads no column, yet counts the data.
        (COUNT_GOLD, "SELECT COUNT(*) FROM items WHERE price >= 1.5", "ok"),
        # Another equivalent formulation.
        (COUNT_GOLD, "SELECT SUM(price > 1) FROM items", "ok"),
        # The join written as a subquery reads the same tables.
        (JOIN_GOLD, "SELECT COUNT(*) FROM orders WHERE item_id IN (SELECT id FROM items WHERE price > 1)", "ok"),
    ],
)
def test_results_must_come_from_the_data(context, gold, completion, reason):
    verdict = verify(sql_task(gold), completion, context=context)
    assert verdict.reason.startswith(reason), verdict.reason
    assert verdict.passed == (reason == "ok")


def test_the_counterfactual_removes_a_row_with_its_dependents(context):
    # Removing item 1 changes the count; the orders that reference it go too, so the copy is a valid database.
    path = context.seeds_dir / "shop.db"
    changed = counterfactual(path, COUNT_GOLD, ordered=False)
    assert changed.change == "items row 1 is removed"
    assert changed.gold.rows == ((2,),)
    conn = sqlite3.connect(":memory:")
    conn.deserialize(changed.database)
    assert conn.execute("SELECT COUNT(*) FROM orders WHERE item_id NOT IN (SELECT id FROM items)").fetchone() == (0,)
    assert conn.execute("SELECT COUNT(*) FROM orders").fetchone() == (1,)


def test_a_counterfactual_changes_a_value_when_every_removal_empties_the_gold(context):
    # Only items row 4 is above 3: a copy without it has no answer left; one with its name changed does.
    changed = counterfactual(context.seeds_dir / "shop.db", ONE_ROW_GOLD, ordered=False)
    assert changed.change == "name of items row 4 changes"
    assert changed.gold.rows == (("dates~",),)


def test_no_counterfactual_when_no_removal_changes_the_gold(context):
    # A gold result that no single row decides cannot be checked this way (and is not refused for it).
    assert counterfactual(context.seeds_dir / "shop.db", "SELECT MIN(1, COUNT(*)) FROM items", ordered=False) is None


@pytest.mark.parametrize("gold", [GOLD, COUNT_GOLD, JOIN_GOLD, ONE_ROW_GOLD])
def test_hack_probes_fail(context, gold):
    params = sql_task(gold)["verifier"]["params"]
    probes = REGISTRY.get("sql_result").hack_probes(params, None, context)
    assert [p.name for p in probes] == [
        "literal_select",
        "literal_values",
        "literal_beside_table",
        "literal_behind_gold",
    ]
    for probe in probes:
        verdict = verify(sql_task(gold), probe.completion, context=context)
        assert verdict.code == "not_from_data", (probe, verdict)


def test_hack_probes_fail_on_every_bundled_seed():
    # The literal rows of every bundled gold, in four disguises, are refused; the references still pass.
    verifier = REGISTRY.get("sql_result")
    for path in discover_seed_files([SEEDS / "sql"]):
        records, _ = read_seed_file(path)
        for record in records:
            params = record.raw["verifier"]["params"]
            assert verify({"verifier": {"name": "sql_result", "params": params}}, record.raw["reference"]).passed
            for probe in verifier.hack_probes(params, record.raw["reference"], VerifyContext(seeds_dir=SEEDS)):
                verdict = verify({"verifier": {"name": "sql_result", "params": params}}, probe.completion)
                assert verdict.code == "not_from_data", (record.origin, probe.name, verdict)


def test_the_database_is_unchanged_after_hostile_queries(context):
    # Whatever was refused above must not have touched the file.
    path = context.seeds_dir / "shop.db"
    before = path.read_bytes()
    for query in ("DELETE FROM items", "ATTACH 'x.db' AS x", "VACUUM INTO 'copy.db'", "SELECT 1; DELETE FROM items"):
        assert not verify(sql_task(), query, context=context).passed
    assert path.read_bytes() == before
    assert sorted(p.name for p in context.seeds_dir.iterdir()) == ["shop.db"]


@pytest.mark.parametrize(
    ("completion", "reason"),
    [
        # The gold order.
        ("SELECT name, price FROM items WHERE price > 1 ORDER BY price DESC", "ok"),
        # Same rows, wrong order: ordered tasks say so.
        (
            "SELECT name, price FROM items WHERE price > 1 ORDER BY price",
            "result_mismatch: same rows in a different order (this task's order matters)",
        ),
        # Different rows in order: the first differing row is named.
        (
            "SELECT name, price + 1 FROM items WHERE price > 1 ORDER BY price DESC",
            "result_mismatch: row 1: expected ('dates', 3.25), got ('dates', 4.25)",
        ),
    ],
)
def test_ordered_tasks(context, completion, reason):
    assert verify(sql_task(ordered=True), completion, context=context).reason == reason


@pytest.mark.parametrize(
    ("expected", "got", "ordered", "mismatch"),
    [
        # An int equals the same float.
        (((1,), (2,)), ((2.0,), (1,)), False, None),
        # Floats within tolerance.
        (((0.3,),), ((0.1 + 0.2,),), False, None),
        # Floats outside tolerance.
        (((0.3,),), ((0.31,),), False, "first differing row (sorted): expected (0.3,), got (0.31,)"),
        # NULLs compare equal to NULLs.
        (((None, "a"),), ((None, "a"),), True, None),
        # Duplicates matter (a multiset, not a set).
        (((1,), (1,), (2,)), ((1,), (2,), (2,)), False, "first differing row (sorted): expected (1,), got (2,)"),
        # Blobs compare exactly.
        (((b"\x00",),), ((b"\x01",),), False, "first differing row (sorted): expected (b'\\x00',), got (b'\\x01',)"),
    ],
)
def test_compare_results(expected, got, ordered, mismatch):
    columns = len(expected[0])
    result = compare_results(QueryResult(columns, expected, False), QueryResult(columns, got, False), ordered=ordered)
    assert result == mismatch


def test_params_problems_name_the_resolved_path_and_the_fix(context):
    problems = spec_problems(
        {"name": "sql_result", "params": {"database": "nope.db", "gold_query": "SELECT 1"}}, context
    )
    assert len(problems) == 1
    assert str(context.seeds_dir / "nope.db") in problems[0]
    assert "SEEDWHEEL_SEEDS" in problems[0] and problems[0].endswith("(/verifier/params/database)")


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        # A valid spec.
        ({"database": "shop.db", "gold_query": GOLD}, None),
        # A gold query that does not run.
        ({"database": "shop.db", "gold_query": "SELECT nope FROM items"}, "no such column: nope"),
        # A gold query that writes.
        ({"database": "shop.db", "gold_query": "DELETE FROM items"}, "not_read_only"),
        # gold_query is required.
        ({"database": "shop.db"}, "'gold_query' is a required property"),
        # ordered must be a boolean.
        ({"database": "shop.db", "gold_query": GOLD, "ordered": "yes"}, "is not of type 'boolean'"),
    ],
)
def test_params_problems(context, params, problem):
    problems = spec_problems({"name": "sql_result", "params": params}, context)
    if problem is None:
        assert problems == []
    else:
        assert any(problem in p for p in problems), problems


def test_an_absolute_database_path_ignores_seeds_dir(context, tmp_path):
    absolute = sql_task()
    absolute["verifier"]["params"]["database"] = str(tmp_path / "shop.db")
    assert verify(absolute, GOLD, context=VerifyContext(seeds_dir=tmp_path / "elsewhere")).passed


def test_a_missing_database_raises_a_task_error(context):
    # A broken task is not the model's fault: it raises instead of scoring every completion 0.
    broken = sql_task()
    broken["verifier"]["params"]["database"] = "missing.db"
    with pytest.raises(SqlTaskError, match=r"missing\.db"):
        verify(broken, GOLD, context=context)


def test_the_gold_cache_follows_the_file(context):
    # Changing the fixture (new mtime) must change the expected rows.
    path = context.seeds_dir / "shop.db"
    assert verify(sql_task(), GOLD, context=context).passed
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO items VALUES (5, 'eggs', 9.0)")
    conn.commit()
    conn.close()
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    stale = "SELECT name, price FROM items WHERE price > 1 AND name != 'eggs'"
    assert verify(sql_task(), stale, context=context).reason == "result_mismatch: expected 4 rows, got 3"


def test_wrong_answer_fails(context):
    wrong = REGISTRY.get("sql_result").wrong_answer({"database": "shop.db", "gold_query": GOLD + ";"})
    assert wrong is not None
    assert verify(sql_task(), wrong, context=context).reason == "result_mismatch: expected 3 rows, got 0"
