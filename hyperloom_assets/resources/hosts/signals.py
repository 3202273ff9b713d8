"""Holding SIGINT and SIGTERM while a block that must finish (a teardown, a stop record) runs."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def signals_deferred(on_signal: Callable[[int], None] | None = None) -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block is done, then deliver the first one.

    A cancelled run is sent its signal again and again (Dagster raises an interrupt for
    each), and a teardown cut short would leave a server behind. Teardown is bounded
    (TERM wait plus KILL wait), so holding signals for it delays a cancel by seconds.
    `on_signal` is told at once, so a block that can stop early (a measuring round) does.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(received: int, _frame) -> None:  # noqa: ANN001 - a signal frame
        held.append(received)
        if on_signal is not None:
            on_signal(received)

    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    for signum, handler in previous.items():
        if handler is not None:
            signal.signal(signum, hold)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:
                signal.signal(signum, handler)
        if held:
            signal.raise_signal(held[0])
