"""The climb under a target's SLO: a variant that breaks it is reverted whatever its
throughput, a baseline that breaks it is searched out of first, the rebench must meet it
too, and each trial's row carries the verdict with its percentiles and bounds."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hyperloom_assets.core.config.targets import Target, TargetSlo, Workload
from hyperloom_assets.core.decisions.climb import Budget, Checks, SloCheck, TrialMeasurement, climb
from hyperloom_assets.core.decisions.ledger import MemoryLedger
from hyperloom_assets.core.measurement.measurement import RequestRecord
from hyperloom_assets.core.measurement.metrics import latency_of
from hyperloom_assets.core.planning.plan_evidence import slo_skip
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.report.rendering import trials_markdown
from tests.conftest import SIM_MODEL

BASE = [100.0, 101.0, 99.0]
SLO = TargetSlo(tpot_ms=30, percentile=95)


def variant(name: str, *args: str) -> Variant:
    return Variant(name=name, add_args=list(args), provenance="search_space", reason="test")


BIG_BATCH = variant("big batch", "--max-num-seqs", "64")  # +60% throughput, TPOT 60 ms: breaks the SLO
CHUNKS = variant("chunks", "--max-num-batched-tokens", "512")  # +15%, TPOT 16 ms
SMALL_BATCH = variant("small batch", "--max-num-seqs", "8")  # -20%, TPOT 10 ms


def latency(tpot_ms: float):
    """One launch's 100 requests, each streamed at `tpot_ms` per token (a p95 bound needs 59)."""
    step = tpot_ms / 1000
    return latency_of([RequestRecord(ok=True, prompt_tokens=8, output_tokens=5, ttft_s=0.1, e2el_s=0.1 + 4 * step,
                                     itl_s=[step] * 4) for _ in range(100)])


def physics(base_tpot_ms: float = 20.0, rebench_tpot_ms: float | None = None):
    """Throughput and TPOT of a config: the last knob on it decides; the rebench may read otherwise."""
    calls = {"n": 0}

    def measure(keepers: list[Variant], v: Variant | None) -> TrialMeasurement:
        calls["n"] += 1
        on = [*keepers, *([v] if v else [])]
        level, tpot = 100.0, base_tpot_ms
        for knob in on:
            level, tpot = {"big batch": (160.0, 60.0), "chunks": (115.0, 16.0), "small batch": (80.0, 10.0)}[knob.name]
        if v is None and rebench_tpot_ms is not None:
            tpot = rebench_tpot_ms
        return TrialMeasurement(throughputs=[level, level + 1, level - 1], measuring_s=1.0, latency=latency(tpot))

    return measure, calls


def run(plan, measure, base_tpot_ms: float = 20.0, slo: TargetSlo | None = SLO):
    checks = Checks(slo=SloCheck(slo, latency(base_tpot_ms)) if slo else None)
    return climb(BASE, 1.0, Budget(max_trials=10, target_gain_pct=500.0), plan, measure, MemoryLedger(),
                 checks=checks)


def first_only(first: list[Variant]):
    return lambda keepers, tried: first if not keepers else [v for v in first if v not in keepers]


def test_the_fastest_config_that_breaks_the_slo_is_reverted_and_one_that_meets_it_kept() -> None:
    measure, _ = physics()
    result = run(first_only([BIG_BATCH, CHUNKS]), measure)
    big, chunks = result.trials[0], result.trials[1]
    assert big.outcome == "REVERT" and big.decision.reason.startswith("slo_missed: tpot_ms p95 upper bound 60 ms > 30")
    assert big.measurements == 1 and big.decision.gain_pct > 50, "one launch decides: more can only add a worse one"
    assert big.slo.met is False and big.slo.tpot_ms == pytest.approx(60) and big.slo.tpot_upper_ms == pytest.approx(60)
    assert chunks.outcome == "KEEP" and chunks.slo.met is True, chunks.decision.reason
    assert [k.name for k in result.keepers] == ["chunks"]


def test_without_an_slo_the_fastest_config_is_kept() -> None:
    measure, _ = physics()
    result = run(first_only([BIG_BATCH, CHUNKS]), measure, slo=None)
    assert result.trials[0].outcome == "KEEP" and result.trials[0].slo is None


def test_a_baseline_that_breaks_the_slo_is_searched_out_of_first_even_at_a_throughput_loss() -> None:
    measure, _ = physics(base_tpot_ms=45.0)
    result = run(first_only([BIG_BATCH, SMALL_BATCH, CHUNKS]), measure, base_tpot_ms=45.0)
    outcomes = [(t.name, t.outcome) for t in result.trials]
    assert outcomes[:3] == [("big batch", "REVERT"), ("small batch", "KEEP"), ("chunks", "KEEP")], outcomes
    small = result.trials[1]
    assert small.decision.reason.startswith("slo_reached: meets the SLO the running best breaks"), small.decision.reason
    assert small.decision.gain_pct < -15 and "a fresh launch of the stack meets the SLO too" in small.decision.reason
    # Once inside the SLO the climb is on throughput again, among configs that meet it.
    assert "slo_reached" not in result.trials[2].decision.reason and result.trials[2].against == "stack of 1 keeper(s)"


