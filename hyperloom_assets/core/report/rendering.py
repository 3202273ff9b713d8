"""Markdown tables for the report. Pure code."""

from __future__ import annotations

from collections.abc import Sequence

from hyperloom_assets.core.decisions.climb import TrialRecord
from hyperloom_assets.core.report.tables import trials_table


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def cell(value: object) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.2f}%"


def trials_markdown(trials: list[TrialRecord]) -> str:
    """The typed trials table (tables.trials_table), formatted for a reader."""
    rows = []
    with_slo = any(t.slo for t in trials)
    on_slots = any(t.ran_on for t in trials)  # a pool or a host that declares its gpus: say where each ran
    on_goodput = any(t.objective == "goodput" for t in trials)  # then the gains are of goodput
    for row in trials_table(trials).rows:
        interval = "" if row["ci_low_pct"] is None else f"[{row['ci_low_pct']:+.2f}%, {row['ci_high_pct']:+.2f}%]"
        mean = "" if row["output_throughput"] is None else f"{row['output_throughput']:,.1f}"
        launches = f"{row['launches']} + {row['best_relaunches']} best" if row["best_relaunches"] else str(row["launches"])
        rows.append((row["index"], row["fingerprint"], row["name"], row["change"], row["against"], row["outcome"],
                     _pct(row["gain_pct"]), interval, mean,
                     *([f"{row['goodput']:,.3f}" if row["goodput"] is not None else ""] if on_goodput else []),
                     launches, "replayed" if row["replayed"] else "",
                     row["reason"], row["critic"] or "", *([row["slo"]] if with_slo else []),
                     *([row["ran_on"]] if on_slots else []), telemetry_text(row)))
    return table(["#", "fingerprint", "name", "change", "against", "outcome",
                  "goodput gain" if on_goodput else "gain", "interval (level in the reason)",
                  "tok/s", *(["good req/s"] if on_goodput else []), "launches", "", "reason", "critic",
                  *(["SLO"] if with_slo else []), *(["ran on"] if on_slots else []), "engine telemetry"], rows)


def telemetry_text(row: dict) -> str:
    """The telemetry cells of a trials-table row, in a few words; empty without telemetry."""
    parts = []
    if row["kv_usage_max_pct"] is not None:
        parts.append(f"KV max {row['kv_usage_max_pct']:.1f}%")
    if row["preemptions"] is not None:
        parts.append(f"{row['preemptions']} preempted")
    if row["running_mean"] is not None and row["waiting_mean"] is not None:
        parts.append(f"running {row['running_mean']:.1f}, waiting {row['waiting_mean']:.1f}")
    if row["prefix_hit_pct"] is not None:
        parts.append(f"prefix hit {row['prefix_hit_pct']:.1f}%")
    if row["prefill_share_pct"] is not None:
        parts.append(f"prefill {row['prefill_share_pct']:.1f}% of time")
    return "; ".join(parts)
