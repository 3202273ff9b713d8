"""The final report: Markdown a colleague can read and JSON a tool can. Pure code."""

from __future__ import annotations

import json
import shlex
from typing import Any

from hyperloom_assets.core.decisions.climb import TrialRecord
from hyperloom_assets.core.decisions.stop_reasons import describe as describe_stop_reason
from hyperloom_assets.core.config.targets import Objective, TargetSlo
from hyperloom_assets.core.measurement.measurement import Measurement
from hyperloom_assets.core.measurement.capacity import CapacityAtSlo
from hyperloom_assets.core.measurement.slo_power import AT_LIMIT
from hyperloom_assets.core.measurement.slo_statistic import label
from hyperloom_assets.core.measurement.slo_verdict import SloVerdict
from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.report.pareto import Frontier
from hyperloom_assets.core.releases.run import ReleaseCheck
from hyperloom_assets.core.results import ProfileResult
from hyperloom_assets.core.profile.trace import CATEGORIES
from hyperloom_assets.core.report.rendering import table, trials_markdown
from hyperloom_assets.core.report.tables import describe_change
from hyperloom_assets.core.roofline.roofline import Achieved
from hyperloom_assets.core.secrets import shell_command


class SourceTree(Strict):
    """A tree target: where the served code lives and how to check it out."""
    operator_tree: str
    branch: str
    base_commit: str
    tree_commit: str  # the stack's: the base commit plus every kept patch
    patches: list[dict[str, Any]] = []  # accepted_patches' records
    unserved: list[str] = []  # the operator's uncommitted files, served at HEAD so not served
    engine_path: str | None = None  # the file the baseline server imported its engine from


class ReportInputs(Strict):
    """Everything the report shows, gathered by the `final_report` asset."""
    target: str
    baseline: Measurement
    baseline_argv: list[str]
    baseline_env: dict[str, str]
    baseline_run_id: str
    launch_evidence: dict[str, Any] | None
    final_output_throughput: float
    validated_gain_pct: float
    validated_gain_ci_low: float
    validated_gain_ci_high: float
    validated: bool
    final_argv: list[str]
    final_env: dict[str, str]
    stop_reason: str
    roofline_before: Achieved
    roofline_after: Achieved
    roofline_explanation: str
    trials: list[TrialRecord]
    keepers: list[str]
    conflicts: list[str]
    sweep_rows: list[dict[str, Any]]
    plots: list[str]  # the sweep's, file names beside the report
    waterfall_plot: str | None = None  # the gains waterfall, a file name beside the report
    roofline_plot: str | None = None  # baseline and final under the ceiling, likewise
    pareto: Frontier | None = None  # every measurement of the run, per GPU against per user
    pareto_plot: str | None = None  # its plot, a file name beside the report
    environment: dict[str, str]
    warnings: list[str]
    release_check: ReleaseCheck | None = None  # on a release run: the earlier stack on it
    source_tree: SourceTree | None = None
    profile: ProfileResult | None = None  # where the baseline's time goes
    slo: str | None = None  # the headline's SLO sentence (slo_text), for a target with an slo
    launches: dict[str, int] = {}  # this run's server launches, by step kind
    objective: Objective = "throughput"  # what the gains compare
    baseline_goodput: float | None = None  # requests/s within the SLO, where counted
    final_goodput: float | None = None


def throughput_headline(baseline_tok_s: float, final_tok_s: float) -> str:
    """The headline's numbers, as the report prints them (report_matches_store looks for them)."""
    return f"**{baseline_tok_s:,.1f} → {final_tok_s:,.1f} output tok/s**"


def validated_gain_text(gain_pct: float, ci_low: float, ci_high: float) -> str:
    return f"validated gain {gain_pct:+.2f}% (95% interval [{ci_low:+.2f}%, {ci_high:+.2f}%]"


def goodput_headline(baseline: float | None, final: float | None) -> str:
    def said(value: float | None) -> str:
        return "not counted" if value is None else f"{value:,.3f}"
    return f"**{said(baseline)} → {said(final)} good req/s**"


