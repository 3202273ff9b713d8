"""The combined variant: the best value of each strong knob, one trial for several knobs."""

from __future__ import annotations

from hyperloom_assets.core.planning.combine import combined
from hyperloom_assets.core.planning.rules import CombineRules
from hyperloom_assets.core.planning.variants import Variant, apply_variant

RULES = CombineRules(min_score=60, min_knobs=2, max_knobs=3)


def v(name: str, score: float, add: list[str] | None = None, remove: list[str] | None = None,
      risky: bool = False) -> Variant:
    return Variant(name=name, add_args=add or [], remove_args=remove or [], provenance="seed_grid", reason=name,
                   expected_value=score, accuracy_risky=risky, rule=name, diagnosis="kv_capacity")


def test_the_best_value_of_each_strong_knob_joins_once() -> None:
    plan = [v("cap=64", 140, ["--max-num-seqs", "64"]), v("cap=128", 130, ["--max-num-seqs", "128"]),
            v("drop eager", 120, remove=["--enforce-eager"]), v("fp8", 90, ["--kv-cache-dtype", "fp8"], risky=True),
            v("block=32", 50, ["--block-size", "32"])]
    joint = combined(plan, RULES)
    assert joint.name == "combined: cap=64 + drop eager + fp8"
    assert apply_variant(["--max-num-seqs", "8", "--enforce-eager"], {}, joint).argv == [
        "--max-num-seqs", "64", "--kv-cache-dtype", "fp8"]
    assert joint.accuracy_risky and joint.provenance == "combined" and joint.expected_value == 350
    assert "cap=64 [cap=64] 140" in joint.reason


def test_fewer_strong_knobs_than_the_minimum_combine_nothing() -> None:
    assert combined([v("cap=64", 140, ["--max-num-seqs", "64"]), v("block=32", 50, ["--block-size", "32"])], RULES) is None
    assert combined([v("cap=64", 140, ["--max-num-seqs", "64"]), v("cap=32", 100, ["--max-num-seqs", "32"])], RULES) is None


def test_a_knob_the_keepers_moved_stays_out_of_the_combination() -> None:
    plan = [v("cap=64", 140, ["--max-num-seqs", "64"]), v("drop eager", 120, remove=["--enforce-eager"]),
            v("fp8", 90, ["--kv-cache-dtype", "fp8"])]
    joint = combined(plan, RULES, held=frozenset({"--max-num-seqs"}))
    assert joint.name == "combined: drop eager + fp8"


def test_after_the_engine_refused_a_combination_the_next_leaves_its_weakest_knob_out() -> None:
    plan = [v("cap=64", 140, ["--max-num-seqs", "64"]), v("drop eager", 120, remove=["--enforce-eager"]),
            v("no-chunked", 70, ["--no-enable-chunked-prefill"])]
    first = combined(plan, RULES)
    assert first.name == "combined: cap=64 + drop eager + no-chunked"
    assert combined(plan, RULES, refused=[first]).name == "combined: cap=64 + drop eager"
    second = combined(plan, RULES, refused=[first])
    assert combined(plan, RULES, refused=[first, second]) is None, "two knobs left out: one knob is no combination"
