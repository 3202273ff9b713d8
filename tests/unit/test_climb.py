"""The climb's loop: decisions against the running best, re-planning, replay, stops."""

from __future__ import annotations

from hyperloom_assets.climb import Budget, TrialMeasurement, TrialRecord, climb
from hyperloom_assets.variants import Variant

BASE = [100.0, 101.0, 99.0]


def variant(name: str, *args: str) -> Variant:
    return Variant(name=name, add_args=list(args), provenance="seed_grid", reason="test")


CAP = variant("cap", "--max-num-seqs", "16")
BUDGET = variant("budget", "--max-num-batched-tokens", "8192")
NOOP = variant("noop", "--block-size", "32")
CRASH = variant("crash", "--bad", "1")


def flags(keepers: list[Variant], v: Variant) -> set[str]:
    return {a for k in [*keepers, v] for a in k.add_args if a.startswith("--")}


def physics(keepers: list[Variant], v: Variant) -> TrialMeasurement:
    """The cap pays alone; the budget pays only once the cap is raised."""
    if v is CRASH:
        return TrialMeasurement(error_class="argv_invalid", error="unrecognized arguments: --bad")
    on = flags(keepers, v)
    level = 100.0
    if "--max-num-seqs" in on:
        level = 150.0
        if "--max-num-batched-tokens" in on:
            level = 180.0
    return TrialMeasurement(throughputs=[level, level + 1, level - 1], measuring_s=1.0)


class Ledger:
    def __init__(self) -> None:
        self.rows: dict[str, TrialRecord] = {}

    def recall(self, fingerprint: str) -> TrialRecord | None:
        return self.rows.get(fingerprint)

    def remember(self, record: TrialRecord) -> None:
        self.rows[record.fingerprint] = record


def run(plan, measure, ledger: Ledger | None = None, **budget):
    ledger = ledger or Ledger()
    limits = {"max_trials": 10, "target_gain_pct": 500.0, **budget}
    return climb(BASE, 1.0, Budget(**limits), plan, measure, ledger.recall, ledger.remember)


def test_keeps_the_cap_then_finds_the_budget_that_only_pays_after_it() -> None:
    def plan(keepers, tried):
        return [BUDGET, CAP] if not keepers else [BUDGET]

    result = run(plan, physics)
    outcomes = [(t.name, t.outcome) for t in result.trials]
    assert outcomes == [("budget", "REVERT"), ("cap", "KEEP"), ("budget", "KEEP")]
    assert [k.name for k in result.keepers] == ["cap", "budget"]
    assert result.trials[2].against == "stack of 1 keeper(s)"
    assert result.stop_reason == "no_more_candidates"


def test_a_a_candidates_are_not_kept() -> None:
    result = run(lambda keepers, tried: [NOOP], physics)
    assert [t.outcome for t in result.trials] == ["REVERT"]
    assert result.keepers == []


def test_a_crash_is_failed_and_the_next_candidate_runs() -> None:
    result = run(lambda keepers, tried: [CRASH, CAP] if not keepers else [], physics)
    assert [(t.name, t.outcome, t.error_class) for t in result.trials] == [
        ("crash", "FAILED", "argv_invalid"), ("cap", "KEEP", None)]


def test_re_execution_replays_the_ledger_and_measures_nothing() -> None:
    ledger = Ledger()
    plan = lambda keepers, tried: [BUDGET, CAP] if not keepers else [BUDGET]  # noqa: E731
    first = run(plan, physics, ledger)
    calls = []

    def counting(keepers, v):
        calls.append(v.name)
        return physics(keepers, v)

    second = run(plan, counting, ledger)
    assert calls == []
    assert [t.outcome for t in second.trials] == [t.outcome for t in first.trials]
    assert all(t.replayed for t in second.trials)
    assert [k.name for k in second.keepers] == ["cap", "budget"]


def test_needs_review_is_measured_at_most_three_times() -> None:
    noisy = iter([[99.0, 103.0, 104.0], [98.0, 104.0, 103.0], [97.0, 105.0, 103.0], [200.0] * 3])
    calls = []

    def measure(keepers, v):
        calls.append(v.name)
        return TrialMeasurement(throughputs=next(noisy), measuring_s=1.0)

    result = run(lambda keepers, tried: [NOOP], measure)
    assert len(calls) == 3
    assert result.trials[0].measurements == 3
    assert result.trials[0].outcome == "REVERT"


def test_overtime_is_killed_overtime() -> None:
    slow = lambda keepers, v: TrialMeasurement(throughputs=[300.0] * 3, measuring_s=5.0)  # noqa: E731
    result = run(lambda keepers, tried: [CAP], slow)
    assert result.trials[0].outcome == "KILLED_OVERTIME"
    assert result.keepers == []


def test_stops_at_target_gain_and_at_max_trials() -> None:
    reached = run(lambda keepers, tried: [CAP, BUDGET] if not keepers else [BUDGET], physics, target_gain_pct=40.0)
    assert reached.stop_reason == "target_reached"
    assert len(reached.trials) == 1
    capped = run(lambda keepers, tried: [NOOP, BUDGET, CAP], physics, max_trials=2)
    assert capped.stop_reason == "budget_exhausted"
    assert len(capped.trials) == 2