def _objective_lines(r: ReportInputs, gain: str) -> list[str]:
    """The headline's numbers: the objective's first, with the validated gain, which is of the objective."""
    tok_s = throughput_headline(r.baseline.output_throughput, r.final_output_throughput)
    if r.objective == "goodput":
        return [f"{goodput_headline(r.baseline_goodput, r.final_goodput)} (the objective, goodput: requests per "
                f"second that met every limit of the SLO), {gain}.", "", f"Output throughput: {tok_s}.", ""]
    return [f"{tok_s}, {gain}.", ""]


def _headline(r: ReportInputs) -> list[str]:
    gain = (validated_gain_text(r.validated_gain_pct, r.validated_gain_ci_low, r.validated_gain_ci_high)
            + ", base and stack in pairs on fresh servers)" if r.validated
            else "no keeper, so nothing to validate: the final configuration is the baseline")
    return [f"# Optimization report: {r.target}", "", *_objective_lines(r, gain),
            f"Stop reason: `{r.stop_reason}` ({describe_stop_reason(r.stop_reason)}).", "",
            *([r.slo, ""] if r.slo else []),
            f"Every gain is relative to the baseline of run `{r.baseline_run_id}`: "
            f"{r.baseline.output_throughput:,.1f} tok/s [{r.baseline.output_throughput_ci_low:,.1f}, "
            f"{r.baseline.output_throughput_ci_high:,.1f}] over {len(r.baseline.repeats)} repeats.", ""] + _launches(r)


def slo_text(slo: TargetSlo, baseline: SloVerdict, final: SloVerdict | None) -> str:
    """The headline's SLO sentence: the limits, and whether the baseline and the final config meet them."""
    limits = ", ".join(f"{name.removesuffix('_ms').upper()} <= {getattr(slo, name):g} ms"
                       for name in ("ttft_ms", "tpot_ms", "e2e_ms") if getattr(slo, name) is not None)

    def said(who: str, verdict: SloVerdict) -> str:
        return f"{who} meets it" if verdict.met else f"{who} does not ({verdict.why})"

    parts = [said("the baseline", baseline)] + ([said("the final config", final)] if final else [])
    return f"SLO ({label(slo.percentile)}, 95% upper bounds, launch by launch: {limits}): {'; '.join(parts)}."


def slo_caveat(baseline: SloVerdict, final: SloVerdict | None) -> str:
    """What the SLO sentence's 95% is about: these launches, their requests taken as independent draws,
    and how many requests a launch had against how many give the verdict its power."""
    counted = [v.requests for v in (baseline, final) if v is not None and v.requests is not None]
    requests = (f", over at least {min(counted)} requests a launch ({baseline.requests_for_power} give a config at "
                f"{AT_LIMIT:.0%} of a limit a {baseline.power:.0%} chance to read as meeting it)"
                if counted and baseline.requests_for_power else "")
    return f"Each verdict holds {baseline.assumption}{requests}."


def capacity_text(capacity: CapacityAtSlo) -> str:
    """The headline's sentence: each side's capacity within the SLO as the search bracketed it (the
    highest load that met, the lowest that broke), "at least" where nothing broke, and the stack's
    gain only where both sides are bracketed."""
    noun = "concurrent streams" if capacity.unit == "concurrency" else "requests/s"
    base, base_note = _capacity_side(capacity, "baseline")
    stack, stack_note = _capacity_side(capacity, "stack")
    return (f"Capacity at the SLO: the baseline serves {base}{' ' + noun if capacity.baseline is not None else ''} "
            f"within it{base_note}, the stack {stack}{stack_note}{_capacity_gain(capacity)}.")


