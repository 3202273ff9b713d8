"""Asset checks: what a user watches, one result per target in the UI's Checks tab.

Each check is declared on its asset (`check_specs`) and evaluated inside that asset's
step, from the values in hand and the result store. Separate `@asset_check` steps would
reload every input through the IO manager and, under the UI's multiprocess executor,
start a process that imports the whole code location while the next step measures a
server on the same cores; in the asset's step a check costs nothing and always runs
with the materialization it judges. Every spec carries the target partitions, so a
result is filed under its target, not shared by all.

Severity says what a failure means: WARN for a measurement to distrust or a result
that did not come out as hoped, ERROR for a number that cannot be true or a report
that disagrees with its own measurements. A check that cannot judge fails with WARN
and says why; it never passes for want of data.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import dagster as dg

from hyperloom_assets.assets.metadata import table_value
from hyperloom_assets.core.measurement.measurement import Measurement
from hyperloom_assets.core.measurement.metrics import CONVERGENCE_SPREAD_PCT
from hyperloom_assets.core.measurement.stats import spread_pct
from hyperloom_assets.core.report.consistency import Comparison, comparisons_table
from hyperloom_assets.core.report.precision import rounded
from hyperloom_assets.core.report.tables import positions_table
from hyperloom_assets.core.results import StackResult
from hyperloom_assets.core.roofline.position import Position
from hyperloom_assets.resources.bench import monitor

WARN, ERROR = dg.AssetCheckSeverity.WARN, dg.AssetCheckSeverity.ERROR

BASELINE_CHECKS = {
    "baseline_converged": "The baseline's repeats spread (max - min over mean) within the convergence limit.",
    "baseline_client_not_saturated": "The benchmark client kept up in every repeat of the baseline (event-loop "
                                     "lag and its CPU share under their limits).",
}
STACK_CHECKS = {
    "validated_gain_interval_excludes_zero": "The validated gain's 95% interval, from the base/stack "
                                             "pairs of launches on fresh servers, lies above zero.",
}
REPORT_CHECKS = {
    "no_measurement_above_roofline": "No measurement the report draws on (baseline, trials, validation, sweep) "
                                     "is above the roofline ceiling of its own launch.",
    "report_matches_store": "The report's baseline and final throughputs, validated gain and interval and each "
                            "trial's outcome equal the result store's.",
}


def check_specs(asset: str, checks: dict[str, str], partitions: dg.PartitionsDefinition) -> list[dg.AssetCheckSpec]:
    # A partitions_def on a check spec is a preview in dagster 1.13 and warns at every load;
    # it is what files each result under its target.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return [dg.AssetCheckSpec(name, asset=asset, description=description, partitions_def=partitions)
                for name, description in checks.items()]


def _cannot_run(name: str, reason: str, **metadata) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(check_name=name, passed=False, severity=WARN, description=f"cannot run: {reason}",
                               metadata={"cannot_run": dg.MetadataValue.text(reason), **metadata})


def baseline_converged(m: Measurement) -> dg.AssetCheckResult:
    name = "baseline_converged"
    throughputs = m.repeats_throughputs()
    if len(throughputs) < 2:
        return _cannot_run(name, f"{len(throughputs)} repeat has no spread to judge; set repeats to 2 or more",
                           repeats=len(throughputs))
    spread = spread_pct(throughputs)
    passed = spread <= CONVERGENCE_SPREAD_PCT
    # WARN: a noisy baseline widens every interval the decisions use (they compare launches and
    # never go below what the repeats imply), so it costs the climb power, not correctness.
    return dg.AssetCheckResult(
        check_name=name, passed=passed, severity=WARN,
        description=f"repeats spread {spread:.2f}% ({'within' if passed else 'over'} the "
                    f"{CONVERGENCE_SPREAD_PCT:g}% limit)",
        metadata={"spread_pct": rounded(spread, "%"), "limit_pct": CONVERGENCE_SPREAD_PCT, "repeats": len(throughputs),
                  "repeat_output_throughputs": dg.MetadataValue.json([rounded(t, "tok/s") for t in throughputs])})


def baseline_client_not_saturated(m: Measurement) -> dg.AssetCheckResult:
    name = "baseline_client_not_saturated"
    lag, cpu = m.client_loop_lag_p99_ms, m.client_cpu_pct
    if lag is None or cpu is None:
        return _cannot_run(name, f"the measurement (source {m.source}) carries no client-load numbers")
    passed = lag <= monitor.LAG_P99_LIMIT_MS and cpu <= monitor.CPU_LIMIT_PCT
    # WARN: a saturated client reports the server slower than it is and its TTFT/ITL longer;
    # the numbers are suspect, the run's logic is not broken (2-core hosts hit it under load).
    return dg.AssetCheckResult(
        check_name=name, passed=passed, severity=WARN,
        description=f"worst repeat: event-loop lag p99 {lag:.1f} ms (limit {monitor.LAG_P99_LIMIT_MS:g}), client CPU "
                    f"{cpu:.1f}% of a core (limit {monitor.CPU_LIMIT_PCT:g})",
        metadata={"loop_lag_p99_ms": rounded(lag, "ms"), "loop_lag_limit_ms": monitor.LAG_P99_LIMIT_MS,
                  "client_cpu_pct": rounded(cpu, "%"), "client_cpu_limit_pct": monitor.CPU_LIMIT_PCT})


def validated_gain_interval_excludes_zero(stack: StackResult) -> dg.AssetCheckResult:
    name = "validated_gain_interval_excludes_zero"
    if not stack.validated:
        return _cannot_run(name, f"no keeper, so nothing was validated (stop reason {stack.stop_reason})",
                           keepers=0)
    gain, low, high = stack.validated_gain_pct, stack.validated_gain_ci_low, stack.validated_gain_ci_high
    passed = low > 0
    # ERROR when the whole interval is below zero: the recommended final configuration is
    # demonstrably slower than what the operator runs today. WARN when it straddles zero: the
    # gain is not shown to be real, which is an outcome to read, not a defect.
    severity = ERROR if high < 0 else WARN
    verdict = "above zero" if passed else ("below zero: the stack is slower" if high < 0 else "includes zero")
    return dg.AssetCheckResult(
        check_name=name, passed=passed, severity=severity,
        description=f"validated gain {gain:+.2f}%, 95% interval [{low:+.2f}%, {high:+.2f}%]: {verdict}",
        metadata={"validated_gain_pct": rounded(gain, "%"), "validated_gain_ci_low": rounded(low, "%"),
                  "validated_gain_ci_high": rounded(high, "%"), "keepers": len(stack.keepers),
                  "base_launches": len(stack.base_launches), "stack_launches": len(stack.stack_launches)})


def _describe(p: Position) -> str:
    label = f"{p.kind} measurement {p.measurement_id}" + (f" ({p.fingerprint})" if p.fingerprint else "")
    return (f"{label} at concurrency {p.concurrency}: {p.output_throughput:,.1f} tok/s, {p.of_ceiling_pct:.2f}% of "
            f"its {p.binding}-bound ceiling of {p.ceiling_tok_s:,.1f} tok/s")


def no_measurement_above_roofline(found: list[Position], unjudged: list[int]) -> dg.AssetCheckResult:
    name = "no_measurement_above_roofline"
    if not found:
        return _cannot_run(name, "no stored measurement of this report says its concurrency" if unjudged
                           else "the result store holds no measurement of this report")
    above = [p for p in found if p.above]
    highest = max(found, key=lambda p: p.of_ceiling_pct)
    metadata = {"measurements_checked": len(found), "above_ceiling": len(above),
                "highest_of_ceiling_pct": rounded(highest.of_ceiling_pct, "%"),
                "highest": dg.MetadataValue.text(_describe(highest)), "measurements": table_value(positions_table(found)),
                "unjudged_measurement_ids": dg.MetadataValue.json(unjudged)}
    if above:
        # ERROR: above the ceiling is physically impossible, so the hardware figures, the model
        # shape or the measurement is wrong, and every "% of roofline" shown with it.
        return dg.AssetCheckResult(check_name=name, passed=False, severity=ERROR, metadata=metadata,
                                   description=f"{len(above)} of {len(found)} above the ceiling; highest: "
                                               f"{_describe(highest)}")
    if unjudged:
        return _cannot_run(name, f"measurements {unjudged} say no concurrency, so their ceiling is unknown",
                           **metadata)
    return dg.AssetCheckResult(check_name=name, passed=True, severity=ERROR, metadata=metadata,
                               description=f"all {len(found)} under their ceilings; highest: {_describe(highest)}")


def roofline_unavailable(reason: str) -> dg.AssetCheckResult:
    return _cannot_run("no_measurement_above_roofline", reason)


def report_matches_store(found: list[Comparison], report_path: Path) -> dg.AssetCheckResult:
    mismatches = [c for c in found if not c.matches]
    # ERROR: a report that disagrees with the measurements it was built from is a defect,
    # whatever the numbers say.
    description = (f"all {len(found)} comparisons agree" if not mismatches else
                   f"{len(mismatches)} of {len(found)} disagree: " + "; ".join(
                       f"{c.what}: report {c.report}, store {c.store}" for c in mismatches[:3]))
    return dg.AssetCheckResult(
        check_name="report_matches_store", passed=not mismatches, severity=ERROR, description=description,
        metadata={"compared": len(found), "mismatches": len(mismatches),
                  "report_path": dg.MetadataValue.path(str(report_path)),
                  "comparisons": table_value(comparisons_table(found))})
