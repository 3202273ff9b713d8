"""Invariant 10: when a release-triggered run may be requested again. Pure code.

A release attempt is recorded per (target, package, version) in the result store (see
resources/releases/ledger.py); this module reads those records and decides. The key is
only (target, package, version), so the cooldown spans every base: a new commit or an
args edit of the target does not reset it.

Rows, in the order they were recorded, latest readable one decides:
- no readable attempt (none recorded, or every record unreadable) -> request;
- `deferred_busy` (the host was busy) -> request again on the next tick;
- `requested`, `succeeded`, `failed`, `environment_unavailable` -> wait 24 hours from
  when it was recorded, then request again.
An unreadable record (unknown outcome, missing or unparseable time, or a time so far in
the future that it would block) counts as no attempt, never as blocked.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Sequence

REQUESTED = "requested"
DEFERRED_BUSY = "deferred_busy"
SUCCEEDED = "succeeded"
FAILED = "failed"
ENVIRONMENT_UNAVAILABLE = "environment_unavailable"
OUTCOMES = (REQUESTED, DEFERRED_BUSY, SUCCEEDED, FAILED, ENVIRONMENT_UNAVAILABLE)

COOLDOWN = timedelta(hours=24)
MAX_RELEASE_RUNS_PER_TICK = 5
# A record stamped later than this past `now` is treated as corrupt: trusting it would
# block the release for as long as the bad clock says.
CLOCK_SKEW = timedelta(minutes=5)


@dataclass(frozen=True)
class AttemptRow:
    """One attempt as stored: raw text, so a corrupt record can be told apart."""

    outcome: str | None
    recorded_at: str | None


@dataclass(frozen=True)
class Attempt:
    outcome: str
    at: datetime


@dataclass(frozen=True)
class ReleaseDecision:
    request: bool
    reason: str
    retry_at: datetime | None = None  # set when waiting


def timestamp(moment: datetime) -> str:
    """How an attempt's time is stored: ISO 8601 in UTC."""
    return moment.astimezone(timezone.utc).isoformat()


def read_attempt(row: AttemptRow, now: datetime) -> Attempt | None:
    """The attempt a row records, or None when the record cannot be read."""
    if row.outcome not in OUTCOMES or not row.recorded_at:
        return None
    try:
        at = datetime.fromisoformat(row.recorded_at)
    except (TypeError, ValueError):
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    if at > now + CLOCK_SKEW:
        return None
    return Attempt(outcome=row.outcome, at=at)


def decide(rows: Sequence[AttemptRow], now: datetime, cooldown: timedelta = COOLDOWN) -> ReleaseDecision:
    """Whether (target, package, version) may be requested now, given its attempt rows."""
    attempts = [attempt for attempt in (read_attempt(row, now) for row in rows) if attempt is not None]
    if not attempts:
        unreadable = len(rows)
        why = f"{unreadable} unreadable record(s) count as none" if unreadable else "never attempted"
        return ReleaseDecision(True, f"no readable attempt ({why})")
    latest = attempts[-1]
    if latest.outcome == DEFERRED_BUSY:
        return ReleaseDecision(True, f"deferred at {timestamp(latest.at)} because the host was busy; retrying")
    retry_at = latest.at + cooldown
    if now >= retry_at:
        return ReleaseDecision(True, f"last attempt {latest.outcome} at {timestamp(latest.at)}; cooldown over")
    return ReleaseDecision(False, f"last attempt {latest.outcome} at {timestamp(latest.at)}; "
                                  f"cooldown until {timestamp(retry_at)}", retry_at)