def _capacity_side(capacity: CapacityAtSlo, side: str) -> tuple[str, str]:
    """(the side's capacity, its note: where it broke, or why it is a lower bound)."""
    load, broke = getattr(capacity, side), getattr(capacity, f"{side}_broke_at")
    if load is None:
        return "not measured", ""
    if broke is None:
        why = "the highest load the search may probe" if side in capacity.at_ceiling else "no load probed broke it"
        return f"at least {load:g}", f" ({why})"
    failed = next((p for p in getattr(capacity, f"{side}_probes") if p.failed and p.load == broke), None)
    how = f": {failed.why}" if failed else ""
    if load == 0:
        return f"under {broke:g}", f" ({broke:g} broke it, the lowest load probed{how})"
    return f"{load:g}", f" ({broke:g} broke it{how})"


def _capacity_gain(capacity: CapacityAtSlo) -> str:
    """The gain where both sides are bracketed, "at least" where only the stack's is a lower bound
    above the load that broke the baseline, else none."""
    gain = capacity.gain_pct()
    if gain is not None:
        return f", {gain:+.0f}%"
    at_least = capacity.gain_at_least_pct()
    if at_least is not None:
        return f", at least {at_least:+.0f}%"
    bounds = [side for side in ("baseline", "stack")
              if getattr(capacity, side) is not None and not capacity.bracketed(side)]
    if capacity.baseline is not None and capacity.stack is not None and bounds:
        what = "both are only lower bounds" if len(bounds) == 2 else f"the {bounds[0]}'s is only a lower bound"
        return f"; no gain figure, as {what}"
    return ""


def launches_text(launches: dict[str, int]) -> str:
    total = sum(launches.values())
    by_step = ", ".join(f"{kind} {count}" for kind, count in launches.items())
    return f"Server launches in this run: {total}" + (f" ({by_step})" if by_step else "")


def _launches(r: ReportInputs) -> list[str]:
    return [launches_text(r.launches) + ".", ""]


def _roofline(r: ReportInputs) -> list[str]:
    rows = [(label, f"{d.achieved_tok_s:,.1f}", f"{d.ceiling_tok_s:,.1f}", f"{d.achieved_pct:.2f}%",
             f"[{d.achieved_pct_ci_low:.2f}%, {d.achieved_pct_ci_high:.2f}%]", d.binding)
            for label, d in (("baseline", r.roofline_before), ("final", r.roofline_after))]
    return ["## Roofline", "", r.roofline_explanation, "",
            table(["config", "tok/s", "ceiling tok/s", "of ceiling", "95% interval", "bound"], rows), ""] + _image(r.roofline_plot)


def _stack(r: ReportInputs) -> list[str]:
    lines = ["## Stack", ""]
    lines += [f"{i + 1}. {k}" for i, k in enumerate(r.keepers)] or ["(no keepers)"]
    evicted = [t for t in r.trials if t.outcome == "KEEP_UNSTABLE"]
    if evicted:
        lines += ["", "Evicted (KEEP_UNSTABLE): " + ", ".join(f"{t.name} ({describe_change(t.variant)})" for t in evicted)]
    if r.conflicts:
        lines += ["", "Flag conflicts (the later keeper wins):"] + [f"- {c}" for c in r.conflicts]
    return lines + [""] + _image(r.waterfall_plot)


def _image(name: str | None) -> list[str]:
    return [f"![{name}]({name})", ""] if name else []


def _release(r: ReportInputs) -> list[str]:
    if r.release_check is None:
        return []
    check = r.release_check
    verdict = "holds" if check.holds else "REGRESSION"
    return ["## Release", "", f"Release run for `{check.release}`: the stack validated before {verdict}. "
            f"{check.summary}.", ""]


BURST_MARK = " †"


def _sweep(r: ReportInputs) -> list[str]:
    headers = ["config", "concurrency", "output tok/s", "TPOT p50 ms", "interactivity tok/s/user", "TTFT p50 ms"]
    rows, burst = [], False
    for row in r.sweep_rows:
        mark = BURST_MARK if row.get("latency_warning") else ""
        burst = burst or bool(mark)
        rows.append((row["config"], row["concurrency"], f"{row['output_throughput']:,.1f}",
                     f"{row['tpot_p50_ms']:.2f}{mark}", f"{row['interactivity']:.1f}{mark}", f"{row['ttft_p50_ms']:.1f}"))
    note = [f"{BURST_MARK.strip()} most streams of this point arrived as one burst: its TPOT and interactivity are "
            "not per-token (see Warnings).", ""] if burst else []
    return ["## Concurrency sweep", "", table(headers, rows), ""] + note + [f"![{p}]({p})" for p in r.plots] + [""]