def test_a_keeper_whose_fresh_launch_breaks_the_slo_is_evicted() -> None:
    measure, _ = physics(rebench_tpot_ms=40.0)
    result = run(first_only([CHUNKS]), measure)
    chunks = result.trials[0]
    assert chunks.outcome == "KEEP_UNSTABLE", chunks.decision.reason
    assert "a fresh launch of the whole stack breaks the SLO: tpot_ms p95 upper bound 40" in chunks.decision.reason
    assert result.keepers == []


def test_the_trials_table_carries_each_verdict() -> None:
    measure, _ = physics()
    result = run(first_only([BIG_BATCH, CHUNKS]), measure)
    text = trials_markdown(result.trials)
    assert "| SLO |" in text
    assert "missed at p95: TPOT 60 ms (bound 60)" in text and "met at p95: TPOT 16 ms (bound 16)" in text
    assert "| SLO |" not in trials_markdown(run(first_only([CHUNKS]), physics()[0], slo=None).trials)


def test_a_cap_at_or_over_one_that_broke_tpot_is_passed_over_without_a_launch() -> None:
    target = Target(engine="vllm", model=SIM_MODEL, server_args=["--max-num-seqs", "16"], slo=SLO,
                    workload=Workload(kind="random", isl=512, osl=128, concurrency=256))
    skip = slo_skip(target, SimpleNamespace(hardware="H100 SXM"))  # vLLM's GPU default cap is 256
    caps = {n: variant(f"max-num-seqs={n}", "--max-num-seqs", str(n)) for n in (64, 128, 256)}
    drop = Variant(name="drop --max-num-seqs", remove_args=["--max-num-seqs"], provenance="ablation", reason="t")

    def measure(keepers: list[Variant], v: Variant | None) -> TrialMeasurement:
        cap = 16
        for knob in [*keepers, *([v] if v else [])]:
            cap = 256 if knob.remove_args else int(knob.add_args[1])
        return TrialMeasurement(throughputs=[100.0 + cap] * 3, measuring_s=1.0, latency=latency(cap / 4))

    result = climb(BASE, 1.0, Budget(max_trials=10, target_gain_pct=500.0),
                   first_only([caps[128], caps[256], drop, caps[64]]), measure, MemoryLedger(),
                   checks=Checks(slo=SloCheck(SLO, latency(4)), skip=skip))
    assert [(t.name, t.outcome) for t in result.trials] == [("max-num-seqs=128", "REVERT"), ("max-num-seqs=64", "KEEP")], \
        "a cap of 128 breaks TPOT 30 ms, so 256 and the default (256) are not launched"


def mixed(tpot_ms: float, tail_ms: float, tail: int = 3):
    """One launch of 100 requests, `tail` of them at `tail_ms`: p95 bound (the 99th) over a 30 ms limit
    and the lower bound under it, so the launch is neither shown within the SLO nor shown breaking it."""
    records = [RequestRecord(ok=True, prompt_tokens=8, output_tokens=5, ttft_s=0.1, e2el_s=0.1 + 4 * ms / 1000,
                             itl_s=[ms / 1000] * 4) for ms in [tpot_ms] * (100 - tail) + [tail_ms] * tail]
    return latency_of(records)


TINY_BATCH = variant("tiny batch", "--max-num-seqs", "2")  # -60% throughput, TPOT 5 ms


def levels(table: dict[str, tuple[float, object]], rebench: float | None = None):
    """`measure` from a table name -> (throughput, latency or a list of latencies, one per launch in turn)."""
    seen: dict[str, int] = {}

    def measure(keepers: list[Variant], v: Variant | None) -> TrialMeasurement:
        on = [*keepers, *([v] if v else [])]
        name = on[-1].name if on else "base"
        level, lat = table[name]
        if isinstance(lat, list):
            lat = lat[min(seen.get(name, 0), len(lat) - 1)]
        seen[name] = seen.get(name, 0) + 1
        if v is None and keepers and rebench is not None:
            level = rebench
        return TrialMeasurement(throughputs=[level, level + 1, level - 1], measuring_s=1.0, latency=lat)

    return measure


