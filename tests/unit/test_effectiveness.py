"""The climb on sim predictions: from a capped config it keeps the variant that lifts the
cap, then finds the token budget that only pays after it (docs/design.md, "Decisions")."""

from __future__ import annotations

from pathlib import Path

from benchmarks.support.offline_climb import SimScenario, run_offline_climb, true_throughput
from hyperloom_assets.core.config.targets import Workload

MODEL = Path(__file__).resolve().parents[2] / "models" / "llama-3-8b"
OPERATOR = ["--max-num-seqs", "8", "--max-num-batched-tokens", "64"]
# A budget of 64 tokens a step barely binds under a cap of 8; with 32 sequences decoding
# it leaves 32 tokens of prefill a step. The target stops the climb once both are in.
SCENARIO = SimScenario(name="capped-budget", model=MODEL, gpu="H200", server_args=OPERATOR,
                       workload=Workload(kind="random", isl=512, osl=128, concurrency=32, num_prompts=128),
                       max_trials=6, target_gain_pct=120)


def test_the_budget_alone_does_not_pay_but_does_after_the_cap():
    # The ground truth the climb is held against: the two knobs only pay together.
    base = true_throughput(SCENARIO, OPERATOR)
    budget_alone = true_throughput(SCENARIO, ["--max-num-seqs", "8", "--max-num-batched-tokens", "128"])
    cap_alone = true_throughput(SCENARIO, ["--max-num-seqs", "32", "--max-num-batched-tokens", "64"])
    both = true_throughput(SCENARIO, ["--max-num-seqs", "32", "--max-num-batched-tokens", "128"])
    assert budget_alone < base * 1.01
    assert cap_alone > base * 1.3 and both > cap_alone * 1.3


def test_from_a_capped_config_the_climb_keeps_the_cap_then_the_budget():
    result = run_offline_climb(SCENARIO, seed=0)
    kept = [(t.name, t.against) for t in result.climb.trials if t.outcome == "KEEP"]
    # The cap goes first, with the other strong knobs of the first plan (planning/combine.py)
    # but without the budget, which only pays once the cap is up.
    first, second = kept
    assert first[0].startswith("combined: max-num-seqs=32 + ") and "max-num-batched-tokens" not in first[0]
    assert first[1] == "baseline" and second == ("max-num-batched-tokens=128", "stack of 1 keeper(s)")
    # Re-planned after the cap keeper, the budget scores first: no launch between the two.
    assert len(result.climb.trials) == 2 and result.climb.stop_reason == "target_reached"
    assert result.launches == 1 + sum(t.measurements + len(t.best_launches) + t.rebenches for t in result.climb.trials)
    assert all(t.rebenches == 1 for t in result.climb.trials if t.outcome == "KEEP"), "each keeper was rebenched"
    final = true_throughput(SCENARIO, result.final_args)
    assert final > true_throughput(SCENARIO, SCENARIO.target().server_args) * 2.2
