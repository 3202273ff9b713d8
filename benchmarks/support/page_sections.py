"""Each result's headline table, read from its JSON; docs/benchmarks.md is made of these.

A headline shows figures the JSON holds, never a judgement of its own: whether a target
was met is rendered from the JSON's own verdict fields (`verdicts`), word for word.
"""

from __future__ import annotations

import statistics

from collections.abc import Callable
from typing import Any

Table = tuple[list[str], list[list[Any]]]

# Fields in which a benchmark states its own verdict or target; rendered as they stand.
VERDICT_KEYS = ("verdict", "target_met", "targets_met", "within_budget", "corrupting_detected", "memory_pays")
TARGET_KEYS = ("share_target", "launch_ratio_target", "budget_s", "budget_min", "targets_pct", "min_agreement",
               "ratio_target", "makespan_over_ideal_target", "parallel_goal")


def cell(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
    if isinstance(value, (list, dict)):
        return "`" + str(value).replace("|", "/") + "`"
    return str(value).replace("|", "/").replace("\n", " ")


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def pick(rows: list[dict], keys: list[str]) -> Table:
    return keys, [[row.get(k, "") for k in keys] for row in rows]


def accuracy_gate(r: dict) -> Table:
    return pick(r["summary"], ["kind", "name", "pairs", "dropped", "agreed_min", "agreed_max", "identical_min"])


def client_capacity(r: dict) -> Table:
    return ["client", "mean tokens/s"], [*([k, v] for k, v in r["mean_tokens_per_s"].items()),
                                         ["ratio (ours / vLLM's)", r["ratio"]]]


def decision_launch_noise(r: dict) -> Table:
    return pick(r["rows"], ["history", "launch_sd_pct", "repeat_sd_pct", "true_gain_pct", "keep_pct", "mean_launches"])


def demo_time(r: dict) -> Table:
    return ["job s", "budget s", "launches", "by step", "headline", "stop reason"], [
        [r["job_s"], r["budget_s"], r["launch_count"], r["launches"], r["headline"], r["stop_reason"]]]


def effectiveness_sim(r: dict) -> Table:
    return pick(r["scenarios"], ["scenario", "baseline_tok_s", "final_tok_s", "grid_best_tok_s", "share_of_gain",
                                 "launches", "grid_size", "launch_ratio", "passed"])


def faults(r: dict) -> Table:
    return pick(r["rows"], ["fault", "engine", "outcome", "leaked", "measured_twice", "lost", "recover_s", "commit"])


def fleet(r: dict) -> Table:
    keys = ["targets", "hosts", "succeeded", "makespan_s", "ideal_s", "makespan_over_ideal", "overlaps_per_host",
            "stale_leases"]
    return keys, [[r.get(k) for k in keys]]


def parallel_search(r: dict) -> Table:
    header = ["scenario", "baseline h (before the clock)", "slots", "median h of search to 95%", "ratio to 1 slot",
              "share @10", "@20", "@40", "target_met"]
    rows = [[row["scenario"], row.get("baseline_hours"), slots, cell["median_hours_to_95"], cell["time_ratio_to_1"],
             *cell["median_share_at"].values(), row["target_met"]]
            for row in r["rows"] for slots, cell in row["slots"].items()]
    if graph := r.get("graph"):  # the real graph: wall seconds of the trials step, not virtual hours
        for run in (graph["serial"], graph["parallel"]):
            rows.append([graph["scenario"], "", run["slots"],
                         f"trials step {run['trials_s']} s, {run['trials']} trials",
                         graph["trials_time_ratio"] if run is graph["parallel"] else 1.0,
                         f"validated {run['validated_gain_pct']}% {run['validated_gain_ci']}", "", "",
                         graph["target_met"]])
    return header, rows


def noise_pinning(r: dict) -> Table:
    ratios = r["pinned_over_shared"]
    return ["CPUs", "launches", "mean tok/s", "launch CV %", "repeat spread %", "client saturated",
            "pinned / shared per pair (median)"], [
        [arm, row["launches"], row["mean"], row["launch_cv_pct"], row["repeat_spread_pct"], row["saturated"],
         statistics.median(ratios) if arm == "pinned" else ""] for arm, row in r["summary"].items()]


def noise(r: dict) -> Table:
    return ["engine", "pairs", "outcomes", "false_keep_rate"], [
        [r["config"]["engine"], len(r["pairs"]), r["outcomes"], r["false_keep_rate"]]]


def overhead(r: list) -> Table:
    return pick(r, ["target", "success", "wall_s", "server_s", "launches", "overhead_s", "overhead_pct", "target_pct"])


def profiler_configured(r: dict) -> Table:
    return ["engine", "pairs", "gain %", "95% interval %"], [
        [r["engine"], r["config"]["pairs"], r["gain_pct"], [round(r["ci_low_pct"], 2), round(r["ci_high_pct"], 2)]]]


def proposer_sim(r: dict) -> Table:
    return pick(r["rows"], ["proposer", "budget", "true_gain_pct", "measured_gain_pct", "launches", "llm_calls",
                            "rounds_fell_back", "stop_reason"])


def search_quality(r: dict) -> Table:
    if "interval" not in (r["scenarios"] or [{}])[0]:
        return _search_quality_medians(r)
    searchers = ["planner+history", "planner", "tpe", "tpe-tuned", "tpe-constrained", "random"]
    shown = [n for n in searchers if any(n in s["interval"] for s in r["scenarios"])]
    rows = [[s["scenario"], budget, *(_interval(s["interval"].get(name, {}).get(str(budget))) for name in shown),
             _differences(s, str(budget)), _behind(s, budget)]
            for s in r["scenarios"] for budget in r["budgets"]]
    header = ["scenario", "launches", *(f"{n} median share [95%]" for n in shown),
              "planner+history minus tuned TPE [95%, paired]", "planner+history behind_tuned_tpe"]
    return header, rows


def search_quality_calibrated(r: dict) -> Table:
    """Per scenario: its profile, how calibration reranks its space, and the medians at each budget."""
    rows = []
    for s in r["scenarios"]:
        ranking = s["ranking_vs_uncalibrated"]
        medians = s["median_share"]
        tpe = "tpe-constrained" if "tpe-constrained" in medians else "tpe-tuned"  # under an SLO, the one told it
        shares = "; ".join(f"{b}: {medians['planner+history'][str(b)]:.3f} / {medians[tpe][str(b)]:.3f}"
                           for b in r["budgets"])
        rows.append([s["scenario"], s["calibration_profile"], ranking["spearman_rho"], ranking["best_changed"],
                     ranking["uncalibrated_best_share_calibrated"], shares])
    return ["scenario", "profile", "rank correlation with uncalibrated", "best changed",
            "uncalibrated best's share, calibrated",
            "planner+history / tuned TPE (constrained under an SLO) median share by launches"], rows


def _search_quality_medians(r: dict) -> Table:
    """A result from before the intervals: medians only."""
    searchers = ["planner+history", "planner", "tpe", "random"]
    rows = [[s["scenario"], budget, *(s["median_share"].get(name, {}).get(str(budget), "") for name in searchers),
             s["ahead_of_tpe"].get(searchers[0], {}).get(str(budget), "")]
            for s in r["scenarios"] for budget in r["budgets"]]
    return ["scenario", "launches", *(f"{n} median share" for n in searchers), f"{searchers[0]} ahead_of_tpe"], rows


def _interval(i: dict | None) -> str:
    return "" if i is None else f"{i['median']:.3f} [{i['low']:.3f}, {i['high']:.3f}]"


def _differences(s: dict, budget: str) -> str:
    by_ref = s["vs_tuned_tpe"].get("planner+history", {})
    return "; ".join(f"{'' if ref == 'tpe-tuned' else ref + ': '}{d[budget]['diff']:+.3f} "
                     f"[{d[budget]['low']:+.3f}, {d[budget]['high']:+.3f}]" for ref, d in by_ref.items())


def _behind(s: dict, budget: int) -> str:
    found = [b for b in s["behind_tuned_tpe"] if b["searcher"] == "planner+history" and b["budget"] == budget]
    return ", ".join(f"{b['against']}{' (interval below 0)' if b['clearly'] else ''}" for b in found) or "no"


def recipe_memory(r: dict) -> Table:
    keys = ["second", "cold_median", "warm_median", "cold_reached", "warm_reached", "warm_fewer_in", "warm_more_in",
            "cold_first_trial_in", "seeds"]
    return pick(r["rows"], keys)


def sim_fidelity(r: dict) -> Table:
    keys = ["case", "gpu", "tp", "batch", "input_len", "output_len", "measured_s", "predicted_s", "ratio",
            "calibrated_ratio", "loo_ratio"]
    _, rows = pick(r["rows"], keys)
    calibrated, loo = r.get("calibrated") or {}, r.get("leave_one_out") or {}
    return keys, [*rows, [f"median of {r['cases']}", *[""] * (len(keys) - 4), r["median_ratio"],
                          calibrated.get("median_ratio", ""), loo.get("median_ratio", "")]]


def sim_speed(r: dict) -> Table:
    return pick(r["rows"], ["case", "simulated_s", "cpu_s", "sim_s_per_cpu_s"])


def suite_time(r: dict) -> Table:
    return ["wall min", "tests min", "budget min", "outcomes", "exit code"], [
        [r["wall_min"], r["tests_min"], r["budget_min"], r["outcomes"], r.get("exit_code")]]


HEADLINES: dict[str, Callable[[Any], Table]] = {
    "accuracy_gate": accuracy_gate, "client_capacity": client_capacity, "decision_launch_noise": decision_launch_noise,
    "demo_time": demo_time, "effectiveness_sim": effectiveness_sim, "faults": faults, "fleet": fleet, "noise": noise,
    "noise_pinning": noise_pinning,
    "overhead": overhead, "profiler_configured": profiler_configured, "proposer_sim": proposer_sim,
    "recipe_memory": recipe_memory, "search_quality": search_quality,
    "search_quality_calibrated": search_quality_calibrated, "sim_fidelity": sim_fidelity,
    "sim_speed": sim_speed, "suite_time": suite_time, "parallel_search": parallel_search,
}


def headline(name: str, results: Any) -> Table:
    """The headline of benchmark NAME (its family the longest known prefix); top-level figures otherwise."""
    family = max((f for f in HEADLINES if name == f or name.startswith(f + "_")), key=len, default=None)
    if family:
        return HEADLINES[family](results)
    scalars = {k: v for k, v in results.items() if not isinstance(v, (dict, list))} if isinstance(results, dict) else {}
    return ["field", "value"], [[k, v] for k, v in scalars.items()]


def verdicts(results: Any) -> list[str]:
    """The JSON's own verdict fields, as `key: value`; a row's `passed` by the row's name."""
    if not isinstance(results, dict):
        return []
    found = [f"`{k}: {cell(results[k])}`" for k in VERDICT_KEYS if k in results]
    for key in ("scenarios", "rows"):
        rows = results.get(key)
        if isinstance(rows, list) and rows and isinstance(rows[0], dict) and "passed" in rows[0]:
            found += [f"`{row.get('scenario', i)}: passed: {cell(row['passed'])}`" for i, row in enumerate(rows)]
    return found


def targets(results: Any) -> list[str]:
    rows = results if isinstance(results, list) else [results]
    found = {k: row[k] for row in rows if isinstance(row, dict) for k in TARGET_KEYS if k in row}
    return [f"`{k}: {cell(v)}`" for k, v in found.items()]