def test_slo_reached_refuses_a_variant_far_below_the_best_that_breaks_the_slo() -> None:
    """The baseline is shown breaking TPOT 30 ms (every request at 45); a cap that meets it at -60% is more
    than the SLO asks for: REVERT slo_floor, and the -20% one is kept as slo_reached."""
    measure = levels({"base": (100.0, latency(45)), "tiny batch": (40.0, latency(5)),
                      "small batch": (80.0, latency(10))})
    result = run(first_only([TINY_BATCH, SMALL_BATCH]), measure, base_tpot_ms=45.0)
    tiny, small = result.trials[0], result.trials[1]
    assert tiny.outcome == "REVERT" and tiny.decision.reason.startswith("slo_floor: meets the SLO the running best "
                                                                        "breaks"), tiny.decision.reason
    assert "more than 25% below the running best" in tiny.decision.reason
    assert small.outcome == "KEEP" and small.decision.reason.startswith("slo_reached"), small.decision.reason


def test_slo_reached_refuses_when_the_best_only_failed_to_show_it_meets_the_slo() -> None:
    """One launch of the baseline whose p95 bound is over the limit but whose lower bound is under it (3 slow
    requests of 100): not shown breaking, so a variant that meets the SLO at -20% is judged on throughput."""
    base = mixed(20, 45)
    measure = levels({"base": (100.0, base), "small batch": (80.0, latency(10)), "chunks": (115.0, latency(16))})
    checks = Checks(slo=SloCheck(SLO, base))
    result = climb(BASE, 1.0, Budget(max_trials=10, target_gain_pct=500.0), first_only([SMALL_BATCH, CHUNKS]),
                   measure, MemoryLedger(), checks=checks)
    small, chunks = result.trials[0], result.trials[1]
    assert small.outcome == "REVERT" and "slo_reached" not in small.decision.reason, small.decision.reason
    assert small.slo.met and "is under 1.0%" in small.decision.reason
    assert chunks.outcome == "KEEP" and chunks.slo.met, chunks.decision.reason


def test_an_unclear_launch_of_a_variant_earns_another_look_and_a_clear_one_keeps_it() -> None:
    """The variant's first launch is unclear on the SLO (3 slow requests of 100): not slo_missed on it; its
    second launch meets the SLO and the gain holds, so it is kept, the unclear launch not read."""
    measure = levels({"base": (100.0, latency(20)), "chunks": (115.0, [mixed(16, 40), latency(16)])})
    result = run(first_only([CHUNKS]), measure)
    chunks = result.trials[0]
    assert chunks.outcome == "KEEP" and chunks.measurements == 2, chunks.decision.reason
    assert chunks.slo.met and chunks.slo.launches == 1 and "not read: an earlier unclear launch" in chunks.slo.why
    # Shown breaking at once is still the end of it: every request at 40 ms is over 30 on every bound.
    broken = run(first_only([CHUNKS]), levels({"base": (100.0, latency(20)), "chunks": (115.0, latency(40))}))
    assert broken.trials[0].outcome == "REVERT" and broken.trials[0].measurements == 1
    assert "shown breaking it" in broken.trials[0].decision.reason
    # Unclear twice: never shown within, never shown breaking: REVERT slo_missed after its second launch.
    twice = run(first_only([CHUNKS]), levels({"base": (100.0, latency(20)), "chunks": (115.0, mixed(16, 40))}))
    assert twice.trials[0].outcome == "REVERT" and twice.trials[0].measurements == 2
    assert twice.trials[0].decision.reason.startswith("slo_missed: not shown within the SLO in 2 launch(es)")


def test_the_rebench_of_an_slo_reached_keeper_checks_its_throughput_too() -> None:
    """Kept as slo_reached at -20%, its fresh launch serves at -50%: evicted, as it costs more than the SLO asks."""
    measure = levels({"base": (100.0, latency(45)), "small batch": (80.0, latency(10))}, rebench=50.0)
    result = run(first_only([SMALL_BATCH]), measure, base_tpot_ms=45.0)
    small = result.trials[0]
    assert small.outcome == "KEEP_UNSTABLE", small.decision.reason
    assert "more than the 25% an SLO may cost" in small.decision.reason and result.keepers == []


def test_a_cap_only_unclear_on_tpot_rules_no_larger_cap_out() -> None:
    """The planner's cap ceiling reads a break as the climb does: a lower bound over the limit."""
    from hyperloom_assets.core.planning.slo_ceiling import broke_batch_latency
    from hyperloom_assets.core.measurement.slo_verdict import slo_verdict

    unclear = slo_verdict(SLO, [mixed(20, 40)])
    assert not unclear.met and not unclear.broken and not broke_batch_latency(SLO, unclear), unclear.why
    assert broke_batch_latency(SLO, slo_verdict(SLO, [latency(40)]))


def spread(center_ms: float, half_width_ms: float = 10.0):
    """One launch of 100 requests whose TPOTs spread evenly over center +- half_width: a p95 bound with
    room between its lower and upper bounds, as a launch's requests have."""
    ms = [center_ms - half_width_ms + 2 * half_width_ms * i / 99 for i in range(100)]
    return latency_of([RequestRecord(ok=True, prompt_tokens=8, output_tokens=5, ttft_s=0.1, e2el_s=0.1 + 4 * m / 1000,
                                     itl_s=[m / 1000] * 4) for m in ms])


