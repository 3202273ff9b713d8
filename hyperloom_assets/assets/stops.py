"""Where a run's stop reason lands: the run log and the result store's `stops` table.

Each way a run stops is recorded once, by the step it stops in: the climb's own stop
(`trials`), a baseline that could not be measured or an environment that could not be
provided (`baseline`, whose failure carries the reason), and a cancel wherever it lands:
the step that was running when the run was terminated (the UI's Terminate, SIGTERM or
SIGINT to `dagster job execute` all reach it as an interrupt). A run refused its host's
lease stops before any step; the hosts resource records that one (resources/hosts/fleet.py).
A cancelled run's steps downstream never run, so it has no report; its servers were torn
down by the host.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from hyperloom_assets.core.decisions.stop_reasons import StopReason
from hyperloom_assets.resources.hosts.signals import signals_deferred
from hyperloom_assets.resources.measure import INTERRUPTS
from hyperloom_assets.resources.store.results import ResultStore

# Stops that mean the run did not get what it came for.
PROBLEMS = {StopReason.BASELINE_FAILED, StopReason.BASELINE_ARG_ERROR, StopReason.ENVIRONMENT_UNAVAILABLE,
            StopReason.CANCELLED}


def record_stop(context, store: ResultStore, reason: str, detail: str = "") -> None:
    """Say in the run log why the run stopped, and keep it in the result store."""
    note = context.log.warning if StopReason(reason) in PROBLEMS else context.log.info
    note("stop reason: %s%s", StopReason(reason).value, f": {detail}" if detail else "")
    store.record_stop(target=context.partition_key, stop_reason=reason, detail=detail, run_id=context.run.run_id)


def failure_stop_reason(failure: dg.Failure) -> str | None:
    value = (failure.metadata or {}).get("stop_reason")
    return getattr(value, "value", value)


def failure_detail(failure: dg.Failure, reason: str) -> str:
    """The failure's first line without the reason it starts with (the log line names it once)."""
    first = ((failure.description or "").splitlines() or [""])[0]
    return first.removeprefix(f"{reason}: ")[:500]


@contextmanager
def recorded_stops(context, store: ResultStore, step: str) -> Iterator[None]:
    """Record a stop that ends the run in this step: a failure that names its reason, or a cancel."""
    try:
        yield
    except dg.Failure as failure:
        reason = failure_stop_reason(failure)
        if reason is not None:
            record_stop(context, store, reason, failure_detail(failure, reason))
        raise
    except INTERRUPTS:
        with signals_deferred():  # the run is told again and again; the record must land once
            record_stop(context, store, StopReason.CANCELLED.value, f"terminated during {step}; re-execute to resume")
        raise


def baseline_failure(stop_reason: str, message: str, **metadata) -> dg.Failure:
    """A failed baseline: never materialized, never an anchor; the run stops here."""
    return dg.Failure(description=f"{stop_reason}: {message}", metadata={"stop_reason": stop_reason, **metadata})
