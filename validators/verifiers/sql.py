"""`sql_result`: the completion's SQL query returns the same rows as the task's gold query on a SQLite file.

Params: `database` (a SQLite file, absolute or relative to `VerifyContext.seeds_dir`), `gold_query`, optional
`ordered` (default false: rows compare as a multiset) and `timeout_s`.

The completion's query runs in process, but read-only in four independent ways: the database is opened with
`mode=ro&immutable=1`; the statement must start with `SELECT`, `WITH` or `VALUES`; an authorizer allows only
reading, selecting, functions and recursive CTEs (so `ATTACH`, `PRAGMA`, `VACUUM INTO`, writes, DDL and
transactions are refused); and `SQLITE_LIMIT_ATTACHED` is 0. A progress handler ends runaway queries
(a recursive CTE without a bound) at `timeout_s` or a VM step budget, whichever comes first; results stop at
`MAX_ROWS` rows and strings/blobs at `MAX_VALUE_BYTES`.

Rows compare column by column; numbers compare by value with a small tolerance (`1` equals `1.0`,
`0.1 + 0.2` equals `0.3`), text and blobs exactly, and a number never equals text. Column names are not
compared (aliases are the model's choice). The gold result is cached in memory per (database path, mtime,
size, gold query), so scoring many completions of one task runs the gold query once.

The right rows must also come from the data (`not_from_data` otherwise), by two rules:

1. **Tables** (SQLite's authorizer, never the text): the completion must read every table the gold query
   reads. A read is any SQLITE_READ event, including the column-less one SQLite issues for a table scanned
   for `COUNT(*)` or under a constant select list, so `SELECT COUNT(*) FROM t` reads `t`; `SELECT 4;` and
   `SELECT * FROM (VALUES (4));` read nothing. Columns are not required: `COUNT(*)` counts data without
   reading a column, and an equivalent query may filter on other columns than the gold does.
2. **Counterfactual**: `SELECT 4 FROM customers LIMIT 1`, or a constant behind a filter or `EXISTS (gold)`,
   reads the table yet returns a constant. So a result that matches is run again on a copy of the database
   with one change that moves the gold result (`counterfactual`: a row removed with its dependents, or one
   value changed); if the completion's result does not move, it does not come from the data. The copy keeps
   the declared constraints, so a query equivalent to the gold moves with it. A task whose gold no single
   change moves gets rule 1 only.
"""

from __future__ import annotations

import itertools
import math
import re
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

from core import SeedwheelError
from validators.extract import extract_code
from validators.registry import Completion, HackProbe, Verdict, Verifier, VerifyContext, register

DEFAULT_TIMEOUT_S = 2.0
MAX_TIMEOUT_S = 60.0
MAX_ROWS = 10_000
# SQLite VM instructions between progress checks, and the total a query may use (~ seconds of work).
PROGRESS_EVERY = 10_000
MAX_STEPS = 200_000_000
MAX_SQL_CHARS = 20_000
MAX_VALUE_BYTES = 1_000_000
# The counterfactual search: rows tried (spread over the gold's tables) and seconds spent, at most, per task.
MAX_COUNTERFACTUAL_TRIES = 200
COUNTERFACTUAL_BUDGET_S = 5.0
# Gold results longer than this get no literal-SQL probes (a probe that long is no policy's shortcut).
MAX_PROBE_ROWS = 50
REL_TOL = 1e-6
ABS_TOL = 1e-9
SQL_FENCES = frozenset({"sql", "sqlite", "sqlite3", "postgresql", "mysql"})

