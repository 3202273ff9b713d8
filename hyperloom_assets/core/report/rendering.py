"""Markdown tables for the UI and the report. Pure code."""

from __future__ import annotations

from collections.abc import Sequence

from hyperloom_assets.core.decisions.climb import TrialRecord
from hyperloom_assets.core.planning.fingerprints import variant_fingerprint
from hyperloom_assets.core.planning.variants import Variant


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def cell(value: object) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def describe_change(variant: Variant) -> str:
    parts = []
    if variant.add_args:
        parts.append("add `" + " ".join(variant.add_args) + "`")
    if variant.remove_args:
        parts.append("remove `" + " ".join(variant.remove_args) + "`")
    parts += [f"env {k}={v}" for k, v in variant.set_env.items()]
    parts += [f"unset {k}" for k in variant.unset_env]
    return "; ".join(parts) or "(no change)"


def variants_table(variants: list[Variant], recorded: set[str] = frozenset()) -> str:
    rows = [(i + 1, variant_fingerprint(v), v.name, describe_change(v), v.provenance,
             "yes" if v.accuracy_risky else "", "replayed" if variant_fingerprint(v) in recorded else "", v.reason)
            for i, v in enumerate(variants)]
    return table(["#", "fingerprint", "name", "change", "provenance", "accuracy risk", "ledger", "reason"], rows)


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.2f}%"


def trials_table(trials: list[TrialRecord]) -> str:
    rows = []
    for t in trials:
        d = t.decision
        interval = "" if d.ci_low_pct is None else f"[{d.ci_low_pct:+.2f}%, {d.ci_high_pct:+.2f}%]"
        mean = "" if t.mean is None else f"{t.mean:,.1f}"
        launches = f"{t.measurements} + {len(t.best_launches)} best" if t.best_launches else str(t.measurements)
        rows.append((t.index, t.fingerprint, t.name, describe_change(t.variant), t.against, t.outcome,
                     _pct(d.gain_pct), interval, mean, launches, "replayed" if t.replayed else "", d.reason))
    return table(["#", "fingerprint", "name", "change", "against", "outcome", "gain", "interval (level in the reason)",
                  "tok/s", "launches", "", "reason"], rows)
