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

import logging
import signal
import socketserver
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

logger = logging.getLogger(__name__)

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


def serve_until_stopped(
    server: socketserver.BaseServer, what: str, on_ready: Callable[[], None] | None = None
) -> None:
    """Serve `server` until SIGTERM or SIGINT (Ctrl-C), then return once it is closed; the handlers set here are
    restored on return. Call it from the main thread (the signal handlers live there).

    Args:
        server: a bound server (`http.server.ThreadingHTTPServer`, ...); it is closed on return.
        what: its name in the log line a stop writes.
        on_ready: called once the handlers are in place, just before serving.
    """
    stopping = threading.Event()

    def stop(signum: int, frame: object) -> None:
        if not stopping.is_set():
            stopping.set()
            logger.info("%s: stopping the %s", signal.Signals(signum).name, what)
            threading.Thread(target=server.shutdown, daemon=True).start()  # shutdown() waits for serve_forever

    with dispositions_kept(), server:
        for sig in STOP_SIGNALS:
            signal.signal(sig, stop)
        if on_ready is not None:
            on_ready()
        server.serve_forever(poll_interval=0.2)