# What a read-only query may do. Recursive CTEs read too; they are bounded by the progress handler.
_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_READ, sqlite3.SQLITE_SELECT, sqlite3.SQLITE_FUNCTION, 33})
_ACTION_NAMES = {
    getattr(sqlite3, f"SQLITE_{name}"): name
    for name in [
        "CREATE_INDEX",
        "CREATE_TABLE",
        "CREATE_TEMP_INDEX",
        "CREATE_TEMP_TABLE",
        "CREATE_TEMP_TRIGGER",
        "CREATE_TEMP_VIEW",
        "CREATE_TRIGGER",
        "CREATE_VIEW",
        "DELETE",
        "DROP_INDEX",
        "DROP_TABLE",
        "DROP_TEMP_INDEX",
        "DROP_TEMP_TABLE",
        "DROP_TEMP_TRIGGER",
        "DROP_TEMP_VIEW",
        "DROP_TRIGGER",
        "DROP_VIEW",
        "INSERT",
        "PRAGMA",
        "TRANSACTION",
        "UPDATE",
        "ATTACH",
        "DETACH",
        "ALTER_TABLE",
        "REINDEX",
        "ANALYZE",
        "CREATE_VTABLE",
        "DROP_VTABLE",
        "SAVEPOINT",
    ]
    if hasattr(sqlite3, f"SQLITE_{name}")
}
_READ_KEYWORDS = frozenset({"SELECT", "WITH", "VALUES"})
_WRITE_KEYWORDS = frozenset(
    [
        "INSERT",
        "UPDATE",
        "DELETE",
        "REPLACE",
        "UPSERT",
        "MERGE",
        "CREATE",
        "DROP",
        "ALTER",
        "TRUNCATE",
        "ATTACH",
        "DETACH",
        "PRAGMA",
        "VACUUM",
        "REINDEX",
        "ANALYZE",
        "BEGIN",
        "COMMIT",
        "END",
        "ROLLBACK",
        "SAVEPOINT",
        "RELEASE",
        "GRANT",
        "REVOKE",
    ]
)
_LEADING_NOISE = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/|\()*", re.DOTALL)
_FIRST_WORD = re.compile(r"[A-Za-z_]+")


class SqlTaskError(SeedwheelError, ValueError):
    """A task's SQL fixture is unusable: the database file is missing or unreadable, or the gold query fails."""


@dataclass(frozen=True)
class QueryResult:
    """Rows a query returned (normalized), its column count, whether it hit the row cap, and what it read.

    `reads` are the (table, column) pairs of the SQLITE_READ events the authorizer saw while the query was
    prepared and run; a table scanned for `COUNT(*)` or under a constant select list comes with the column "".
    """

    columns: int
    rows: tuple[tuple[Any, ...], ...]
    truncated: bool
    reads: frozenset[tuple[str, str]] = frozenset()

    @property
    def tables(self) -> frozenset[str]:
        """The tables the query read, with or without a column."""
        return frozenset(table for table, _ in self.reads)


class QueryRefused(SeedwheelError, ValueError):
    """The query was not run to completion; `code` and `detail` become the verdict's reason."""

    def __init__(self, code: str, detail: str = ""):
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail


def resolve_database(database: str, context: VerifyContext) -> Path:
    """The SQLite file a task names: absolute as given, else relative to `context.seeds_dir`.

    Example:
        >>> str(resolve_database("sql/shop.db", VerifyContext(seeds_dir=Path("/data/seeds"))))
        '/data/seeds/sql/shop.db'
    """
    path = Path(database)
    return path if path.is_absolute() else context.seeds_dir / path


def _normalize(value: Any) -> Any:
    # Integral floats become ints so `SUM` over REAL columns and `COUNT` agree; text and blobs stay exact.
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _connect(path: Path) -> sqlite3.Connection:
    uri = f"file:{quote(str(path))}?mode=ro&immutable=1"
    return _limited(sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False))


def _limited(conn: sqlite3.Connection) -> sqlite3.Connection:
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_CHARS * 4)
    return conn


def run_query(
    path: Path, query: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, max_rows: int = MAX_ROWS
) -> QueryResult:
    """Run one read-only query on a SQLite file under a time, step and row budget.

    Args:
        path: the database file (must exist).
        query: one SQL statement.
        timeout_s: wall-clock budget for preparing and stepping the query.
        max_rows: rows kept; one more marks the result truncated.

    Returns:
        A `QueryResult` with normalized rows and the tables the query read.

    Raises:
        QueryRefused: `no_sql`, `not_read_only`, `multiple_statements`, `timeout` or `sql_error`.
        SqlTaskError: the file cannot be opened.

    Example:
        >>> import tempfile; db = Path(tempfile.mkdtemp()) / "t.db"; sqlite3.connect(db).close()
        >>> run_query(db, "SELECT 1 + 1").rows
        ((2,),)
    """
    _check_keyword(query)
    try:
        conn = _connect(path)
    except sqlite3.Error as exc:
        raise SqlTaskError(f"cannot open SQLite database {path}: {exc}") from exc
    try:
        return _execute(conn, query, timeout_s=timeout_s, max_rows=max_rows)
    finally:
        conn.close()


