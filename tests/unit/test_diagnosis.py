"""The planner diagnoses before it chooses: telemetry and the roofline name what binds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hyperloom_assets.core.config.targets import TargetSlo, Workload
from hyperloom_assets.core.measurement.measurement import RequestRecord
from hyperloom_assets.core.measurement.metrics import latency_of
from hyperloom_assets.core.measurement.telemetry import Telemetry
from hyperloom_assets.core.planning.diagnosis import PlanEvidence, SloBreach, diagnose
from hyperloom_assets.core.planning.plan_evidence import slo_breach
from hyperloom_assets.core.planning.planner import Tried, knob_of, plan, replan
from hyperloom_assets.core.planning.rules import RULES_FILE, RulesError, load_rules
from hyperloom_assets.core.planning.seed_grids import load_grids

GRIDS = load_grids()
SHARED = Workload(kind="shared_prefix", isl=2048, prefix_len=1536, osl=256, concurrency=64)
KV_FAMILY = ("drop --no-enable-prefix-caching", "gpu-memory-utilization", "fp8-kv", "block-size")


def telemetry(**fields) -> Telemetry:
    return Telemetry(engine="vllm", scrapes=5, **fields)


FULL = telemetry(kv_usage_pct_max=100.0, preemptions=0, running_mean=6.0, waiting_mean=50.0)
PREEMPTING = telemetry(kv_usage_pct_max=100.0, preemptions=120, running_mean=15.0, waiting_mean=40.0)
AT_CAP = telemetry(kv_usage_pct_max=30.0, preemptions=0, running_mean=8.0, waiting_mean=20.0)
ROOMY = telemetry(kv_usage_pct_max=20.0, preemptions=0, running_mean=30.0, waiting_mean=0.1, prefill_s=1.0, decode_s=9.0)


@pytest.mark.parametrize("evidence, cap, graphs_off, expected", [
    (PlanEvidence(telemetry=PREEMPTING), 256, False, "kv_capacity"),
    (PlanEvidence(telemetry=FULL), 256, False, "kv_capacity"),  # a queue while the cap is far off
    (PlanEvidence(telemetry=AT_CAP), 8, False, "sequence_cap"),  # a queue behind a full batch
    (PlanEvidence(), 8, False, "sequence_cap"),  # no telemetry: the config says the cap binds
    (PlanEvidence(telemetry=ROOMY), 256, True, "decode_launch"),
    (PlanEvidence(telemetry=ROOMY.model_copy(update={"prefill_s": 6.0, "decode_s": 4.0})), 256, False, "prefill"),
    (PlanEvidence(binding="memory", achieved_pct=85.0, telemetry=ROOMY), 256, False, "memory_bandwidth"),
    (PlanEvidence(telemetry=ROOMY), 256, False, "unknown"),
])
def test_the_first_bottleneck_the_evidence_shows(evidence, cap, graphs_off, expected) -> None:
    diagnosis = diagnose(evidence, cap, 32, graphs_off)
    assert diagnosis.bottleneck == expected, diagnosis.because


def test_a_full_cache_without_a_queue_is_not_kv_bound() -> None:
    calm = telemetry(kv_usage_pct_max=99.0, preemptions=0, running_mean=31.0, waiting_mean=0.0)
    assert diagnose(PlanEvidence(telemetry=calm), 256, 32, False).bottleneck == "unknown"
    assert "no telemetry" in diagnose(PlanEvidence(), 256, 32, False).because


def test_a_kv_bound_baseline_tries_kv_capacity_before_any_sequence_cap() -> None:
    operator = ["--no-enable-prefix-caching", "--max-model-len", "4096"]
    variants = plan("vllm", None, operator, {}, SHARED, PlanEvidence(telemetry=FULL, prefix_share=0.75), set(), grids=GRIDS)
    names = [v.name for v in variants]
    kv = [names.index(next(n for n in names if n.startswith(family))) for family in KV_FAMILY]
    caps = [i for i, n in enumerate(names) if n.startswith("max-num-seqs")]
    assert caps and max(kv) < min(caps), names
    singles = [v for v in variants if v.provenance != "combined"]
    assert singles[0].name == "drop --no-enable-prefix-caching", "a shared prefix served with the cache off"
    assert all(v.diagnosis == "kv_capacity" for v in variants)
    assert "diagnosis kv_capacity: KV cache 100% full" in singles[0].reason and singles[0].rule == "prefix_cache"
    joint = variants[0]
    assert joint.provenance == "combined" and joint.name.startswith("combined: drop --no-enable-prefix-caching + ")
    assert "--max-num-seqs" not in joint.add_args, "a knob that does not act on KV capacity stays out"


def test_a_knob_shown_inert_is_not_retried_until_the_diagnosis_changes() -> None:
    operator = ["--max-model-len", "4096"]
    evidence = PlanEvidence(telemetry=FULL, prefix_share=0.75)
    first = {v.name: v for v in plan("vllm", None, operator, {}, SHARED, evidence, set(), grids=GRIDS)}
    cap, keeper = first["max-num-seqs=128"], first["gpu-memory-utilization=0.95"]
    history = [Tried(cap, "REVERT", 0.8), Tried(keeper, "KEEP", 40.0)]
    same = replan("vllm", None, operator, {}, [keeper], SHARED, evidence, set(), grids=GRIDS, history=history)
    assert not [v for v in same if knob_of(v) == knob_of(cap)], "every value of the inert knob is left out"
    assert any(v.name.startswith("max-num-batched-tokens") for v in same)
    changed = PlanEvidence(telemetry=AT_CAP, prefix_share=0.75)
    again = replan("vllm", None, ["--max-num-seqs", "8", *operator], {}, [keeper], SHARED, changed, set(),
                   grids=GRIDS, history=history)
    assert any(knob_of(v) == knob_of(cap) for v in again), "a new diagnosis tries it afresh"
    moved = [Tried(cap, "REVERT", -25.0), Tried(keeper, "KEEP", 40.0)]
    assert any(knob_of(v) == knob_of(cap)
               for v in replan("vllm", None, operator, {}, [keeper], SHARED, evidence, set(), grids=GRIDS, history=moved)), \
        "a knob that moved throughput a lot was not inert: another value may pay"


def test_every_rule_a_plan_names_is_in_the_table() -> None:
    table = load_rules()
    for evidence in (PlanEvidence(telemetry=FULL, prefix_share=0.75), PlanEvidence(host="cpu"), PlanEvidence()):
        for engine in ("vllm", "sglang", "atom"):
            for v in plan(engine, None, ["--max-num-seqs", "4", "--enforce-eager"], {}, SHARED, evidence, set(), grids=GRIDS):
                assert v.rule in table.rules and v.diagnosis in table.diagnoses


def test_a_bad_rule_table_names_its_file_and_key(tmp_path: Path) -> None:
    raw = yaml.safe_load(RULES_FILE.read_text())
    raw["diagnoses"]["kv_capacity"]["boosts"]["kv_capcity"] = 10
    bad = tmp_path / "rules.yaml"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(RulesError, match=r"rules.yaml: .*diagnoses.kv_capacity.boosts name unknown families or rules "
                                         r"\['kv_capcity'\]"):
        load_rules(bad)
    del raw["diagnoses"]["kv_capacity"]
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(RulesError, match="diagnoses must be exactly"):
        load_rules(bad)


def test_under_a_diagnosis_only_the_knobs_that_act_on_it_are_combined() -> None:
    # The cap (48) is below the concurrency (64), so raising it scores well even while KV
    # binds; it still stays out of the combination, and so do chunked prefill and the budget.
    operator = ["--no-enable-prefix-caching", "--max-model-len", "4096", "--max-num-seqs", "48"]
    variants = plan("vllm", None, operator, {}, SHARED, PlanEvidence(telemetry=FULL, prefix_share=0.75), set(), grids=GRIDS)
    joint = variants[0]
    assert joint.provenance == "combined", [v.name for v in variants]
    parts = joint.name.removeprefix("combined: ").split(" + ")
    assert parts and all(part.startswith(KV_FAMILY) for part in parts), parts
    assert any(v.name.startswith("max-num-seqs=") and v.expected_value >= 0 for v in variants), "the cap raise is strong"


# A baseline that breaks its SLO: per-request latency speaks before the throughput table.
QUEUED = SloBreach(percentile=90, ttft_ms=5200.0, tpot_p50_ms=12.0, itl_p99_ms=15.0)
STALLED = SloBreach(percentile=90, tpot_ms=48.0, tpot_p50_ms=20.0, itl_p99_ms=180.0)
BATCHED = SloBreach(percentile=90, tpot_ms=48.0, tpot_p50_ms=40.0, itl_p99_ms=52.0)
CHUNKY = Workload(kind="random", isl=2048, osl=256, concurrency=64)


@pytest.mark.parametrize("breach, expected, cited", [
    (QUEUED, "slo_queueing", "TTFT p90 bound 5200 ms is over the SLO while TPOT holds, 20.0 requests waiting"),
    (STALLED, "slo_prefill_interference", "ITL p99 180 ms is 9.0x the median TPOT 20 ms"),
    (BATCHED, "slo_batch_tpot", "TPOT p90 bound 48 ms is over the SLO with even steps"),
])
def test_a_broken_slo_is_diagnosed_from_latency_first(breach, expected, cited) -> None:
    found = diagnose(PlanEvidence(telemetry=AT_CAP, slo_breach=breach), 8, 64, False)
    assert found.bottleneck == expected and cited in found.because, found


def test_the_breach_is_judged_on_the_bound_as_the_climb_judges() -> None:
    step = 0.04
    records = [RequestRecord(ok=True, prompt_tokens=8, output_tokens=5, ttft_s=0.1, e2el_s=0.1 + 4 * step,
                             itl_s=[step] * 4) for _ in range(100)]
    latency = latency_of(records)
    breach = slo_breach(TargetSlo(tpot_ms=30, ttft_ms=1000, percentile=90), latency)
    assert breach.tpot_ms == pytest.approx(40.0) and breach.ttft_ms is None and breach.itl_p99_ms == pytest.approx(40.0)
    assert slo_breach(TargetSlo(tpot_ms=50, percentile=90), latency) is None
    assert slo_breach(None, latency) is None


def _order(variants, prefix: str) -> int:
    return next(i for i, v in enumerate(variants) if v.name.startswith(prefix))


def test_each_slo_diagnosis_puts_the_knob_that_acts_on_it_first() -> None:
    operator = ["--max-num-seqs", "64", "--max-num-batched-tokens", "8192"]
    batched = plan("vllm", None, operator, {}, CHUNKY, PlanEvidence(slo_breach=BATCHED), set(), grids=GRIDS)
    singles = [v for v in batched if v.provenance != "combined"]
    lower = next(v for v in singles if v.rule == "cap_lower_slo")
    assert singles[0].rule == "cap_lower_slo" and "diagnosis slo_batch_tpot" in lower.reason, \
        [(v.name, v.rule) for v in singles]
    assert int(lower.add_args[lower.add_args.index("--max-num-seqs") + 1]) < 64
    stalled = plan("vllm", None, operator, {}, CHUNKY, PlanEvidence(slo_breach=STALLED), set(), grids=GRIDS)
    singles = [v for v in stalled if v.provenance != "combined"]
    assert singles[0].rule == "budget_down", [(v.name, v.rule) for v in singles]
    queued = plan("vllm", None, ["--max-num-seqs", "16"], {}, CHUNKY, PlanEvidence(slo_breach=QUEUED), set(), grids=GRIDS)
    singles = [v for v in queued if v.provenance != "combined"]
    assert singles[0].rule.startswith("cap_raise"), [(v.name, v.rule) for v in singles]


def test_a_sequence_cap_that_broke_tpot_bounds_the_caps_planned_after_it() -> None:
    from hyperloom_assets.core.measurement.slo_verdict import SloVerdict
    from hyperloom_assets.core.planning.slo_ceiling import broke_batch_latency

    operator = ["--max-num-seqs", "16"]
    workload = Workload(kind="random", isl=1024, osl=256, concurrency=256)
    first = {v.name: v for v in plan("vllm", None, operator, {}, workload, PlanEvidence(), set(), grids=GRIDS)}
    caps = sorted(int(n.split("=")[1]) for n in first if n.startswith("max-num-seqs="))
    assert len(caps) >= 3 and "drop --max-num-seqs" in first, first
    broke = first[f"max-num-seqs={caps[1]}"]
    slo = TargetSlo(tpot_ms=20, ttft_ms=5000, percentile=95)
    tpot = SloVerdict(percentile=95, tpot_ms=28.0, tpot_upper_ms=28.1, ttft_ms=100, ttft_upper_ms=120, launches=1,
                      met=False, why="tpot")
    ttft = tpot.model_copy(update={"tpot_ms": 10.0, "tpot_upper_ms": 11.0, "ttft_ms": 6000, "ttft_upper_ms": 7000})
    assert broke_batch_latency(slo, tpot) and not broke_batch_latency(slo, ttft), "queueing is not the batch's"
    history = [Tried(broke, "REVERT", 200.0, broke_batch_latency(slo, tpot))]
    after = {v.name for v in plan("vllm", None, operator, {}, workload, PlanEvidence(), set(), grids=GRIDS,
                                  history=history)}
    assert f"max-num-seqs={caps[0]}" in after, "a smaller cap may still meet it"
    assert not [n for n in after if n.startswith("max-num-seqs=") and int(n.split("=")[1]) >= caps[1]], after
    assert "drop --max-num-seqs" not in after, "the default cap is larger still"
    assert not any(f"max-num-seqs={caps[1]}" in n for n in after if n.startswith("combined")), after
    queued = [Tried(broke, "REVERT", 200.0, broke_batch_latency(slo, ttft))]
    assert f"max-num-seqs={caps[2]}" in {v.name for v in plan("vllm", None, operator, {}, workload, PlanEvidence(),
                                                                 set(), grids=GRIDS, history=queued)}
