"""The climb's two checks besides throughput: a patch that does not apply is REJECTED before any
launch, and a risky winner must pass the accuracy gate (failing closed)."""

from __future__ import annotations

from hyperloom_assets.core.decisions.climb import Budget, Checks, TrialMeasurement, climb
from hyperloom_assets.core.decisions.ledger import MemoryLedger
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.patches.patch import parse_patch
from hyperloom_assets.core.planning.fingerprints import variant_fingerprint
from hyperloom_assets.core.planning.patch_plan import patch_variant
from hyperloom_assets.core.planning.variants import Variant
from tests.unit.test_climb import BASE, CAP

PATCH = patch_variant(parse_patch("--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a\n+b\n", "x", "operator",
                                  engine_for("vllm")), 1.0)
RISKY_CAP = CAP.model_copy(update={"name": "risky-cap", "accuracy_risky": True})


def measured(keepers: list[Variant], v: Variant | None) -> TrialMeasurement:
    # every variant wins by 50%, and so does its stack's rebench (the stack launched alone)
    level = 150.0 if v is not None or keepers else 100.0
    return TrialMeasurement(throughputs=[level, level + 1, level - 1], measuring_s=1.0)


def run_one(variant: Variant, checks: Checks, measure=measured):
    result = climb(BASE, 1.0, Budget(max_trials=1, target_gain_pct=500.0), lambda keepers, tried: [variant],
                   measure, MemoryLedger(), checks=checks)
    return result.trials[0]


def test_a_patch_git_refuses_is_rejected_and_nothing_is_launched() -> None:
    launches = []

    def measure(keepers, v):
        launches.append(v)
        return measured(keepers, v)

    trial = run_one(PATCH, Checks(admit=lambda keepers, v: "error: patch failed: vllm/x.py:1"), measure)
    assert trial.outcome == "REJECTED" and "patch failed: vllm/x.py:1" in trial.decision.reason
    assert launches == [] and trial.launch_count == 0


def test_a_risky_winner_is_kept_only_when_the_gate_passes() -> None:
    asked = []

    def gate(verdict):
        def judge(keepers, v):
            asked.append(v.name)
            return verdict, "4 of 32 prompts agree"
        return judge

    assert run_one(RISKY_CAP, Checks(gate=gate("pass"))).outcome == "KEEP"
    dropped = run_one(RISKY_CAP, Checks(gate=gate("drop")))
    assert dropped.outcome == "REVERT" and dropped.decision.reason.startswith("accuracy_drop: 4 of 32")
    closed = run_one(PATCH, Checks(admit=lambda keepers, v: None, gate=gate("unavailable")))
    assert closed.outcome == "REVERT" and closed.decision.reason.startswith("accuracy_unavailable:")
    asked.clear()
    assert run_one(CAP, Checks(gate=gate("drop"))).outcome == "KEEP", "a variant that is not risky is not gated"
    assert asked == []


def test_a_loser_never_reaches_the_gate() -> None:
    def slower(keepers, v):
        level = 80.0 if v is not None else 100.0
        return TrialMeasurement(throughputs=[level, level + 1, level - 1], measuring_s=1.0)

    def gate(keepers, v):
        raise AssertionError("the gate runs only on variants that won on throughput")

    assert run_one(RISKY_CAP, Checks(gate=gate), slower).outcome == "REVERT"


def test_a_patch_fingerprint_is_its_text_not_its_name() -> None:
    renamed = PATCH.model_copy(update={"name": "patch other-name"})
    assert variant_fingerprint(renamed) == variant_fingerprint(PATCH) != variant_fingerprint(CAP)
