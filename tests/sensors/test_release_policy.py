"""Invariant 10's cooldown, row by row (pure code)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from hyperloom_assets.core.releases.policy import AttemptRow, decide, read_attempt, timestamp

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def row(outcome: str | None, hours_ago: float | None) -> AttemptRow:
    return AttemptRow(outcome, None if hours_ago is None else timestamp(NOW - timedelta(hours=hours_ago)))


@pytest.mark.parametrize("rows, request_expected", [
    ([], True),                                              # never attempted
    ([row("deferred_busy", 0.01)], True),                    # host was busy: next tick
    ([row("deferred_busy", 0.01), row("deferred_busy", 0)], True),
    ([row("requested", 1)], False),                          # asked for: wait 24 h
    ([row("requested", 25)], True),
    ([row("succeeded", 23.9)], False),
    ([row("failed", 2)], False),
    ([row("failed", 24)], True),                             # exactly 24 h: tried again
    ([row("environment_unavailable", 5)], False),
    ([row("environment_unavailable", 30)], True),
    ([row("failed", 2), row("deferred_busy", 0)], True),     # the latest record decides
    ([row("deferred_busy", 3), row("requested", 1)], False),
    ([row("garbage", 1)], True),                             # unreadable outcome: no attempt
    ([row(None, 1)], True),                                  # missing outcome
    ([AttemptRow("failed", None)], True),                    # missing time
    ([AttemptRow("failed", "yesterday-ish")], True),         # unparseable time
    ([AttemptRow("failed", "9999-01-01T00:00:00+00:00")], True),  # a future time would block forever
    ([row("failed", 30), row("garbage", 1)], True),          # unreadable latest: the readable one decides
    ([row("failed", 2), AttemptRow("requested", "not a time")], False),
])
def test_cooldown_table(rows: list[AttemptRow], request_expected: bool) -> None:
    assert decide(rows, NOW).request is request_expected


def test_waiting_names_the_outcome_and_the_retry_time() -> None:
    decision = decide([row("failed", 2)], NOW)
    assert decision.retry_at == NOW + timedelta(hours=22)
    assert "failed" in decision.reason and timestamp(NOW + timedelta(hours=22)) in decision.reason


def test_naive_times_read_as_utc() -> None:
    attempt = read_attempt(AttemptRow("requested", "2026-03-01T10:00:00"), NOW)
    assert attempt is not None and attempt.at == NOW - timedelta(hours=2)
