"""`sql_literal_swap`: text-to-SQL seeds as templates; literals the question states are swapped for other values.

Design. A literal of the gold query (`'Lyon'`, `'delivered'`, `1014`) that also appears verbatim in the
question is a slot. The column it is compared with (`country = 'Germany'`, `o.status <> 'cancelled'`) names
where other values live: the generator samples a different value of that column from the fixture database
(opened read-only, `mode=ro`), one that does not already appear in the question, and substitutes it in the
question, the gold query and the reference (the reference keeps its own wording when the literal occurs in it
exactly as often as in the gold query; otherwise the new gold query becomes the reference). The gold result is
whatever the new gold query returns on the database; the reference is checked to return the same rows.

Rejects: `unsupported_seed` (no literal of the gold query appears in the question, or its column cannot be
found), `empty_result` (the new query returns nothing: an empty gold result rewards a query that finds
nothing), `same_result` (a different question with the parent's exact result teaches nothing new),
`ambiguous_order` (an ordered result, or an `ORDER BY ... LIMIT` cut-off, changes when ties are broken the
other way), `no_alternatives` (the column has no other value), `sql_error` (the rewritten query does not
run). A reference whose rewrite returns other rows is not a reject: the new gold query becomes the reference.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

from generators.base import GenerationResult, Generator, derive_task, last_user_index
from validators.registry import VerifyContext
from validators.verifiers.sql import QueryRefused, SqlTaskError, compare_results, resolve_database, run_query

ATTEMPTS_PER_VARIANT = 6
_STRING = re.compile(r"'((?:[^']|'')*)'")
_INTEGER = re.compile(r"(?<![\w.'])(\d+)(?![\w.'])")
_COLUMN_BEFORE = re.compile(r"(?:(\w+)\.)?(\w+)\s*(?:=|<>|!=|<=|>=|<|>|\bLIKE|\bIN\s*\(|\bNOT\s+IN\s*\()\s*$", re.I)
_ORDER_TAIL = re.compile(
    r"\bORDER\s+BY\s+(?P<keys>[^;()]+?)(?P<limit>\s+LIMIT\s+\d+(?:\s+OFFSET\s+\d+)?)?\s*;?\s*$", re.I
)
_FENCE = re.compile(r"```(?:sql)?\s*\n(.*?)```", re.S)


@dataclass(frozen=True)
class Slot:
    """A gold-query literal the question states: its SQL text, its value, and the column it is compared with."""

    sql_text: str
    value: str | int
    column: str
    table: str

    @property
    def question_text(self) -> str:
        return str(self.value)


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{quote(str(path))}?mode=ro&immutable=1", uri=True)


def _columns(conn: sqlite3.Connection) -> dict[str, list[str]]:
    """Column name -> tables that have it."""
    found: dict[str, list[str]] = {}
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    for table in tables:
        for row in conn.execute(f'PRAGMA table_info("{table}")'):  # table names come from sqlite_master itself
            found.setdefault(row[1], []).append(table)
    return found


def find_slots(question: str, gold_query: str, conn: sqlite3.Connection) -> list[Slot]:
    """The literals of `gold_query` that the question states verbatim, with the column each is compared with.

    Example:
        >>> conn = sqlite3.connect(":memory:"); _ = conn.execute("CREATE TABLE c (country TEXT)")
        >>> _ = conn.execute("INSERT INTO c VALUES ('Germany')")
        >>> find_slots("How many in Germany?", "SELECT COUNT(*) FROM c WHERE country = 'Germany'", conn)[0].column
        'country'
    """
    columns = _columns(conn)
    slots: dict[str, Slot] = {}
    literals: list[tuple[int, str, str | int]] = [(m.start(), m.group(), m.group(1).replace("''", "'"))
                                                  for m in _STRING.finditer(gold_query)]  # fmt: skip
    masked = _STRING.sub(lambda m: " " * len(m.group()), gold_query)
    literals += [(m.start(), m.group(), int(m.group())) for m in _INTEGER.finditer(masked)]
    for start, sql_text, value in literals:
        if sql_text in slots or not re.search(rf"(?<!\w){re.escape(str(value))}(?!\w)", question):
            continue
        before = _COLUMN_BEFORE.search(gold_query[:start])
        if before is None:
            continue
        column = before.group(2)
        for table in columns.get(column, []):
            sql = f'SELECT 1 FROM "{table}" WHERE "{column}" = ? LIMIT 1'  # identifiers from the schema itself
            if conn.execute(sql, (value,)).fetchone():
                slots[sql_text] = Slot(sql_text, value, column, table)
                break
    return list(slots.values())


def _quote(value: str | int) -> str:
    return str(value) if isinstance(value, int) else "'" + value.replace("'", "''") + "'"


def ambiguous_order(path: Path, query: str) -> bool:
    """True when breaking ORDER BY ties the other way changes an ordered result or a LIMIT cut-off.

    Example:
        >>> ambiguous_order(Path("shop.sqlite"), "SELECT 1")  # no ORDER BY: nothing to break
        False
    """
    m = _ORDER_TAIL.search(query)
    if m is None:
        return False
    width = run_query(path, query).columns
    keys, limit = m.group("keys"), m.group("limit") or ""
    head = query[: m.start()]
    ups = ", ".join(str(i) for i in range(1, width + 1))
    downs = ", ".join(f"{i} DESC" for i in range(1, width + 1))
    first = run_query(path, f"{head}ORDER BY {keys}, {ups}{limit}")
    second = run_query(path, f"{head}ORDER BY {keys}, {downs}{limit}")
    return first.rows != second.rows


class SqlLiteralSwap(Generator):
    """Swaps stated literals of a text-to-SQL seed for other values of the same column; recomputes the result.

    Args:
        context: where relative database paths resolve (the verifier's rule); `VerifyContext()` when None.

    Example:
        >>> SqlLiteralSwap().name
        'sql_literal_swap'
    """

    name: ClassVar[str] = "sql_literal_swap"
    version: ClassVar[int] = 1
    families: ClassVar[frozenset[str]] = frozenset({"sql"})
    transient_reject_codes: ClassVar[frozenset[str]] = frozenset({"sql_error"})  # includes a query's timeout

    def __init__(self, context: VerifyContext | None = None):
        # Resolved at generate time, not here: a module-level instance must not read the environment on import.
        self.context = context

    def fixtures(self, parent: Mapping[str, Any]) -> list[Path]:
        return [resolve_database(parent["verifier"]["params"]["database"], self.context or VerifyContext())]

    def generate(self, parent: Mapping[str, Any], *, n: int, random_seed: int) -> GenerationResult:
        """Up to `n` variants of a `sql_result` seed; see the module docstring for the method and reject codes.

        Args:
            parent: a task with `database` and `gold_query` params.
            n: variants wanted.
            random_seed: with the parent's task_id, fixes the output.

        Returns:
            Variants (distinct task_ids, none equal to the parent) and reject rows.
        """
        out = GenerationResult()
        params = parent["verifier"]["params"]
        path = resolve_database(params["database"], self.context or VerifyContext())
        user = last_user_index(parent["prompt"])
        assert user is not None  # programmatic_variants rejects a parent without one first
        question = parent["prompt"][user]["content"]
        gold = params["gold_query"]
        try:
            conn = _connect(path)
        except sqlite3.Error as exc:
            out.rejects.append(self.reject(parent, "unsupported_seed", f"cannot open {path}: {exc}", {}))
            return out
        try:
            slots = find_slots(question, gold, conn)
            if not slots:
                detail = "no literal of the gold query appears verbatim in the question"
                out.rejects.append(self.reject(parent, "unsupported_seed", detail, {}))
                return out
            pools = {}
            for slot in slots:
                sql = f'SELECT DISTINCT "{slot.column}" FROM "{slot.table}" WHERE "{slot.column}" IS NOT NULL'
                values = sorted({v for (v,) in conn.execute(sql)} - {slot.value}, key=str)
                values = [v for v in values if type(v) is type(slot.value) and str(v) not in question]
                pools[slot.sql_text] = values
        finally:
            conn.close()
        parent_result = run_query(path, gold)
        ordered = bool(params.get("ordered", False))
        rng = self.rng(parent, random_seed)
        seen = {parent["task_id"]}
        for _ in range(n * ATTEMPTS_PER_VARIANT):
            if len(out.tasks) >= n:
                break
            chosen = {s.sql_text: s for s in slots if pools[s.sql_text]}
            if not chosen:
                out.rejects.append(self.reject(parent, "no_alternatives", "no other value in the column", {}))
                break
            new = {key: rng.choice(pools[key]) for key in sorted(chosen)}
            if len(set(map(str, new.values()))) < len(new):
                continue  # two slots with one value would merge two conditions into one
            substitutions = {chosen[k].question_text: str(v) for k, v in new.items()}
            spec = {"substitutions": substitutions}
            new_gold = gold
            new_question = question
            for key, value in new.items():
                new_gold = new_gold.replace(key, _quote(value))
                pattern = rf"(?<!\w){re.escape(chosen[key].question_text)}(?!\w)"
                new_question = re.sub(pattern, str(value).replace("\\", r"\\"), new_question)
            try:
                result = run_query(path, new_gold)
                if not result.rows:
                    out.rejects.append(self.reject(parent, "empty_result", "the new gold query returns no rows", spec))
                    continue
                if compare_results(parent_result, result, ordered=True) is None:
                    out.rejects.append(self.reject(parent, "same_result", "the parent's exact rows", spec))
                    continue
                if ambiguous_order(path, new_gold):
                    detail = "ties at the ORDER BY / LIMIT cut-off"
                    out.rejects.append(self.reject(parent, "ambiguous_order", detail, spec))
                    continue
                reference = self._reference(parent.get("reference") or "", gold, new, path, result, new_gold, ordered)
            except (QueryRefused, SqlTaskError) as exc:
                out.rejects.append(self.reject(parent, "sql_error", str(exc), spec))
                continue
            prompt = [dict(m) for m in parent["prompt"]]
            prompt[user] = {**prompt[user], "content": new_question}
            task = derive_task(
                parent,
                prompt=prompt,
                verifier_params={**params, "gold_query": new_gold},
                reference=reference,
                generator=self.spec(spec),
            )
            if task["task_id"] not in seen:
                seen.add(task["task_id"])
                out.tasks.append(task)
        return out

    @staticmethod
    def _reference(
        reference: str, gold: str, new: Mapping[str, Any], path: Path, result: Any, new_gold: str, ordered: bool
    ) -> str:
        """The parent's reference with the same substitutions when it then returns the gold rows, else the gold."""
        fence = _FENCE.search(reference)
        body = fence.group(1) if fence else reference
        if all(body.count(key) == gold.count(key) for key in new):
            rewritten = body
            for key, value in new.items():
                rewritten = rewritten.replace(key, _quote(value))
            try:
                if compare_results(result, run_query(path, rewritten), ordered=ordered) is None:
                    return reference.replace(body, rewritten) if fence else rewritten
            except QueryRefused:
                pass
        return f"```sql\n{new_gold.strip()}\n```"
