"""Why an optimization run stopped: a closed vocabulary, one line of meaning each. Pure code.

The value is what `final_report`'s `stop_reason` metadata holds and the README lists.
"""

from __future__ import annotations

from enum import Enum


class StopReason(str, Enum):
    TARGET_REACHED = "target_reached"
    BUDGET_EXHAUSTED = "budget_exhausted"
    TIME_EXHAUSTED = "time_exhausted"
    NO_MORE_CANDIDATES = "no_more_candidates"
    BASELINE_FAILED = "baseline_failed"
    BASELINE_ARG_ERROR = "baseline_arg_error"
    ENVIRONMENT_UNAVAILABLE = "environment_unavailable"
    CANCELLED = "cancelled"

    @property
    def description(self) -> str:
        return DESCRIPTIONS[self]


DESCRIPTIONS: dict[StopReason, str] = {
    StopReason.TARGET_REACHED: "the climb's running estimate of the best stack's gain over the baseline reached the "
                               "target's target_gain_pct (the validated gain, measured afterwards, may differ)",
    StopReason.BUDGET_EXHAUSTED: "max_trials candidate measurements were spent",
    StopReason.TIME_EXHAUSTED: "the target's time_budget_min ran out before the plan did",
    StopReason.NO_MORE_CANDIDATES: "every planned variant was tried (or already in the ledger) and re-planning found none new",
    StopReason.BASELINE_FAILED: "the baseline could not be measured: three consecutive failed attempts, each on a fresh "
                                "server; a refusal by a guard (invariant 6) or a host that failed its preflight, at "
                                "once; a retry identical to a run that gave up (invariant 7); or a workload that cannot "
                                "run (a bad trace, a prompt longer than the context)",
    StopReason.BASELINE_ARG_ERROR: "the engine rejected the baseline's argv (unrecognized arguments, invalid choice); stops at once",
    StopReason.ENVIRONMENT_UNAVAILABLE: ("the engine release or host could not be provided: a release run whose install "
                                         "failed, a host held by another run (its lease), an SSH host that cannot be "
                                         "reached (at the baseline or mid-climb), or a host `python` without the "
                                         "engine"),
    StopReason.CANCELLED: "the run was terminated (the UI's Terminate, SIGTERM or SIGINT): its server was torn down, "
                          "every finished trial and launch stays in the ledger, and re-executing resumes from them",
}


def describe(reason: StopReason | str) -> str:
    """The one-line meaning of a stop reason; an unknown value is an error naming it."""
    try:
        return StopReason(reason).description
    except ValueError as exc:
        known = ", ".join(r.value for r in StopReason)
        raise ValueError(f"unknown stop reason {reason!r}; expected one of {known}") from exc


def markdown_table() -> str:
    """The vocabulary as a Markdown table, for the README and the report."""
    rows = [f"| `{reason.value}` | {reason.description} |" for reason in StopReason]
    return "\n".join(["| stop reason | meaning |", "|---|---|", *rows])
