"""Invariant 9's table: who may take a host, from the holder on record."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from hyperloom_assets.core.fleet.leases import Holder, Lease, Verdict, blocked_message, decide

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
ME = Holder(scope="boot/pidns:1/pid1:5", run_id="mine", pid=100, pid_start=1.0, worker="w1")


def lease(holder: Holder, beat_ago_s: float, ttl_s: float = 60) -> Lease:
    return Lease(host="gpu-a", holder=holder, acquired_at=NOW - timedelta(hours=1),
                 heartbeat_at=NOW - timedelta(seconds=beat_ago_s), ttl_s=ttl_s)


@pytest.mark.parametrize("holder, beat_ago_s, alive, verdict", [
    (None, 0, None, Verdict.TAKE),
    (ME, 0, True, Verdict.REENTER),
    (ME.model_copy(update={"run_id": "other"}), 0, True, Verdict.BLOCKED),  # same scope, pid alive
    (ME.model_copy(update={"run_id": "other"}), 9999, False, Verdict.RECLAIM),  # same scope, pid gone
    (ME.model_copy(update={"run_id": "other"}), 0, False, Verdict.RECLAIM),  # gone even with a fresh heartbeat
    (ME.model_copy(update={"scope": "other-box", "run_id": "r"}), 10, None, Verdict.BLOCKED),
    (ME.model_copy(update={"scope": "other-box", "run_id": "r"}), 600, None, Verdict.NEEDS_RECOVERY),
])
def test_decide(holder, beat_ago_s, alive, verdict) -> None:
    assert decide(lease(holder, beat_ago_s) if holder else None, ME, alive, NOW) is verdict


def test_the_message_names_the_holder_since_when_and_the_way_out() -> None:
    other = ME.model_copy(update={"scope": "other-box", "run_id": "r9", "worker": "w2"})
    text = blocked_message(lease(other, 600), Verdict.NEEDS_RECOVERY, NOW)
    assert "run r9 (pid 100 on w2, scope other-box)" in text and "since 2026-01-01T11:00:00+00:00" in text
    assert "hyperloom recover gpu-a --confirm-scope-gone" in text
    assert "recover" not in blocked_message(lease(other, 1), Verdict.BLOCKED, NOW)
