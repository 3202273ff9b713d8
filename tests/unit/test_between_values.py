"""The values between a keeper and the neighbour that lost, on a ladder knob: tried first, bisecting."""

from __future__ import annotations

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.planning.between import Between, between_values
from hyperloom_assets.core.planning.planner import PlanEvidence, Tried, replan
from hyperloom_assets.core.planning.seed_grids import load_grids
from hyperloom_assets.core.planning.variants import Variant

CAP = "--max-num-seqs"


def cap(n: int) -> Variant:
    return Variant(name=f"max-num-seqs={n}", add_args=[CAP, str(n)], provenance="seed_grid", reason="t")


def test_the_midpoint_between_the_kept_value_and_the_nearest_loser_on_each_side() -> None:
    tried = [(cap(32), "REVERT"), (cap(256), "REVERT"), (cap(128), "REVERT"), (cap(64), "KEEP")]
    found = between_values(CAP, 64, tried)
    assert [(b.value, b.kept, b.lost) for b in found] == [(96, 64, 128), (48, 64, 32)]
    assert found[0].why == "max-num-seqs=128: REVERT"


def test_a_stack_that_did_not_hold_loses_too_and_a_keep_or_a_combined_trial_is_no_loser() -> None:
    combined = Variant(name="combined", add_args=[CAP, "128", "--block-size", "32"], provenance="combined", reason="t")
    assert between_values(CAP, 64, [(combined, "REVERT"), (cap(128), "KEEP")]) == []
    assert between_values(CAP, 64, [(cap(128), "KEEP_UNSTABLE")]) == [Between(96, 64, 128, "max-num-seqs=128: KEEP_UNSTABLE")]


def test_the_bisection_stops_once_the_ends_are_within_a_tenth_of_the_kept_value() -> None:
    assert between_values(CAP, 64, [(cap(78), "REVERT")]) == [Between(71, 64, 78, "max-num-seqs=78: REVERT")]
    assert between_values(CAP, 64, [(cap(76), "REVERT")]) == [], "70 is within 6.4 (a tenth of 64) of 64"


def test_after_a_kept_cap_and_a_losing_larger_one_the_plan_tries_the_value_between_first() -> None:
    operator = ["--max-num-seqs", "4", "--enforce-eager"]
    workload = Workload(kind="random", isl=256, osl=64, concurrency=128)
    history = [Tried(cap(64), "KEEP", 40.0), Tried(cap(128), "REVERT", -2.0)]
    plan = replan("vllm", None, operator, {}, [cap(64)], workload, PlanEvidence(host="cpu"), set(),
                  grids=load_grids(), history=history)
    first = plan[0]
    assert first.name == "max-num-seqs=96" and first.add_args == [CAP, "96"], [v.name for v in plan[:3]]
    assert "between the kept 64 and 128, which lost (max-num-seqs=128: REVERT), first" in first.reason
    assert first.reason.startswith("[cap_"), "the ladder's own rule still names it"
    without = replan("vllm", None, operator, {}, [cap(64)], workload, PlanEvidence(host="cpu"), set(),
                     grids=load_grids(), history=history[:1])
    assert "max-num-seqs=96" not in [v.name for v in without[:1]]
