"""Does a written report say what the result store says? Pure code.

The report is what a colleague reads and forwards; the store is what every number was
measured into. They are compared number by number (the report's JSON) and where the
reader sees them (the Markdown headline and the trials table), so a report that
drifted from its measurements, by a bug or by hand, is caught.
"""

from __future__ import annotations

import math
from typing import Any

from hyperloom_assets.core.models import Frozen
from hyperloom_assets.core.report.markdown import throughput_headline, validated_gain_text
from hyperloom_assets.core.report.tables import Table, columns_of

# Both sides are the same floats through JSON; this only absorbs a last-digit round trip.
REL_TOLERANCE = 1e-9


class Comparison(Frozen):
    what: str
    report: str  # shown in full precision: a mismatch in the last digits must be visible
    store: str
    matches: bool


def _numbers(what: str, report: float | None, store: float | None) -> Comparison:
    matches = report is not None and store is not None and math.isclose(report, store, rel_tol=REL_TOLERANCE)
    return Comparison(what=what, report=repr(report), store=repr(store), matches=matches)


def _shown(what: str, markdown: str, expected: str | None) -> Comparison:
    shown = expected is not None and expected in markdown
    return Comparison(what=what, report="shown" if shown else "not shown", store=repr(expected), matches=shown)


def _trial_row(markdown: str, fingerprint: str) -> str:
    return next((line for line in markdown.splitlines() if f"| {fingerprint} |" in line), "")


def _trials(report: dict[str, Any], markdown: str, stored: list[dict[str, Any]]) -> list[Comparison]:
    outcomes = {row["fingerprint"]: row["outcome"] for row in stored}
    found = []
    for trial in report["trials"]:
        fingerprint, outcome = trial["fingerprint"], trial["decision"]["outcome"]
        stored_outcome = outcomes.get(fingerprint)
        found.append(Comparison(what=f"trial {trial['index']} {fingerprint} outcome", report=outcome,
                                store=repr(stored_outcome), matches=outcome == stored_outcome))
        row = _trial_row(markdown, fingerprint)
        shown = stored_outcome is not None and f"| {stored_outcome} |" in row
        found.append(Comparison(what=f"trial {trial['index']} {fingerprint} outcome in the Markdown table",
                                report=row or "no row", store=repr(stored_outcome), matches=shown))
    return found


def compare_report(report: dict[str, Any], markdown: str, baseline: dict[str, Any] | None,
                   stack: dict[str, Any] | None, trials: list[dict[str, Any]]) -> list[Comparison]:
    """`report`: the report's JSON; `baseline`: the stored baseline Measurement; `stack`: the
    stored stack result; `trials`: the ledger rows of the report's context."""
    base = baseline["output_throughput"] if baseline else None
    stack = stack or {}
    final, gain = stack.get("final_output_throughput"), stack.get("validated_gain_pct")
    low, high = stack.get("validated_gain_ci_low"), stack.get("validated_gain_ci_high")
    found = [
        _numbers("baseline output tok/s", report["baseline"]["output_throughput"], base),
        _numbers("final output tok/s", report["final_output_throughput"], final),
        _numbers("validated gain %", report["validated_gain_pct"], gain),
        _numbers("validated gain interval low %", report["validated_gain_ci_low"], low),
        _numbers("validated gain interval high %", report["validated_gain_ci_high"], high),
        _shown("headline throughputs", markdown, throughput_headline(base, final) if None not in (base, final) else None),
    ]
    if stack.get("validated"):
        found.append(_shown("headline validated gain and interval", markdown,
                            validated_gain_text(gain, low, high) if None not in (gain, low, high) else None))
    return found + _trials(report, markdown, trials)


COMPARISON_COLUMNS = columns_of(
    ("what", "string", "the number or the text compared"),
    ("report", "string", "what the report says (its JSON, or what its Markdown shows)"),
    ("store", "string", "what the result store says"),
    ("matches", "bool", "the two agree"),
)


def comparisons_table(found: list[Comparison]) -> Table:
    return Table(columns=COMPARISON_COLUMNS, rows=[c.model_dump() for c in found])