def _pareto(r: ReportInputs) -> list[str]:
    found = r.pareto
    if found is None:
        return []
    # Under an SLO the frontier to act on is the one of the points within it.
    line = found.slo_frontier if found.has_slo else found.frontier
    rows = [(p.config, p.kind, p.concurrency, f"{p.tok_s_per_gpu:,.1f}", f"{p.tok_s_per_user:,.1f}",
             "" if p.meets_slo is None else ("yes" if p.meets_slo else "no")) for p in line]
    unread = sum(1 for p in found.points if p.tok_s_per_user is None)
    within = f", {len(line)} on the frontier of those within the SLO (the table)" if found.has_slo else ""
    lines = ["## Pareto frontier", "",
             f"Every measurement of this run ({len(found.points)}), as output tok/s per GPU ({found.devices} serving "
             f"the model) against tok/s per user (1000 / TPOT p50), each named by the config it measured; "
             f"{len(found.frontier)} on the frontier{within}"
             + (f", {unread} without a per-token TPOT left off it" if unread else "") + ".", ""]
    if line:
        lines += [table(["config", "measured in", "concurrency", "tok/s per GPU", "tok/s per user", "within SLO"],
                        rows), ""]
    lines += [_recommendation(found)] if found.has_slo else []
    return lines + [""] + _image(r.pareto_plot)


def _recommendation(found: Frontier) -> str:
    pick = found.recommended
    if pick is None:
        return "Recommended for the SLO: none: no point with a per-token TPOT meets it."
    return (f"Recommended for the SLO: **{pick.config}** at concurrency {pick.concurrency}: {pick.tok_s_per_gpu:,.1f} "
            f"tok/s per GPU at {pick.tok_s_per_user:,.1f} tok/s per user, the most throughput per GPU of the "
            f"points within the SLO (measured in a {pick.kind} round).")


REPORT_TOP_OPS = 10


def _profile(r: ReportInputs) -> list[str]:
    p = r.profile
    if p is None:
        return []
    if not p.taken:
        return ["## Where the time goes", "", f"No profile was taken: {p.reason}", ""]
    s = p.summary
    unit = p.source.time_unit
    source = p.source.report.format(engine=p.engine)
    shares = [(c, f"{s.shares_pct[c]:.2f}%", f"{s.category_ms[c]:,.1f}") for c in CATEGORIES if s.category_ms[c] > 0]
    ops = [(i + 1, f"`{o.name}`", o.category, o.calls, f"{o.self_ms:,.2f}", f"{o.share_pct:.2f}%")
           for i, o in enumerate(s.top_ops[:REPORT_TOP_OPS])]
    return ["## Where the time goes", "",
            f"The baseline's configuration, one short round profiled by {source} ({s.time_base} time, a window of "
            f"{s.window_ms:,.1f} {unit}; trace: `{p.trace_path}`).", "",
            table(["category", "share of window", f"self {unit}"], shares), "",
            table(["#", "op", "category", "calls", f"self {unit}", "share"], ops), ""]


