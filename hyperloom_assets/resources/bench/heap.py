"""The client's heap kept out of the cyclic garbage collector's way while requests are timed.

The client runs inside whatever process measures: a `dagster job execute` run, a daemon's
run worker, a test session. Such a process holds hundreds of thousands of tracked objects
and a full collection of them takes a large part of a second on a small machine. One that
falls inside a round stops the event loop that long, and every stream in flight reads the
pause as the server's TTFT or inter-token latency.
`gc.freeze()` moves the existing heap to the permanent generation, so the collections a
round triggers walk only the objects made since; it is thawed when the measurement ends.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def heap_frozen() -> Iterator[None]:
    """Freeze the tracked heap for the block. Nested or overlapping blocks leave the thaw to
    the one that froze, so an inner measurement never thaws an outer one's heap."""
    froze = gc.get_freeze_count() == 0
    if froze:
        gc.freeze()
    try:
        yield
    finally:
        if froze:
            gc.unfreeze()