def _check_keyword(query: str) -> None:
    stripped = _LEADING_NOISE.sub("", query)
    word = _FIRST_WORD.match(stripped)
    if word is None:
        raise QueryRefused("no_sql")
    keyword = word.group(0).upper()
    if keyword in _WRITE_KEYWORDS:
        raise QueryRefused("not_read_only", keyword)
    if keyword not in _READ_KEYWORDS:
        raise QueryRefused("sql_error", f"expected a query starting with SELECT, WITH or VALUES, got {keyword[:20]}")


def _execute(conn: sqlite3.Connection, query: str, *, timeout_s: float, max_rows: int) -> QueryResult:
    """Run a query on an open connection behind the read-only authorizer and the progress budget."""
    denied: list[str] = []
    reads: set[tuple[str, str]] = set()

    def authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
        if action == sqlite3.SQLITE_READ and arg1:
            reads.add((arg1, arg2 or ""))
        if action in _ALLOWED_ACTIONS:
            return sqlite3.SQLITE_OK
        name = _ACTION_NAMES.get(action, f"action {action}")
        denied.append(f"{name} {arg1}" if arg1 else name)
        return sqlite3.SQLITE_DENY

    deadline = time.monotonic() + timeout_s
    steps = [0]
    stopped: list[str] = []

    def progress() -> int:
        steps[0] += PROGRESS_EVERY
        if steps[0] > MAX_STEPS:
            stopped.append(f"step limit {MAX_STEPS}")
        elif time.monotonic() > deadline:
            stopped.append(f"limit {timeout_s:g}s")
        return 1 if stopped else 0

    try:
        conn.set_authorizer(authorize)
        conn.set_progress_handler(progress, PROGRESS_EVERY)
        cursor = conn.execute(query)
        if cursor.description is None:
            raise QueryRefused("no_sql", "the statement returns no rows")
        rows = cursor.fetchmany(max_rows + 1)
        return QueryResult(
            columns=len(cursor.description),
            rows=tuple(tuple(_normalize(v) for v in row) for row in rows[:max_rows]),
            truncated=len(rows) > max_rows,
            reads=frozenset(reads),
        )
    except sqlite3.ProgrammingError as exc:
        if "one statement" in str(exc):
            raise QueryRefused("multiple_statements", "send exactly one SQL statement") from exc
        raise QueryRefused("sql_error", _short(exc)) from exc
    except (sqlite3.Error, OverflowError, MemoryError) as exc:
        if stopped:
            raise QueryRefused("timeout", stopped[0]) from exc
        if denied:
            raise QueryRefused("not_read_only", denied[0]) from exc
        raise QueryRefused("sql_error", _short(exc)) from exc
    finally:
        conn.set_authorizer(None)
        conn.set_progress_handler(None, 0)


