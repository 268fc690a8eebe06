"""The production profile's PostgreSQL database: one URL, read from one variable, opened with clear errors.

Everything a cluster's workers must share and order goes into one database (the `postgres` extra): the Dagster
instance's storage, the LLM call cache, and seedwheel's own records and run-level locks. Its URL carries a
password, so it is never configuration: components name the variable (`DATABASE_URL_ENV`) and read it when
they open the database, and every message shows the URL redacted (`redact_url`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from core.errors import SeedwheelError

DATABASE_URL_ENV = "SEEDWHEEL_DATABASE_URL"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
# The advisory lock under which a process creates seedwheel's tables (`create_tables`; any constant all agree on).
SCHEMA_LOCK = 0x5EED_CAC4E
# `scheme://user:password@` in a URL `urlsplit` cannot parse: the password is group 2.
_CREDENTIALS = re.compile(r"^([a-z0-9+.-]+://[^:/@]*:)([^@]*)@", re.IGNORECASE)


class DatabaseUnavailable(SeedwheelError, ConnectionError):
    """The database cannot be reached or used (a server down, a wrong password, a missing driver)."""


def is_postgres_url(location: str) -> bool:
    """Whether `location` names a PostgreSQL database (else it is a local folder)."""
    return location.startswith(POSTGRES_SCHEMES)


def database_url(environ: Mapping[str, str] | None = None, variable: str = DATABASE_URL_ENV) -> str:
    """The database URL from `variable` ("" when unset: local files instead), checked by `check_url`.

    Example:
        >>> database_url({"SEEDWHEEL_DATABASE_URL": "postgresql://sw:pw@db.internal/seedwheel"})
        'postgresql://sw:pw@db.internal/seedwheel'
        >>> database_url({})
        ''
    """
    url = (os.environ if environ is None else environ).get(variable, "").strip()
    if url:
        check_url(url, variable)
    return url


def check_url(url: str, variable: str = DATABASE_URL_ENV) -> None:
    """Raise `DatabaseUnavailable`, naming `variable` and the fix, unless `url` is a PostgreSQL URL with a host (and
    a port, if any, that is a number).

    Example:
        >>> try:
        ...     check_url("mysql://sw:pw@db.internal/seedwheel")
        ... except DatabaseUnavailable as error:
        ...     print(error.args[0])
        SEEDWHEEL_DATABASE_URL=mysql://sw:***@db.internal/seedwheel is not a valid PostgreSQL URL
    """
    try:
        parts = urlsplit(url)
        valid = is_postgres_url(url) and bool(parts.hostname) and (parts.port is None or parts.port > 0)
    except ValueError:  # a port that is not a number, an unclosed [IPv6 address]
        valid = False
    if not valid:
        raise DatabaseUnavailable(
            f"{variable}={redact_url(url)} is not a valid PostgreSQL URL",
            hint=f"set {variable}=postgresql://user:password@host:5432/database, or unset it to keep state in "
            "local files",
        )


def redact_url(url: str) -> str:
    """A database URL with its password hidden, for messages and logs (also when the URL does not parse).

    Example:
        >>> redact_url("postgresql://seedwheel:s3cret@db.internal:5432/cache")
        'postgresql://seedwheel:***@db.internal:5432/cache'
        >>> redact_url("postgresql://seedwheel:s3cret@[::1/cache")
        'postgresql://seedwheel:***@[::1/cache'
    """
    password = _password(url)
    return url.replace(f":{password}@", ":***@", 1) if password else url


def connect(url: str, *, what: str, variable: str = DATABASE_URL_ENV) -> Any:
    """A psycopg2 connection to `url`, or a `DatabaseUnavailable` naming `what` needs it and the fix.

    Args:
        url: a `postgresql://` URL.
        what: the component, for the message (e.g. "the LLM cache").
        variable: the setting the URL came from, named in the hint.
    """
    where = redact_url(url)
    try:
        import psycopg2
    except ImportError as exc:
        raise DatabaseUnavailable(
            f"{what} at {where} needs the PostgreSQL driver, which is not installed",
            hint="pip install 'seedwheel[postgres]'",
        ) from exc
    try:
        return psycopg2.connect(url, connect_timeout=10)
    except psycopg2.Error as exc:  # OperationalError: unreachable, refused; ProgrammingError: a malformed URL
        # libpq quotes a URL it cannot parse whole, password included: only the redacted form goes on.
        password = _password(url)
        reason = str(exc).strip().replace(url, where)
        reason = reason.replace(password, "***") if password else reason
        raise DatabaseUnavailable(
            f"{what}: the database at {where} cannot be reached: {reason}",
            hint=f"start PostgreSQL there, or fix the URL ({variable}=postgresql://user:password@host:5432/database)",
        ) from None  # the driver's exception may quote the URL unredacted


def create_tables(cursor: Any, schema: str) -> None:
    """Run `schema` (`CREATE TABLE IF NOT EXISTS ...` statements) in the cursor's transaction, one process at a time.

    Two processes creating the same tables at once race in PostgreSQL's catalogue (a duplicate key in
    `pg_type_typname_nsp_index`), so creation waits for a transaction-level advisory lock that every seedwheel
    process takes first; it is released when the transaction ends.
    """
    cursor.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
    cursor.execute(schema)


def _password(url: str) -> str | None:
    """The URL's password as written in it (None without one), also when `urlsplit` cannot parse the URL."""
    try:
        return urlsplit(url).password
    except ValueError:
        found = _CREDENTIALS.search(url)
        return None if found is None else found.group(2)
