"""The report's plots as PNG: the sweep (throughput against concurrency and against
interactivity), the gains waterfall, the roofline position and the Pareto frontier. Pure code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on a server; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402

from hyperloom_assets.core.config.targets import Objective  # noqa: E402
from hyperloom_assets.core.decisions.climb import TrialRecord  # noqa: E402
from hyperloom_assets.core.measurement.measurement import Measurement  # noqa: E402
from hyperloom_assets.core.measurement.objective import mean_goodput  # noqa: E402
from hyperloom_assets.core.models import Frozen  # noqa: E402
from hyperloom_assets.core.report.pareto import Frontier  # noqa: E402
from hyperloom_assets.core.roofline.roofline import Achieved, Roofline  # noqa: E402


def _series(rows: list[dict[str, Any]], config: str, x: str) -> tuple[list[float], list[float]]:
    points = sorted((row[x], row["output_throughput"]) for row in rows if row["config"] == config)
    return [p[0] for p in points], [p[1] for p in points]


def _plot(rows: list[dict[str, Any]], x: str, xlabel: str, title: str, path: Path, log_x: bool) -> Path:
    figure, axes = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    for config, marker in (("baseline", "o"), ("stack", "s")):
        xs, ys = _series(rows, config, x)
        if xs:
            axes.plot(xs, ys, marker=marker, label=config)
    if log_x:
        axes.set_xscale("log", base=2)
    axes.set_xlabel(xlabel)
    axes.set_ylabel("output tokens/s")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend()
    return _save(figure, path)


def _save(figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def plot_sweep(rows: list[dict[str, Any]], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [
        _plot(rows, "concurrency", "concurrency", "Throughput vs concurrency", folder / "throughput_vs_concurrency.png", True),
        _plot(rows, "interactivity", "interactivity (tokens/s per user)", "Throughput vs interactivity",
              folder / "throughput_vs_interactivity.png", False),
    ]


class Step(Frozen):
    """One bar of the waterfall: a gain in % with its interval, where one exists."""

    label: str
    gain_pct: float
    ci_low_pct: float | None = None
    ci_high_pct: float | None = None


def keeper_steps(trials: list[TrialRecord]) -> list[Step]:
    """Each keeper's gain over the running best it joined, in the order they joined."""
    return [Step(label=t.name, gain_pct=t.decision.gain_pct, ci_low_pct=t.decision.ci_low_pct,
                 ci_high_pct=t.decision.ci_high_pct) for t in trials if t.outcome == "KEEP" and t.decision.gain_pct is not None]


def _error(level: float, step: Step) -> list[list[float]] | None:
    if step.ci_low_pct is None or step.ci_high_pct is None:
        return None
    top = level * (1 + step.gain_pct / 100)
    return [[top - level * (1 + step.ci_low_pct / 100)], [level * (1 + step.ci_high_pct / 100) - top]]


def _label(axes, x: float, level: float, step: Step, text: str) -> None:
    """Above the bar's interval, so the number never sits on its error bar."""
    top = level * (1 + step.gain_pct / 100)
    error = _error(level, step)
    axes.annotate(text, (x, max(top, level) + (error[1][0] if error else 0)), textcoords="offset points",
                  xytext=(0, 3), ha="center", va="bottom", fontsize=8)


def plot_gains_waterfall(baseline: Measurement, keepers: list[Step], validated: Step | None, path: Path,
                         objective: Objective = "throughput") -> Path:
    """Baseline, each keeper's step on the running best, then the validated stack against the baseline,
    in the objective's unit (the gains are of the objective)."""
    figure, axes = plt.subplots(figsize=(7.2, 4.4), dpi=100)
    if objective == "throughput":
        base = baseline.output_throughput
        axes.bar(0, base, color="#7f7f7f", yerr=[[base - baseline.output_throughput_ci_low],
                                                 [baseline.output_throughput_ci_high - base]], capsize=4)
    else:
        base = mean_goodput(baseline) or 0.0
        axes.bar(0, base, color="#7f7f7f")
    labels, level = ["baseline"], base
    for x, step in enumerate(keepers, start=1):
        top = level * (1 + step.gain_pct / 100)
        axes.bar(x, top - level, bottom=level, color="#2ca02c" if top >= level else "#d62728",
                 yerr=_error(level, step), capsize=4)
        _label(axes, x, level, step, f"{step.gain_pct:+.2f}%")
        axes.plot([x - 0.6, x - 0.4], [level, level], color="#999999", linewidth=0.8, linestyle=":")
        labels.append(step.label)
        level = top
    if validated is not None:
        x, top = len(labels), base * (1 + validated.gain_pct / 100)
        axes.bar(x, top, color="#1f77b4", yerr=_error(base, validated), capsize=4)  # baseline x (1 + gain)
        interval = (f" [{validated.ci_low_pct:+.2f}%, {validated.ci_high_pct:+.2f}%]"
                    if validated.ci_low_pct is not None else "")
        _label(axes, x, base, validated, f"{validated.gain_pct:+.2f}%{interval}")
        labels.append("validated stack")
    axes.set_ylim(0, axes.get_ylim()[1] * 1.1)  # headroom for the labels above the intervals
    axes.set_xticks(range(len(labels)), labels, rotation=20, ha="right", fontsize=8)
    axes.set_ylabel("output tokens/s" if objective == "throughput" else "requests/s within the SLO (goodput)")
    axes.set_title("Gains: each keeper on the running best; the stack validated against the baseline"
                   if validated else "Gains: no keeper, the final configuration is the baseline", fontsize=10)
    axes.grid(True, axis="y", alpha=0.3)
    return _save(figure, path)


