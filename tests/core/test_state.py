"""Run-level locks and where shared records live (`core.state`): one lock abstraction, two backends, clear errors."""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from core.database import DatabaseUnavailable
from core.state import StateStore, lock_key
from tests.paths import REPO
from tests.services import free_port, fresh_database

# Holds the lock named argv[2] (its file argv[3] without a database) in the store of URL argv[1] ("" for files),
# says so, and sleeps until killed.
HOLDER = """
import sys, time
from pathlib import Path
from core.state import StateStore
with StateStore(sys.argv[1]).lock(sys.argv[2], Path(sys.argv[3])):
    print("held", flush=True)
    time.sleep(600)
"""


def hold(store: StateStore, name: str, file: Path) -> subprocess.Popen[str]:
    """A process holding the lock `name`, returned once it holds it."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, store.database_url, name, str(file)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    line = holder.stdout.readline()
    assert line == "held\n", holder.stderr.read() if holder.stderr else line
    return holder


def take_in_background(store: StateStore, name: str, file: Path) -> threading.Event:
    """Take the lock `name` from a thread of this process; the event is set once it is held (then it is released)."""
    taken = threading.Event()

    def take() -> None:
        with store.lock(name, file):
            taken.set()

    threading.Thread(target=take, daemon=True).start()
    return taken


def test_lock_keys_are_stable_signed_64_bit_and_distinct():
    # Two releases, or two machines, must compute the same key for a name, or their locks would not meet.
    assert lock_key("split_ledger") == -2669897307527169802
    keys = {lock_key(name) for name in ("split_ledger", "promotion_registry", "dedup_index/5ng_128p_t0.7")}
    assert len(keys) == 3 and all(-(2**63) <= key < 2**63 for key in keys)


def test_a_lock_excludes_another_process_and_a_killed_holder_releases_it(state_store, tmp_path):
    file = tmp_path / "ledger.lock"
    holder = hold(state_store, "split_ledger", file)
    try:
        taken = take_in_background(state_store, "split_ledger", file)
        assert not taken.wait(1.5), "a second process took a lock another process holds"
        # Another name is another lock: the holder does not block it.
        assert take_in_background(state_store, "promotion_registry", tmp_path / "other.lock").wait(10)
        os.kill(holder.pid, signal.SIGKILL)  # no cleanup runs: the kernel or the server must release the lock
        assert taken.wait(10), "the lock of a killed holder was never released"
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_the_database_backend_writes_no_lock_file(postgres_url, tmp_path):
    store = StateStore(fresh_database(postgres_url))
    with store.lock("split_ledger", tmp_path / "splits" / ".lock"):
        pass
    assert not (tmp_path / "splits").exists()


@pytest.mark.parametrize(
    "url",
    [
        "mysql://seedwheel:hunter2@db.internal/seedwheel",  # another database
        "postgresql://seedwheel:hunter2@db.internal:fivefour/seedwheel",  # a port that is not a number
        "postgresql://seedwheel:hunter2@[::1/seedwheel",  # an unclosed IPv6 address
        "postgresql:///seedwheel",  # no host: a local socket is not shared by a cluster
    ],
)
def test_a_malformed_url_names_the_variable_and_the_fix_never_the_password(url):
    with pytest.raises(DatabaseUnavailable, match="SEEDWHEEL_DATABASE_URL=") as caught:
        StateStore.from_env({"SEEDWHEEL_DATABASE_URL": url})
    assert "hunter2" not in str(caught.value)
    assert "postgresql://user:password@host:5432/database" in caught.value.hint


@pytest.mark.parametrize(
    "password",
    [
        "hunter2",
        # Parses as a URL but libpq refuses it, quoting the whole URL in its error.
        "hunter%zz2",
    ],
)
def test_an_unreachable_database_names_the_variable_and_the_fix_never_the_password(tmp_path, password):
    store = StateStore(f"postgresql://seedwheel:{password}@127.0.0.1:{free_port()}/seedwheel")
    with (
        pytest.raises(DatabaseUnavailable, match=r"seedwheel:\*\*\*@127\.0\.0\.1") as caught,
        store.lock("split_ledger", tmp_path / ".lock"),
    ):
        pass
    # The driver's own error (which may quote the URL) is neither the cause nor shown as the context.
    assert "hunter" not in str(caught.value) and caught.value.__cause__ is None and caught.value.__suppress_context__
    assert "SEEDWHEEL_DATABASE_URL" in caught.value.hint and "run-level lock 'split_ledger'" in str(caught.value)
    assert "hunter" not in repr(store)