def _commands(r: ReportInputs) -> list[str]:
    """The servers' commands as a person pastes them: a redacted secret (core/secrets.py) is read
    from a variable of their shell (`HF_TOKEN="$HF_TOKEN"`, `--hf-token "$HF_TOKEN"`), never written."""
    baseline, read = shell_command(r.baseline_env, r.baseline_argv)
    final, read_too = shell_command(r.final_env, r.final_argv)
    variables = list(dict.fromkeys(read + read_too))
    secrets = ([f"Secrets are not written here: set {', '.join(f'`{v}`' for v in variables)} in your shell first.", ""]
               if variables else [])
    checkout = []
    if r.source_tree is not None:
        tree = r.source_tree
        checkout = ["Final source tree (the run's branch; serve it with its import root first on PYTHONPATH):", "",
                    "```", f"git -C {shlex.quote(tree.operator_tree)} checkout {tree.tree_commit}  # {tree.branch}",
                    "```", ""]
    return ["## Reproduce", "", *secrets, "Baseline server:", "", "```", baseline, "```", "", *checkout, "Final server:", "",
            "```", final, "```", ""]


def _source_tree(r: ReportInputs) -> list[str]:
    if r.source_tree is None:
        return []
    tree = r.source_tree
    lines = ["## Source tree", "", f"Served from `{tree.operator_tree}` at `{tree.base_commit}` (the operator's HEAD); "
             f"the stack's tree is `{tree.tree_commit}` on branch `{tree.branch}`.", ""]
    if tree.engine_path:
        lines += [f"The baseline server imported its engine from `{tree.engine_path}`.", ""]
    if tree.patches:
        rows = [(p["name"], p["source"], p["commit"][:12], ", ".join(p["files"]),
                 "-" if p["gain_pct"] is None else f"{p['gain_pct']:+.2f}%") for p in tree.patches]
        lines += [table(["accepted patch", "source", "commit", "files", "gain"], rows), ""]
    else:
        lines += ["No source patch was kept.", ""]
    if tree.unserved:
        lines += ["Uncommitted changes in the checkout were not served (the run serves HEAD): "
                  + ", ".join(f"`{name}`" for name in tree.unserved), ""]
    return lines


def render_markdown(r: ReportInputs) -> str:
    lines = _headline(r) + _roofline(r) + _profile(r)
    lines += ["## Trials", "", trials_markdown(r.trials) if r.trials else "(no trials)", ""]
    lines += _stack(r) + _source_tree(r) + _release(r) + _sweep(r) + _pareto(r) + _commands(r)
    lines += ["## Launch evidence", "", "```json", json.dumps(r.launch_evidence, indent=2, sort_keys=True), "```", ""]
    lines += ["## Environment", "", table(["what", "value"], sorted(r.environment.items())), ""]
    lines += ["## Warnings", ""] + ([f"- {w}" for w in r.warnings] or ["(none)"]) + [""]
    return "\n".join(lines)


def measurement_warnings(label: str, m: Measurement, latency: bool = True) -> list[str]:
    warnings = []
    if not m.converged:
        warnings.append(f"{label}: repeats spread more than 3% (unstable measurement)")
    if m.client_saturated:
        warnings.append(f"{label}: the benchmark client was saturated; the server may be faster than measured")
    if latency and m.latency is not None:
        warnings += [f"{label}: {text}" for text in m.latency.warnings()]
    return warnings


def run_measurement_warnings(rows: list[dict], run_id: str) -> list[str]:
    """Unstable or client-saturated measurements of this run, whichever step made them, and in one
    line the ones whose latency cannot be read per token (that is the stream's, so it repeats)."""
    warnings, bursts = [], []
    for row in rows:
        if row["run_id"] == run_id and row["measurement"] and row["kind"] != "baseline":
            label = f"{row['kind']} measurement {row['id']}" + (f" ({row['fingerprint']})" if row["fingerprint"] else "")
            measurement = Measurement.model_validate(row["measurement"])
            warnings += measurement_warnings(label, measurement, latency=False)
            if measurement.latency is not None and measurement.latency.warnings():
                bursts.append(f"{row['kind']} {row['id']}")
    if bursts:
        shown = ", ".join(bursts[:6]) + (f" and {len(bursts) - 6} more" if len(bursts) > 6 else "")
        warnings.append(f"{len(bursts)} later measurement(s) of this run ({shown}): most streams arrived as one "
                        "burst, so their TPOT, ITL and interactivity are not per-token")
    return warnings
