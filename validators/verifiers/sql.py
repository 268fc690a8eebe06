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
"""

from __future__ import annotations

import math
import re
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

from validators.extract import extract_code
from validators.registry import Completion, Verdict, Verifier, VerifyContext, register

DEFAULT_TIMEOUT_S = 2.0
MAX_TIMEOUT_S = 60.0
MAX_ROWS = 10_000
# SQLite VM instructions between progress checks, and the total a query may use (~ seconds of work).
PROGRESS_EVERY = 10_000
MAX_STEPS = 200_000_000
MAX_SQL_CHARS = 20_000
MAX_VALUE_BYTES = 1_000_000
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


class SqlTaskError(ValueError):
    """A task's SQL fixture is unusable: the database file is missing or unreadable, or the gold query fails."""


@dataclass(frozen=True)
class QueryResult:
    """Rows a query returned (normalized), its column count, and whether it hit the row cap."""

    columns: int
    rows: tuple[tuple[Any, ...], ...]
    truncated: bool


class QueryRefused(ValueError):
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
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
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
        A `QueryResult` with normalized rows.

    Raises:
        QueryRefused: `no_sql`, `not_read_only`, `multiple_statements`, `timeout` or `sql_error`.

    Example:
        >>> import tempfile; db = Path(tempfile.mkdtemp()) / "t.db"; sqlite3.connect(db).close()
        >>> run_query(db, "SELECT 1 + 1").rows
        ((2,),)
    """
    stripped = _LEADING_NOISE.sub("", query)
    word = _FIRST_WORD.match(stripped)
    if word is None:
        raise QueryRefused("no_sql")
    keyword = word.group(0).upper()
    if keyword in _WRITE_KEYWORDS:
        raise QueryRefused("not_read_only", keyword)
    if keyword not in _READ_KEYWORDS:
        raise QueryRefused("sql_error", f"expected a query starting with SELECT, WITH or VALUES, got {keyword[:20]}")
    denied: list[str] = []

    def authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
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
        conn = _connect(path)
    except sqlite3.Error as exc:
        raise SqlTaskError(f"cannot open SQLite database {path}: {exc}") from exc
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
        conn.close()


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
        >>> gold_result(Path("/nonexistent.db"), "SELECT 1").rows
        Traceback (most recent call last):
        ...
        validators.verifiers.sql.SqlTaskError: SQLite database not found: /nonexistent.db ...
    """
    try:
        stat = path.stat()
    except OSError as exc:
        raise SqlTaskError(
            f"SQLite database not found: {path} (resolved from verifier.params.database; relative paths resolve "
            "against the seeds directory - set SEEDWHEEL_SEEDS or VerifyContext(seeds_dir=...), or fix the path)"
        ) from exc
    return _gold_result(str(path), stat.st_mtime_ns, stat.st_size, query, timeout_s)


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
    want, have = expected.rows, got.rows
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
    version = 1
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
        mismatch = compare_results(expected, got, ordered=bool(params.get("ordered", False)))
        return Verdict.fail("result_mismatch", mismatch) if mismatch else Verdict.ok()

    def wrong_answer(self, params: Mapping[str, Any]) -> str | None:
        # Wrapping keeps any gold query valid (a trailing comment or semicolon included). When the gold result
        # is empty this "wrong" answer is right, and validation flagging that task is the point: an empty
        # expected result rewards a query that finds nothing.
        gold = params["gold_query"].strip().rstrip(";")
        return f"```sql\nSELECT * FROM (\n{gold}\n) LIMIT 0\n```"
