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
    for row in trials_table(trials).rows:
        interval = "" if row["ci_low_pct"] is None else f"[{row['ci_low_pct']:+.2f}%, {row['ci_high_pct']:+.2f}%]"
        mean = "" if row["output_throughput"] is None else f"{row['output_throughput']:,.1f}"
        launches = f"{row['launches']} + {row['best_relaunches']} best" if row["best_relaunches"] else str(row["launches"])
        rows.append((row["index"], row["fingerprint"], row["name"], row["change"], row["against"], row["outcome"],
                     _pct(row["gain_pct"]), interval, mean, launches, "replayed" if row["replayed"] else "",
                     row["reason"]))
    return table(["#", "fingerprint", "name", "change", "against", "outcome", "gain", "interval (level in the reason)",
                  "tok/s", "launches", "", "reason"], rows)