def _short(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


@lru_cache(maxsize=256)
def _gold_result(path: str, mtime_ns: int, size: int, query: str, timeout_s: float) -> QueryResult:
    # mtime and size are part of the key only to invalidate the cache when the fixture file changes.
    try:
        return run_query(Path(path), query, timeout_s=max(timeout_s, DEFAULT_TIMEOUT_S))
    except QueryRefused as exc:
        raise SqlTaskError(f"gold query fails on {path}: {exc}; fix verifier.params.gold_query") from exc


def gold_result(path: Path, query: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> QueryResult:
    """The gold query's result, cached per (path, mtime, size, query).

    Raises:
        SqlTaskError: the file is missing or the gold query does not run.

    Example:
        >>> try:
        ...     gold_result(Path("/nonexistent.db"), "SELECT 1")
        ... except SqlTaskError as error:  # a ValueError; its cause, the FileNotFoundError, is chained
        ...     print(error)  # doctest: +ELLIPSIS
        SQLite database not found: /nonexistent.db (resolved from verifier.params.database; ...)
    """
    try:
        stat = path.stat()
    except OSError as exc:
        raise SqlTaskError(
            f"SQLite database not found: {path} (resolved from verifier.params.database; relative paths resolve "
            "against the seeds directory - set SEEDWHEEL_SEEDS or VerifyContext(seeds_dir=...), or fix the path)"
        ) from exc
    return _gold_result(str(path), stat.st_mtime_ns, stat.st_size, query, timeout_s)


@dataclass(frozen=True)
class Counterfactual:
    """The task's database with one change that keeps it valid and changes the gold result.

    Attributes:
        database: the changed database, serialized (`sqlite3.Connection.deserialize` opens it in memory).
        change: what changed, for reasons (`customers row 7 is removed`).
        gold: the gold query's result on it.
    """

    database: bytes
    change: str
    gold: QueryResult


def counterfactual(
    path: Path, query: str, *, ordered: bool, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Counterfactual | None:
    """A copy of the database on which the gold result differs, cached per (path, mtime, size, query, ordered).

    The search, within `MAX_COUNTERFACTUAL_TRIES` removals and `COUNTERFACTUAL_BUDGET_S` seconds: remove one row
    of a table the gold reads (rowid order, round-robin over the tables) together with the rows that reference
    it through foreign keys, and keep the first removal that changes the gold result and leaves it non-empty.
    When every such removal empties it, change instead one value the gold reads in one of those rows (a number
    + 1, a text + "~"; keys are never changed, and a change a constraint refuses is skipped); failing that, keep
    the first emptying removal. The copy keeps every declared constraint, so two queries that agree on every
    valid database agree on it too.

    Args:
        path: the database file.
        query: the gold query.
        ordered: whether row order is part of the result (as the task's `ordered`).
        timeout_s: the time budget of one gold run.

    Returns:
        The counterfactual, or None when no single change found moves the gold result (or no table is read).

    Raises:
        SqlTaskError: the file is missing or the gold query does not run.
    """
    stat = path.stat()
    return _counterfactual(str(path), stat.st_mtime_ns, stat.st_size, query, ordered, timeout_s)


@lru_cache(maxsize=256)
def _counterfactual(
    path: str, mtime_ns: int, size: int, query: str, ordered: bool, timeout_s: float
) -> Counterfactual | None:
    original = _gold_result(path, mtime_ns, size, query, timeout_s)
    source = _connect(Path(path))
    copy = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    try:
        source.backup(copy)
    finally:
        source.close()
    budget = max(timeout_s, DEFAULT_TIMEOUT_S)

    def attempt(
        change: str, apply: Callable[..., bool], *args: Any, empty_ok: bool
    ) -> tuple[Counterfactual | None, bool]:
        """Apply a change inside a savepoint; keep it when the gold result moves. Returns (kept, moved)."""
        copy.execute("SAVEPOINT counterfactual")
        try:
            applied = apply(*args)
        except sqlite3.IntegrityError:
            applied = False  # a change a constraint refuses is no valid database
        changed = _execute(_limited(copy), query, timeout_s=budget, max_rows=MAX_ROWS) if applied else original
        moved = compare_results(original, changed, ordered=ordered) is not None
        if moved and (changed.rows or empty_ok):
            copy.execute("RELEASE counterfactual")
            return Counterfactual(copy.serialize(), change, changed), True
        copy.execute("ROLLBACK TO counterfactual")
        copy.execute("RELEASE counterfactual")
        return None, moved

    try:
        references, keys = _schema(copy)
        deadline = time.monotonic() + COUNTERFACTUAL_BUDGET_S
        emptying: list[tuple[str, int]] = []
        for table, rowid in _rows_to_try(copy, sorted(original.tables)):
            if time.monotonic() > deadline:
                break
            found, moved = attempt(
                f"{table} row {rowid} is removed",
                _delete_with_dependents,
                copy,
                table,
                [rowid],
                references,
                empty_ok=False,
            )
            if found is not None:
                return found
            if moved:
                emptying.append((table, rowid))
        for table, rowid in emptying:
            read = sorted(
                column for t, column in original.reads if t == table and column and column not in keys[table]
            )
            for column in read:
                found, _ = attempt(
                    f"{column} of {table} row {rowid} changes", _nudge, copy, table, rowid, column, empty_ok=False
                )
                if found is not None:
                    return found
        if not emptying:
            return None
        table, rowid = emptying[0]
        found, _ = attempt(
            f"{table} row {rowid} is removed", _delete_with_dependents, copy, table, [rowid], references, empty_ok=True
        )
        return found
    except QueryRefused as exc:
        raise SqlTaskError(f"gold query fails on a copy of {path}: {exc}; fix verifier.params.gold_query") from exc
    finally:
        copy.close()


def _quote(name: str) -> str:
    # Identifiers cannot be bound as parameters; these come from the database's own schema.
    return '"' + name.replace('"', '""') + '"'


def _schema(conn: sqlite3.Connection) -> tuple[dict[str, list[tuple[str, str, str | None]]], dict[str, set[str]]]:
    """Declared foreign keys by parent table, as (child table, child column, parent column or None for its
    primary key), and each table's key columns (primary, foreign, or referenced), which counterfactuals keep."""
    references: dict[str, list[tuple[str, str, str | None]]] = {}
    keys: dict[str, set[str]] = {}
    tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for table in tables:
        keys.setdefault(table, set()).update(
            row[1] for row in conn.execute(f"PRAGMA table_info({_quote(table)})") if row[5]
        )
        for row in conn.execute(f"PRAGMA foreign_key_list({_quote(table)})"):
            references.setdefault(row[2], []).append((table, row[3], row[4]))
            keys[table].add(row[3])
            if row[4]:
                keys.setdefault(row[2], set()).add(row[4])
    return references, keys


def _nudge(conn: sqlite3.Connection, table: str, rowid: int, column: str) -> bool:
    """Change one value a little: a number + 1, a text + "~". False when the value is NULL or a blob."""
    found = conn.execute(f"SELECT {_quote(column)} FROM {_quote(table)} WHERE rowid = ?", (rowid,)).fetchone()
    value = found[0] if found else None
    if isinstance(value, int | float):
        nudged: int | float | str = value + 1
    elif isinstance(value, str):
        nudged = value + "~"
    else:
        return False
    conn.execute(f"UPDATE {_quote(table)} SET {_quote(column)} = ? WHERE rowid = ?", (nudged, rowid))
    return True


def _rows_to_try(conn: sqlite3.Connection, tables: list[str]) -> list[tuple[str, int]]:
    """(table, rowid) pairs, round-robin over the tables so that each gets tried, at most the cap in all."""
    per_table: list[list[tuple[str, int]]] = []
    for table in tables:
        try:
            rowids = conn.execute(
                f"SELECT rowid FROM {_quote(table)} ORDER BY rowid LIMIT ?", (MAX_COUNTERFACTUAL_TRIES,)
            )
        except sqlite3.Error:
            continue  # a view or a WITHOUT ROWID table: no single row to remove
        per_table.append([(table, row[0]) for row in rowids])
    mixed = [pair for group in itertools.zip_longest(*per_table) for pair in group if pair is not None]
    return mixed[:MAX_COUNTERFACTUAL_TRIES]


def _delete_with_dependents(
    conn: sqlite3.Connection,
    table: str,
    rowids: list[int],
    references: Mapping[str, list[tuple[str, str, str | None]]],
) -> bool:
    """Delete rows and, following foreign keys, every row that references them (as ON DELETE CASCADE would).

    Returns:
        Whether any row was deleted.
    """
    before = conn.total_changes
    queue = [(table, rowids)]
    while queue:
        table, rowids = queue.pop()
        marks = ", ".join("?" * len(rowids))
        for child, column, key in references.get(table, ()):
            keys = [
                row[0]
                for row in conn.execute(
                    f"SELECT {_quote(key) if key else 'rowid'} FROM {_quote(table)} WHERE rowid IN ({marks})", rowids
                )
            ]
            if keys:
                found = conn.execute(
                    f"SELECT rowid FROM {_quote(child)} WHERE {_quote(column)} IN ({', '.join('?' * len(keys))})", keys
                )
                dependents = [row[0] for row in found]
                if dependents:
                    queue.append((child, dependents))
        conn.execute(f"DELETE FROM {_quote(table)} WHERE rowid IN ({marks})", rowids)
    return conn.total_changes > before


def _same_result_on(changed: Counterfactual, query: str, got: QueryResult, *, ordered: bool, timeout_s: float) -> bool:
    """Whether `query` returns `got` again on the counterfactual database (an error there proves nothing)."""
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    try:
        conn.deserialize(changed.database)
        again = _execute(_limited(conn), query, timeout_s=timeout_s, max_rows=MAX_ROWS)
    except QueryRefused:
        return False
    finally:
        conn.close()
    return compare_results(got, again, ordered=ordered) is None


def _literal(value: Any) -> str:
    """A SQL literal for a value SQLite returned."""
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bytes):
        return f"X'{value.hex()}'"
    return repr(value)


def _fenced(query: str) -> str:
    return f"```sql\n{query}\n```"


def _values_equal(expected: Any, got: Any) -> bool:
    numbers = (int, float)
    if isinstance(expected, numbers) and isinstance(got, numbers):
        if isinstance(expected, int) and isinstance(got, int):
            return expected == got
        return math.isclose(expected, got, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    return type(expected) is type(got) and expected == got


def _rows_equal(expected: Sequence[Any], got: Sequence[Any]) -> bool:
    return len(expected) == len(got) and all(_values_equal(e, g) for e, g in zip(expected, got, strict=True))


def _sort_key(row: Sequence[Any]) -> tuple[tuple[int, Any], ...]:
    # One total order over SQLite's value types; floats round to 9 digits so near-equal values sort together.
    def key(value: Any) -> tuple[int, Any]:
        if value is None:
            return (0, 0)
        if isinstance(value, int | float):
            return (1, float(f"{value:.9g}"))
        if isinstance(value, str):
            return (2, value)
        return (3, bytes(value))

    return tuple(key(v) for v in row)


def _show(row: Sequence[Any]) -> str:
    text = repr(tuple(row))
    return text if len(text) <= 80 else text[:77] + "..."


def compare_results(expected: QueryResult, got: QueryResult, *, ordered: bool) -> str | None:
    """Why `got` differs from `expected`, or None when they match.

    Example:
        >>> compare_results(QueryResult(1, ((1,), (2,)), False), QueryResult(1, ((2.0,), (1,)), False), ordered=False)
    """
    if got.columns != expected.columns:
        return f"expected {expected.columns} columns, got {got.columns}"
    if got.truncated and not expected.truncated:
        return f"expected {len(expected.rows)} rows, got more than {MAX_ROWS}"
    if len(got.rows) != len(expected.rows):
        return f"expected {len(expected.rows)} rows, got {len(got.rows)}"
    want: Sequence[tuple[Any, ...]] = expected.rows
    have: Sequence[tuple[Any, ...]] = got.rows
    if not ordered:
        want, have = sorted(want, key=_sort_key), sorted(have, key=_sort_key)
    for index, (e, g) in enumerate(zip(want, have, strict=True)):
        if not _rows_equal(e, g):
            if ordered and compare_results(expected, got, ordered=False) is None:
                return "same rows in a different order (this task's order matters)"
            where = f"row {index + 1}" if ordered else "first differing row (sorted)"
            return f"{where}: expected {_show(e)}, got {_show(g)}"
    return None


@register
class SqlResult(Verifier):
    """The completion's SQL returns the gold query's rows on the task's SQLite database (read-only)."""

    name = "sql_result"
    version = 2
    params_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["database", "gold_query"],
        "properties": {
            "database": {"type": "string", "minLength": 1},
            "gold_query": {"type": "string", "minLength": 1},
            "ordered": {"type": "boolean"},
            "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_S},
        },
        "additionalProperties": False,
    }

    def params_problems(self, params: Mapping[str, Any], context: VerifyContext) -> list[str]:
        problems = super().params_problems(params, context)
        if problems:
            return problems
        path = resolve_database(params["database"], context)
        try:
            gold_result(path, params["gold_query"], float(params.get("timeout_s", DEFAULT_TIMEOUT_S)))
        except SqlTaskError as exc:
            pointer = "database" if not path.exists() else "gold_query"
            return [f"{exc} (/verifier/params/{pointer})"]
        return []

    def fixtures(self, params: Mapping[str, Any], context: VerifyContext) -> list[Path]:
        return [resolve_database(params["database"], context)]

    def check(self, params: Mapping[str, Any], completion: Completion, context: VerifyContext) -> Verdict:
        """Judge one completion; a missing database or broken gold query raises `SqlTaskError` (a task bug)."""
        query = extract_code(completion.text, SQL_FENCES)
        if not query.strip():
            return Verdict.fail("no_sql")
        if len(query) > MAX_SQL_CHARS:
            return Verdict.fail("sql_too_long", f"{len(query)} chars > {MAX_SQL_CHARS}")
        timeout_s = float(params.get("timeout_s", DEFAULT_TIMEOUT_S))
        path = resolve_database(params["database"], context)
        expected = gold_result(path, params["gold_query"], timeout_s)
        try:
            got = run_query(path, query, timeout_s=timeout_s)
        except QueryRefused as exc:
            return Verdict.fail(exc.code, exc.detail)
        ordered = bool(params.get("ordered", False))
        mismatch = compare_results(expected, got, ordered=ordered)
        if mismatch:
            return Verdict.fail("result_mismatch", mismatch)
        unread = sorted(expected.tables - got.tables)
        if unread:
            return Verdict.fail("not_from_data", f"does not read {', '.join(unread)}, which the gold query reads")
        changed = counterfactual(path, params["gold_query"], ordered=ordered, timeout_s=timeout_s)
        if changed is not None and _same_result_on(changed, query, got, ordered=ordered, timeout_s=timeout_s):
            return Verdict.fail(
                "not_from_data", f"the result stays the same when {changed.change}, which changes the gold result"
            )
        return Verdict.ok()

    def hack_probes(self, params: Mapping[str, Any], reference: str | None, context: VerifyContext) -> list[HackProbe]:
        """The gold rows as literals: alone (`SELECT`, `VALUES`), beside a table, and behind the gold query itself.

        No probes for an empty or long gold result.

        Raises:
            SqlTaskError: the database is missing or the gold query does not run.
        """
        gold = gold_result(resolve_database(params["database"], context), params["gold_query"])
        if not gold.rows or len(gold.rows) > MAX_PROBE_ROWS or gold.truncated:
            return []
        rows = [", ".join(_literal(value) for value in row) for row in gold.rows]
        values = "VALUES " + ", ".join(f"({row})" for row in rows)
        table = _quote(min(gold.tables)) if gold.tables else None
        inner = params["gold_query"].strip().rstrip(";")
        probes = [
            HackProbe("literal_select", _fenced(" UNION ALL ".join(f"SELECT {row}" for row in rows))),
            HackProbe("literal_values", _fenced(f"SELECT * FROM ({values})")),
            HackProbe("literal_behind_gold", _fenced(f"SELECT v.* FROM ({values}) AS v WHERE EXISTS ({inner})")),
        ]
        if table is not None:
            beside = (
                f"SELECT {rows[0]} FROM {table} LIMIT 1"
                if len(rows) == 1
                else (f"SELECT v.* FROM ({values}) AS v WHERE EXISTS (SELECT 1 FROM {table})")
            )
            probes.insert(2, HackProbe("literal_beside_table", _fenced(beside)))
        return probes

    def wrong_answer(self, params: Mapping[str, Any]) -> str | None:
        # Wrapping keeps any gold query valid (a trailing comment or semicolon included). When the gold result
        # is empty this "wrong" answer is right, and validation flagging that task is the point: an empty
        # expected result rewards a query that finds nothing.
        gold = params["gold_query"].strip().rstrip(";")
        return f"```sql\nSELECT * FROM (\n{gold}\n) LIMIT 0\n```"
