"""Each asset check's verdict and severity on inputs built to sit either side of its line.

The sim runs of tests/assets/test_checks_sim.py show the checks wired into the graph;
these pin what each one decides, deterministically (a real baseline's spread depends on
how loaded the machine is).
"""

from __future__ import annotations

import dagster as dg

from hyperloom_assets.assets import checks
from hyperloom_assets.core.measurement.measurement import RepeatMetrics
from hyperloom_assets.core.measurement.metrics import summarize
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.report.consistency import Comparison
from hyperloom_assets.core.results import StackResult
from hyperloom_assets.core.roofline.position import Position
from hyperloom_assets.resources.bench import monitor

WARN, ERROR = dg.AssetCheckSeverity.WARN, dg.AssetCheckSeverity.ERROR


def measurement(*throughputs: float, lag_ms: float | None = 5.0, cpu_pct: float | None = 20.0):
    repeats = [RepeatMetrics(output_throughput=t, request_throughput=1.0, ttft_p50_ms=10, ttft_p99_ms=20, tpot_p50_ms=2,
                             itl_p50_ms=2, e2el_p50_ms=100, completed=8, duration_s=1.0) for t in throughputs]
    return summarize(repeats, client_loop_lag_p99_ms=lag_ms, client_cpu_pct=cpu_pct)


def values(result: dg.AssetCheckResult) -> dict:
    return {k: getattr(v, "value", v) for k, v in result.metadata.items()}


def test_converged_passes_within_the_limit_and_warns_over_it() -> None:
    calm = checks.baseline_converged(measurement(100.0, 102.0))
    assert calm.passed and values(calm)["spread_pct"] == 1.98 and values(calm)["limit_pct"] == 3.0
    noisy = checks.baseline_converged(measurement(100.0, 104.0, 101.0))
    assert not noisy.passed and noisy.severity == WARN and values(noisy)["spread_pct"] == 3.93
    assert values(noisy)["repeat_output_throughputs"] == [100.0, 104.0, 101.0]


def test_converged_cannot_judge_one_repeat() -> None:
    single = checks.baseline_converged(measurement(100.0))
    assert not single.passed and single.severity == WARN and single.description.startswith("cannot run")


def test_client_saturation_by_lag_or_cpu_warns_with_the_numbers() -> None:
    assert checks.baseline_client_not_saturated(measurement(100.0, 100.0)).passed
    lagging = checks.baseline_client_not_saturated(measurement(100.0, 100.0, lag_ms=monitor.LAG_P99_LIMIT_MS + 1))
    busy = checks.baseline_client_not_saturated(measurement(100.0, 100.0, cpu_pct=monitor.CPU_LIMIT_PCT + 1))
    for result in (lagging, busy):
        assert not result.passed and result.severity == WARN
    assert values(lagging)["loop_lag_p99_ms"] == 51.0 and values(busy)["client_cpu_pct"] == 91.0
    unknown = checks.baseline_client_not_saturated(measurement(100.0, 100.0, lag_ms=None))
    assert not unknown.passed and "cannot run" in unknown.description


def stack(gain: float, low: float, high: float, keepers: int = 1) -> StackResult:
    variants = [Variant(name=f"v{i}", add_args=["--x", str(i)], provenance="seed_grid", reason="r") for i in range(keepers)]
    return StackResult(keepers=variants, conflicts=[], final_argv=[], launch_argv=[], final_env={},
                       validated=bool(keepers), base_launches=[[1.0]] * 2, stack_launches=[[1.0]] * 2,
                       final_output_throughput=1.0, validated_gain_pct=gain, validated_gain_ci_low=low,
                       validated_gain_ci_high=high, stop_reason="budget_exhausted")


def test_validated_gain_interval_above_zero_passes_straddling_warns_below_is_an_error() -> None:
    above = checks.validated_gain_interval_excludes_zero(stack(12.0, 4.0, 20.0))
    straddling = checks.validated_gain_interval_excludes_zero(stack(2.0, -1.0, 5.0))
    below = checks.validated_gain_interval_excludes_zero(stack(-6.0, -9.0, -3.0))
    assert above.passed and values(above)["validated_gain_ci_low"] == 4.0
    assert not straddling.passed and straddling.severity == WARN and "includes zero" in straddling.description
    assert not below.passed and below.severity == ERROR and "slower" in below.description
    nothing = checks.validated_gain_interval_excludes_zero(stack(0.0, 0.0, 0.0, keepers=0))
    assert not nothing.passed and nothing.severity == WARN and "cannot run: no keeper" in nothing.description


def position(id_: int, tok_s: float, ceiling: float = 1000.0) -> Position:
    return Position(measurement_id=id_, kind="sweep", fingerprint=None, concurrency=16, output_throughput=tok_s,
                    ceiling_tok_s=ceiling, binding="memory")


def test_a_measurement_above_its_ceiling_is_an_error_naming_it() -> None:
    under = checks.no_measurement_above_roofline([position(1, 400.0), position(2, 990.0)], [])
    assert under.passed and values(under)["highest_of_ceiling_pct"] == 99.0 and values(under)["measurements_checked"] == 2
    over = checks.no_measurement_above_roofline([position(1, 400.0), position(2, 1010.0)], [])
    assert not over.passed and over.severity == ERROR and "sweep measurement 2" in over.description
    assert values(over)["above_ceiling"] == 1


def test_roofline_check_cannot_pass_on_what_it_could_not_judge() -> None:
    assert not checks.no_measurement_above_roofline([], []).passed
    partial = checks.no_measurement_above_roofline([position(1, 400.0)], [7])
    assert not partial.passed and partial.severity == WARN and "[7]" in partial.description


def test_a_report_that_disagrees_with_the_store_is_an_error(tmp_path) -> None:
    agree = Comparison(what="final output tok/s", report="1.0", store="1.0", matches=True)
    differ = Comparison(what="validated gain %", report="12.0", store="11.0", matches=False)
    assert checks.report_matches_store([agree], tmp_path / "report.md").passed
    bad = checks.report_matches_store([agree, differ], tmp_path / "report.md")
    assert not bad.passed and bad.severity == ERROR and "validated gain %: report 12.0, store 11.0" in bad.description
    assert values(bad)["mismatches"] == 1 and len(values(bad)["comparisons"].records) == 2
