"""`shop`: customer support over the orders database (`seeds/sql/shop.sqlite`): look up, refund, cancel.

State param: `database`, a SQLite file (absolute, or relative to the seeds folder, as `sql_result` reads it). Each
episode works on its own copy in its own folder, with a `refunds` table added (`REFUNDS_DDL`); the file named by
the task is only ever copied. Every tool runs fixed SQL; the values a model writes are bound parameters.

Tools (amounts are integer cents, as in the database):

- `find_customer(email)`: the customer with this email (case ignored).
- `list_orders(customer_id)`: the customer's orders, oldest first, with status and total.
- `get_order_status(order_id)`: an order's status, dates, items, total and what has been refunded.
- `refund_order(order_id, amount_cents, reason)`: pays money back on a shipped or delivered order, up to what
  was paid and not yet refunded; partial refunds are allowed, so paying the same refund twice is possible (and
  a verifier's business to catch).
- `cancel_order(order_id)`: cancels a pending order (nothing was charged yet: pending orders are cancelled, not
  refunded).

The snapshot is every table, each row keyed by its primary key (`order_items` by `order_id/product_id`).
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

from validators.environments.base import Environment, Snapshot, ToolError, tool
from validators.registry import VerifyContext
from validators.verifiers.sql import resolve_database

REFUNDS_DDL = """
CREATE TABLE IF NOT EXISTS refunds (
    refund_id     INTEGER PRIMARY KEY,
    order_id      INTEGER NOT NULL REFERENCES orders (order_id),
    amount_cents  INTEGER NOT NULL CHECK (amount_cents > 0),
    reason        TEXT NOT NULL
);
"""
# Orders that were charged and can be refunded; pending ones are cancelled instead, cancelled ones were never paid.
REFUNDABLE = ("shipped", "delivered")
_TABLES = ("customers", "orders", "order_items", "products")
_ORDER_ID = {"type": "integer", "description": "The order number, e.g. 1004."}


def _quoted(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


class ShopEnvironment(Environment):
    """Customer support on a copy of the shop's orders database (tools and rules in the module docstring)."""

    name = "shop"
    tools: ClassVar[list[dict[str, Any]]] = [
        tool(
            "find_customer",
            "Find a customer by email address; returns customer_id and name.",
            {"email": {"type": "string", "minLength": 3, "maxLength": 254}},
            ["email"],
        ),
        tool(
            "list_orders",
            "List a customer's orders, oldest first: order_id, order_date, status, total_cents.",
            {"customer_id": {"type": "integer"}},
            ["customer_id"],
        ),
        tool(
            "get_order_status",
            "An order's status, dates, items (product, quantity, unit price), total and refunded amount, in cents.",
            {"order_id": _ORDER_ID},
            ["order_id"],
        ),
        tool(
            "refund_order",
            "Refund money on a shipped or delivered order, in cents, at most what was paid and not refunded yet.",
            {
                "order_id": _ORDER_ID,
                "amount_cents": {"type": "integer", "minimum": 1},
                "reason": {"type": "string", "minLength": 1, "maxLength": 500},
            },
            ["order_id", "amount_cents", "reason"],
        ),
        tool(
            "cancel_order", "Cancel a pending order (one that has not shipped).", {"order_id": _ORDER_ID}, ["order_id"]
        ),
    ]
    read_only_tools: ClassVar[frozenset[str]] = frozenset({"find_customer", "list_orders", "get_order_status"})
    state_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["database"],
        "additionalProperties": False,
        "properties": {"database": {"type": "string", "minLength": 1}},
    }

    @classmethod
    def state_problems(cls, state: Mapping[str, Any], context: VerifyContext) -> list[str]:
        path = resolve_database(state["database"], context)
        if not path.is_file():
            return [f"database {path} does not exist (/verifier/params/state/database)"]
        try:
            with closing(sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)) as conn:
                found = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.Error as exc:
            return [f"database {path} cannot be read ({exc}) (/verifier/params/state/database)"]
        missing = ", ".join(table for table in _TABLES if table not in found)
        return [f"database {path} has no table {missing} (/verifier/params/state/database)"] if missing else []

    @classmethod
    def fixtures(cls, state: Mapping[str, Any], context: VerifyContext) -> list[Path]:
        return [resolve_database(state["database"], context)]

    def _open(self, state: Mapping[str, Any], folder: Path) -> None:
        copy = folder / "shop.sqlite"
        shutil.copyfile(resolve_database(state["database"], self.context), copy)
        self._conn = sqlite3.connect(copy, isolation_level=None)  # autocommit: each tool is one statement's effect
        self._conn.execute("PRAGMA foreign_keys = ON")
        self._conn.executescript(REFUNDS_DDL)

    def _close(self) -> None:
        self._conn.close()

    def snapshot(self) -> Snapshot:
        state: Snapshot = {}
        tables = self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        for (table,) in tables.fetchall():
            info = self._conn.execute(f"PRAGMA table_info({_quoted(table)})").fetchall()
            keys = [name for _, name, _, _, _, pk in sorted(info, key=lambda column: column[5]) if pk]
            cursor = self._conn.execute(f"SELECT rowid, * FROM {_quoted(table)}")
            names = [d[0] for d in cursor.description][1:]
            rows = {}
            for rowid, *values in cursor:
                row = dict(zip(names, values, strict=True))
                rows["/".join(str(row[k]) for k in keys) if keys else str(rowid)] = row
            state[table] = rows
        return state

    def _order(self, order_id: int) -> dict[str, Any]:
        row = self._conn.execute(
            "SELECT customer_id, status, order_date, shipped_date FROM orders WHERE order_id = ?", (order_id,)
        ).fetchone()
        if row is None:
            raise ToolError(f"no order {order_id}")
        return dict(zip(("customer_id", "status", "order_date", "shipped_date"), row, strict=True))

    def _cents(self, sql: str, order_id: int) -> int:
        return int(self._conn.execute(sql, (order_id,)).fetchone()[0])

    def _total(self, order_id: int) -> int:
        sql = "SELECT COALESCE(SUM(quantity * unit_price_cents), 0) FROM order_items WHERE order_id = ?"
        return self._cents(sql, order_id)

    def _refunded(self, order_id: int) -> int:
        return self._cents("SELECT COALESCE(SUM(amount_cents), 0) FROM refunds WHERE order_id = ?", order_id)

    def tool_find_customer(self, email: str) -> dict[str, Any]:
        found = self._conn.execute(
            "SELECT customer_id, name FROM customers WHERE lower(email) = lower(?)", (email,)
        ).fetchone()
        if found is None:
            raise ToolError(f"no customer with email {email!r}")
        return {"customer_id": found[0], "name": found[1]}

    def tool_list_orders(self, customer_id: int) -> dict[str, Any]:
        if self._conn.execute("SELECT 1 FROM customers WHERE customer_id = ?", (customer_id,)).fetchone() is None:
            raise ToolError(f"no customer {customer_id}")
        rows = self._conn.execute(
            "SELECT o.order_id, o.order_date, o.status, COALESCE(SUM(i.quantity * i.unit_price_cents), 0)"
            " FROM orders AS o LEFT JOIN order_items AS i ON i.order_id = o.order_id"
            " WHERE o.customer_id = ? GROUP BY o.order_id ORDER BY o.order_date, o.order_id",
            (customer_id,),
        ).fetchall()
        keys = ("order_id", "order_date", "status", "total_cents")
        return {"customer_id": customer_id, "orders": [dict(zip(keys, row, strict=True)) for row in rows]}

    def tool_get_order_status(self, order_id: int) -> dict[str, Any]:
        order = self._order(order_id)
        items = self._conn.execute(
            "SELECT p.name, i.quantity, i.unit_price_cents FROM order_items AS i"
            " JOIN products AS p ON p.product_id = i.product_id WHERE i.order_id = ? ORDER BY p.product_id",
            (order_id,),
        ).fetchall()
        return {
            "order_id": order_id,
            "customer_id": order["customer_id"],
            "status": order["status"],
            "order_date": order["order_date"],
            "shipped_date": order["shipped_date"],
            "items": [{"product": n, "quantity": q, "unit_price_cents": p} for n, q, p in items],
            "total_cents": self._total(order_id),
            "refunded_cents": self._refunded(order_id),
        }

    def tool_refund_order(self, order_id: int, amount_cents: int, reason: str) -> dict[str, Any]:
        status = self._order(order_id)["status"]
        if status not in REFUNDABLE:
            hint = "; cancel it instead" if status == "pending" else ""
            raise ToolError(f"order {order_id} is {status}: only shipped or delivered orders are refunded{hint}")
        left = self._total(order_id) - self._refunded(order_id)
        if amount_cents > left:
            raise ToolError(f"order {order_id} has {left} cents left to refund, not {amount_cents}")
        cursor = self._conn.execute(
            "INSERT INTO refunds (order_id, amount_cents, reason) VALUES (?, ?, ?)", (order_id, amount_cents, reason)
        )
        return {
            "refund_id": cursor.lastrowid,
            "order_id": order_id,
            "amount_cents": amount_cents,
            "refunded_cents": self._refunded(order_id),
        }

    def tool_cancel_order(self, order_id: int) -> dict[str, Any]:
        status = self._order(order_id)["status"]
        if status != "pending":
            raise ToolError(f"order {order_id} is {status}: only pending orders can be cancelled")
        self._conn.execute("UPDATE orders SET status = 'cancelled' WHERE order_id = ?", (order_id,))
        return {"order_id": order_id, "status": "cancelled"}
