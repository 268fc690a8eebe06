"""Where overlapping runs keep the records they share, and how they take turns: run-level locks.

Runs that overlap (two nightly regenerations forced side by side, a re-split from the command line during a run,
steps of one run on several machines) read, change and write the same records: the split ledger
(`curation.split_ledger`), the promotion record (`training.promotion`) and the dedup index
(`curation.dedup.index`). Each holds a run-level lock for its read-modify-write. Which kind of lock, and where the
ledger and the promotion record live, is decided once, by the `StateStore` the caller builds and passes in:

- **No database** (the default, one machine): records are files under the storage root, each written atomically,
  and a lock is `flock(2)` on a file beside them (`file_lock`). Workers on several machines need a shared file
  system that honours it (local disks, NFSv4); object storage has no locks.
- **The production database** (`SEEDWHEEL_DATABASE_URL`, `core.database`): the ledger and the promotion record are
  tables there, each change one transaction (the commit is the only point where it becomes visible), and a lock is
  a PostgreSQL session-level advisory lock (`advisory_lock`) on a connection of its own, keyed by a stable hash of
  the lock's name (`lock_key`). The server releases it when that connection ends, also when its holder is killed:
  a killed process's socket closes at once; a machine that vanishes is noticed by the server's TCP keepalive
  (`tcp_keepalives_idle`). Session locks need a direct connection (or a pooler in session mode): PgBouncer in
  transaction mode does not keep them. The dedup index's files stay files; only its lock moves.

Example:
    >>> import tempfile
    >>> store = StateStore()  # no database: files and flock
    >>> with store.lock("split_ledger", Path(tempfile.mkdtemp()) / ".lock"):
    ...     pass
    >>> StateStore("postgresql://sw:s3cret@db.internal/seedwheel")
    StateStore(postgresql://sw:***@db.internal/seedwheel)
"""

from __future__ import annotations

import fcntl
import hashlib
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.database import DATABASE_URL_ENV, check_url, connect, create_tables, database_url, redact_url

# Prefixed to every lock name before hashing, so seedwheel's keys stay apart from other applications' advisory
# locks in a shared database.
LOCK_NAMESPACE = "seedwheel:"


@contextmanager
def file_lock(path: Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold an exclusive lock on `path` (created when missing) for the block, waiting while another holds it.

    For read-modify-write of shared files (the dedup index, the promotion registry) by runs that overlap. It
    is `flock(2)`: the kernel drops it when its holder dies, so a killed run never leaves it held; two
    processes, or two threads each opening the lock, exclude each other. Local file systems and NFSv4 honour
    it, object storage has no locks (see docs/production.md, "Scaling out").

    Yields whether the lock is held: always True when waiting; with `wait=False`, False at once when another
    holds it (the block then runs without it, e.g. to leave optional work to the holder).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:  # closing the file releases the lock
        try:
            fcntl.flock(handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
        else:
            yield True


def lock_key(name: str) -> int:
    """The advisory lock key of the lock `name`: a signed 64-bit BLAKE2b of the namespaced name, the same on every
    machine and in every release (PostgreSQL's keys are `bigint`).

    Example:
        >>> lock_key("split_ledger")
        -2669897307527169802
    """
    digest = hashlib.blake2b(f"{LOCK_NAMESPACE}{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@contextmanager
def advisory_lock(url: str, name: str, *, variable: str = DATABASE_URL_ENV) -> Iterator[None]:
    """Hold the PostgreSQL session-level advisory lock `name` for the block, waiting while another session holds it.

    The lock lives on a connection opened for it alone and closed at the end of the block: closing the session
    releases it, and so does the server when the holder dies (see the module docstring).

    Args:
        url: the database's `postgresql://` URL.
        name: the lock's name (hashed by `lock_key`).
        variable: the setting the URL came from, named in errors.

    Raises:
        core.database.DatabaseUnavailable: the database cannot be reached.
    """
    db = connect(url, what=f"the run-level lock {name!r}", variable=variable)
    try:
        db.autocommit = True  # a session lock: no transaction stays open while it is held
        with db.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", (lock_key(name),))
        yield
    finally:
        db.close()


@dataclass(frozen=True, repr=False)
class StateStore:
    """Where the records overlapping runs share live, and which run-level locks guard them (module docstring).

    Built once from the production database's URL (`from_env`; the pipeline's `StorageRoot.state()`) and passed to
    the split ledger, the promotion registry and the dedup index, which never read the environment themselves.

    Attributes:
        database_url: the production database's `postgresql://` URL; empty keeps records in files and locks them
            with `flock`. Its password never shows: `repr` and every message redact it.
        variable: the setting the URL came from, named in errors and hints.
    """

    database_url: str = ""
    variable: str = DATABASE_URL_ENV

    def __post_init__(self) -> None:
        if self.database_url:
            check_url(self.database_url, self.variable)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, variable: str = DATABASE_URL_ENV) -> StateStore:
        """The store `variable` selects: its database when set (checked for a scheme and a host), else files.

        Example:
            >>> StateStore.from_env({}).in_database
            False
        """
        return cls(database_url(environ, variable), variable)

    @property
    def in_database(self) -> bool:
        """Whether records and locks live in the database (else in files)."""
        return bool(self.database_url)

    @property
    def where(self) -> str:
        """The database's redacted URL, or "local files", for messages."""
        return redact_url(self.database_url) if self.database_url else "local files"

    def __repr__(self) -> str:
        return f"StateStore({self.where})"

    def lock(self, name: str, file: Path) -> AbstractContextManager[object]:
        """The run-level lock `name`: the advisory lock of that name in the database, else `file_lock(file)`.

        Args:
            name: the lock's name, the same on every machine (e.g. "split_ledger").
            file: the lock file beside the records it guards, used when there is no database.
        """
        if self.database_url:
            return advisory_lock(self.database_url, name, variable=self.variable)
        return file_lock(file)

    @contextmanager
    def transaction(self, what: str) -> Iterator[Any]:
        """A cursor on a connection of its own, in one transaction: committed when the block ends, rolled back when
        it raises (a process killed inside it commits nothing), the connection closed either way.

        Args:
            what: the component, for the message when the database cannot be reached (e.g. "the split ledger").
        """
        db = connect(self.database_url, what=what, variable=self.variable)
        try:
            with db, db.cursor() as cursor:
                yield cursor
        finally:
            db.close()

    def create_tables(self, schema: str, what: str) -> None:
        """Create a component's tables if missing (`core.database.create_tables`), in a transaction of their own."""
        with self.transaction(what) as cursor:
            create_tables(cursor, schema)