def plot_roofline_position(roofline: Roofline, before: Achieved, after: Achieved, path: Path) -> Path:
    """Baseline and final throughput (with intervals) under the memory- and compute-bound rates."""
    figure, axes = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    for bound, rate, color in (("memory", roofline.memory_bound_tok_s, "#ff7f0e"),
                               ("compute", roofline.compute_bound_tok_s, "#9467bd")):
        style = "-" if roofline.binding == bound else "--"
        axes.axhline(rate, color=color, linestyle=style, label=f"{bound}-bound {rate:,.0f} tok/s"
                     + (" (the ceiling)" if roofline.binding == bound else ""))
    for x, (label, reached) in enumerate((("baseline", before), ("final", after))):
        low = reached.achieved_pct_ci_low * reached.ceiling_tok_s / 100
        high = reached.achieved_pct_ci_high * reached.ceiling_tok_s / 100
        value = reached.achieved_tok_s
        axes.errorbar(x, value, yerr=[[max(value - low, 0)], [max(high - value, 0)]], fmt="o", capsize=5,
                      color="#1f77b4" if label == "final" else "#7f7f7f")
        axes.annotate(f"{value:,.1f} tok/s\n{reached.achieved_pct:.2f}% of ceiling", (x, value),
                      textcoords="offset points", xytext=(12, -4), fontsize=8)
    axes.set_yscale("log")
    axes.set_xlim(-0.5, 1.9)
    axes.set_xticks([0, 1], ["baseline", "final"])
    axes.set_ylabel("output tokens/s (log)")
    axes.set_title(f"Roofline position on {roofline.hardware}", fontsize=10)
    axes.grid(True, axis="y", which="both", alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    return _save(figure, path)


def plot_pareto(found: Frontier, path: Path) -> Path:
    """Throughput per GPU against per user: every readable point, coloured by the config it
    measured. Under an SLO: the frontier within it as the line, the frontier of every point
    (shaped by points outside it too) dashed for context, the TPOT floor as a vertical line,
    points outside it hollow and the recommendation starred; without one, the one frontier."""
    figure, axes = plt.subplots(figsize=(6.4, 4.6), dpi=100)
    colors = {"baseline": "tab:blue", "stack": "tab:orange"}
    for config in sorted({p.config for p in found.points}):
        points = [p for p in found.points if p.config == config and p.tok_s_per_user is not None]
        if not points:
            continue
        color = colors.get(config, "tab:gray")
        label = config if config in colors else None
        within = [p for p in points if p.meets_slo is not False]
        outside = [p for p in points if p.meets_slo is False]
        if within:
            axes.scatter([p.tok_s_per_user for p in within], [p.tok_s_per_gpu for p in within], color=color,
                         label=label, s=28)
        if outside:
            axes.scatter([p.tok_s_per_user for p in outside], [p.tok_s_per_gpu for p in outside], facecolors="none",
                         edgecolors=color, label=None if within else label, s=28)
    _frontier_lines(axes, found)
    if found.slo_user_floor is not None:
        axes.axvline(found.slo_user_floor, color="tab:red", linestyle="--", linewidth=1, label="SLO: TPOT limit")
    if found.recommended is not None:
        pick = found.recommended
        axes.scatter([pick.tok_s_per_user], [pick.tok_s_per_gpu], marker="*", s=180, color="gold", edgecolors="black",
                     label="recommended", zorder=5)
    axes.set_xlabel("tokens/s per user (1000 / TPOT p50)")
    axes.set_ylabel(f"output tokens/s per GPU ({found.devices} serving the model)")
    axes.set_title(pareto_title(found))
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    return _save(figure, path)


def pareto_title(found: Frontier) -> str:
    """The plot's title: the SLO is spoken of only where the target sets one."""
    return "Every measurement of the run (hollow: outside the SLO)" if found.has_slo else "Every measurement of the run"


def _frontier_lines(axes, found: Frontier) -> None:
    everything = found.frontier
    if found.has_slo:
        within = found.slo_frontier
        if within:
            axes.plot([p.tok_s_per_user for p in within], [p.tok_s_per_gpu for p in within], color="black",
                      linewidth=1, label="Pareto frontier within the SLO")
        if everything and everything != within:
            axes.plot([p.tok_s_per_user for p in everything], [p.tok_s_per_gpu for p in everything], color="gray",
                      linewidth=1, linestyle=":", label="Pareto frontier of every point")
    elif everything:
        axes.plot([p.tok_s_per_user for p in everything], [p.tok_s_per_gpu for p in everything], color="black",
                  linewidth=1, label="Pareto frontier")
