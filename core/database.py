"""The production profile's PostgreSQL database: one URL, read from one variable, opened with clear errors.

Everything a cluster's workers must share and order goes into one database (the `postgres` extra): the Dagster
instance's storage, the LLM call cache, and seedwheel's own records and run-level locks. Its URL carries a
password, so it is never configuration: components name the variable (`DATABASE_URL_ENV`) and read it when
they open the database, and every message shows the URL redacted (`redact_url`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from core.errors import SeedwheelError

DATABASE_URL_ENV = "SEEDWHEEL_DATABASE_URL"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class DatabaseUnavailable(SeedwheelError, ConnectionError):
    """The database cannot be reached or used (a server down, a wrong password, a missing driver)."""


def is_postgres_url(location: str) -> bool:
    """Whether `location` names a PostgreSQL database (else it is a local folder)."""
    return location.startswith(POSTGRES_SCHEMES)


def database_url(environ: Mapping[str, str] | None = None, variable: str = DATABASE_URL_ENV) -> str:
    """The database URL from `variable` ("" when unset: local files instead), checked for a scheme and a host.

    Example:
        >>> database_url({"SEEDWHEEL_DATABASE_URL": "postgresql://sw:pw@db.internal/seedwheel"})
        'postgresql://sw:pw@db.internal/seedwheel'
        >>> database_url({})
        ''
    """
    url = (os.environ if environ is None else environ).get(variable, "").strip()
    if not url:
        return ""
    if not is_postgres_url(url) or not urlsplit(url).hostname:
        raise DatabaseUnavailable(
            f"{variable}={redact_url(url)} is not a PostgreSQL URL with a host",
            hint=f"set {variable}=postgresql://user:password@host:5432/database, or unset it to keep state in "
            "local files",
        )
    return url


def redact_url(url: str) -> str:
    """A database URL with its password hidden, for messages and logs.

    Example:
        >>> redact_url("postgresql://seedwheel:s3cret@db.internal:5432/cache")
        'postgresql://seedwheel:***@db.internal:5432/cache'
    """
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


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
    except psycopg2.OperationalError as exc:
        raise DatabaseUnavailable(
            f"{what}: the database at {where} cannot be reached: {str(exc).strip()}",
            hint=f"start PostgreSQL there, or fix the URL ({variable})",
        ) from exc