# (throughput, TPOT centre) of a config by its last knob: the operator's breaks the 30 ms SLO at 60 ms
STONES = {"halfway": (105.0, 45.0), "nudge": (106.0, 59.0), "slow halfway": (70.0, 45.0), "chunks": (115.0, 16.0),
          "backslide": (107.0, 46.0), "closer still": (108.0, 35.0)}
HALFWAY, NUDGE, SLOW_HALFWAY = variant("halfway", "--a", "1"), variant("nudge", "--b", "1"), variant("slow halfway", "--c", "1")


def stone_physics(rebench_tpot_ms: float | None = None):
    def measure(keepers: list[Variant], v: Variant | None) -> TrialMeasurement:
        level, tpot = 100.0, 60.0
        for knob in [*keepers, *([v] if v else [])]:
            level, tpot = STONES[knob.name]
        if v is None and keepers and rebench_tpot_ms is not None:
            tpot = rebench_tpot_ms
        return TrialMeasurement(throughputs=[level, level + 1, level - 1], measuring_s=1.0, latency=spread(tpot))
    return measure


def stepping_plan(first: list[Variant]):
    """`first` on the operator's config; once one of them is kept, only the chunks, which alone from the
    operator's config would not be offered: no single move from the baseline meets the SLO."""
    return lambda keepers, tried: first if not keepers else [CHUNKS] if CHUNKS not in keepers else []


def stone_run(plan, measure):
    checks = Checks(slo=SloCheck(SLO, spread(60.0)))
    return climb(BASE, 1.0, Budget(max_trials=10, target_gain_pct=500.0), plan, measure, MemoryLedger(),
                 checks=checks)


def test_a_config_measurably_closer_to_an_slo_the_best_breaks_is_a_stepping_stone_the_climb_plans_on() -> None:
    result = stone_run(stepping_plan([HALFWAY]), stone_physics())
    outcomes = [(t.name, t.outcome) for t in result.trials]
    assert outcomes == [("halfway", "KEEP"), ("chunks", "KEEP")], [t.decision.reason for t in result.trials]
    stone, reached = result.trials
    assert stone.decision.reason.startswith("slo_closer: a stepping stone, still missing the SLO"), stone.decision.reason
    assert "is measurably closer to the SLO too" in stone.decision.reason and stone.slo.met is False
    assert reached.decision.reason.startswith("slo_reached"), "the stone still breaks it: meeting it is kept first"
    assert [k.name for k in result.keepers] == ["halfway", "chunks"]


def test_a_config_closer_by_less_than_its_bounds_tell_apart_is_no_stepping_stone() -> None:
    result = stone_run(stepping_plan([NUDGE]), stone_physics())
    nudge = result.trials[0]
    assert nudge.outcome == "REVERT" and nudge.decision.reason.startswith("slo_missed"), nudge.decision.reason
    assert result.keepers == [] and len(result.trials) == 1


def test_a_stepping_stone_whose_fresh_launch_is_not_closer_is_evicted() -> None:
    result = stone_run(stepping_plan([HALFWAY]), stone_physics(rebench_tpot_ms=60.0))
    stone = result.trials[0]
    assert stone.outcome == "KEEP_UNSTABLE", stone.decision.reason
    assert "not measurably closer to the SLO than the running best" in stone.decision.reason
    assert result.keepers == []


def test_a_stepping_stone_far_below_the_best_is_reverted_at_the_floor() -> None:
    result = stone_run(stepping_plan([SLOW_HALFWAY]), stone_physics())
    slow = result.trials[0]
    assert slow.outcome == "REVERT" and slow.decision.reason.startswith("slo_floor: measurably closer"), \
        slow.decision.reason


def test_each_stepping_stone_must_be_closer_than_the_last() -> None:
    backslide, closer = variant("backslide", "--d", "1"), variant("closer still", "--e", "1")

    def plan(keepers: list[Variant], tried: set[str]) -> list[Variant]:
        names = [k.name for k in keepers]
        return {(): [HALFWAY], ("halfway",): [backslide, closer], ("halfway", "closer still"): [CHUNKS]}.get(
            tuple(names), [])

    result = stone_run(plan, stone_physics())
    outcomes = [(t.name, t.outcome, t.decision.reason.split(":")[0]) for t in result.trials]
    # backslide is closer than the operator's 60 ms, not than the stone's 45: the mark moves with each stone
    assert outcomes == [("halfway", "KEEP", "slo_closer"), ("backslide", "REVERT", "slo_missed"),
                        ("closer still", "KEEP", "slo_closer"), ("chunks", "KEEP", "slo_reached")], outcomes
