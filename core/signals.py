"""Keeping the signals that stop a process (SIGTERM, SIGINT) working, for this process and the ones it starts.

A signal that is *ignored* stays ignored in every child, across `exec`: that is how a shell keeps Ctrl-C away
from a background job (it starts it with SIGINT ignored). Dagster copies SIGINT's disposition onto SIGTERM whenever
it sets its interrupt handlers (`dagster._utils.interrupts.setup_interrupt_handlers`): `dagster dev` at start, and
every in-process or multiprocess run when it ends. So a run, a test or a UI started in the background ends up
ignoring SIGTERM, and so does every process it starts from then on: a model server that outlives `stop()` by its
whole grace period, a spawn pool whose `terminate()` waits forever for workers that never die, a `seedwheel ui`
that `kill` does not stop.

Two fixes, one per side:
- `dispositions_kept()` around anything that lets Dagster rewrite the handlers: they are as they were after it.
- `stoppable()` in a process about to start (or `exec`) a server: SIGTERM and SIGINT back to their defaults where
  they are ignored, so the server and its children stop when asked, whatever their launcher ignored.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def dispositions_kept(signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Restore the handlers of `signals` after the body, whatever it installed (only the main thread has any).

    Example:
        >>> with dispositions_kept():
        ...     _ = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        >>> signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        False
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:  # None: installed outside Python, nothing to put back
                signal.signal(sig, handler)


def stoppable() -> list[str]:
    """Set SIGTERM and SIGINT to their default action where this process ignores them; the names of those reset.

    Call it in the main thread of a process before it starts or `exec`s something that must stop when asked.
    """
    reset = [sig.name for sig in STOP_SIGNALS if signal.getsignal(sig) is signal.SIG_IGN]
    for name in reset:
        signal.signal(signal.Signals[name], signal.SIG_DFL)
    return reset
