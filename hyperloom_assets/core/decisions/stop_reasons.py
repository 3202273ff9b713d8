"""Why an optimization run stopped: a closed vocabulary, one line of meaning each. Pure code.

The value is what `final_report`'s `stop_reason` metadata holds and docs/run.md lists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class StopReason(str, Enum):
    TARGET_REACHED = "target_reached"
    BUDGET_EXHAUSTED = "budget_exhausted"
    TIME_EXHAUSTED = "time_exhausted"
    NO_MORE_CANDIDATES = "no_more_candidates"
    EXPECTED_GAIN_BELOW_NOISE = "expected_gain_below_noise"
    BASELINE_FAILED = "baseline_failed"
    BASELINE_ARG_ERROR = "baseline_arg_error"
    ENVIRONMENT_UNAVAILABLE = "environment_unavailable"
    CANCELLED = "cancelled"

    @property
    def description(self) -> str:
        return MEANINGS[self].text


@dataclass(frozen=True)
class Case:
    """One way the code reaches a stop reason: the description's words for it, and a pattern
    the recorded stop's detail matches when a run stopped that way ("" when the reason alone
    says it). tests/unit/test_stop_reasons.py requires a test that produces each case."""

    words: str
    evidence: str = ""


@dataclass(frozen=True)
class Meaning:
    """A reason's one line: `lead`, then its cases' words joined, then `tail`."""

    cases: dict[str, Case]
    lead: str = ""
    tail: str = ""
    joiner: str = "; "

    @property
    def text(self) -> str:
        return self.lead + self.joiner.join(case.words for case in self.cases.values()) + self.tail


MEANINGS: dict[StopReason, Meaning] = {
    StopReason.TARGET_REACHED: Meaning({"running_estimate": Case(
        "the climb's running estimate of the best stack's gain over the baseline reached the target's "
        "target_gain_pct (the validated gain, measured afterwards, may differ)")}),
    StopReason.BUDGET_EXHAUSTED: Meaning({"max_trials": Case("max_trials candidate measurements were spent")}),
    StopReason.TIME_EXHAUSTED: Meaning({"time_budget": Case(
        "the target's time_budget_min ran out before the plan did")}),
    StopReason.NO_MORE_CANDIDATES: Meaning({"plan_spent": Case(
        "every planned variant was tried (or already in the ledger) and re-planning found none new; with the "
        "continuation on, it found no config of the space left unmeasured either")}),
    StopReason.EXPECTED_GAIN_BELOW_NOISE: Meaning({"regret_bound": Case(
        "past the rule plan, the continuation's model bounds what any config left could gain over the best "
        "measured one below the launch noise (Optuna's regret bound, from 12 measured configs on)")}),
    StopReason.BASELINE_FAILED: Meaning(lead="the baseline could not be measured: ", cases={
        "three_failures": Case("three consecutive failed attempts, each on a fresh server",
                               r"after 3 consecutive failed attempt\(s\)"),
        "guard": Case("a refusal by a guard (docs/design.md, invariant 6), at once", r"prefix cache off"),
        "preflight": Case("a host that failed its preflight, at once", r"preflight: "),
        "duplicate": Case("a retry identical to a run that gave up (docs/design.md, invariant 7)", r"dropped as a duplicate"),
        "workload": Case("a workload that cannot run (a bad trace, a prompt longer than the context)",
                         r"bad trace: |tokens of context, more than"),
        "framework_tree": Case("a framework_tree that cannot be opened or whose engine does not import from it",
                               r"framework_tree |not from the tree"),
        "search_space": Case("a search_space flag or value the engine's own parser refuses, before any launch",
                             r"search_space\.args"),
    }),
    StopReason.BASELINE_ARG_ERROR: Meaning({"argv": Case(
        "the engine rejected the baseline's argv (unrecognized arguments, invalid choice); stops at once",
        r"argv_invalid|unrecognized arguments|invalid choice")}),
    StopReason.ENVIRONMENT_UNAVAILABLE: Meaning(lead="the engine release or host could not be provided: ", cases={
        "release_install": Case("a release run whose install failed", r"could not (be )?(built|install)|install"),
        "lease": Case("a host held by another run (its lease)", r"leased by|held by"),
        "ssh_at_baseline": Case("an SSH host that cannot be reached at the baseline", r"ssh "),
        "ssh_mid_climb": Case("an SSH host lost mid-climb", r"ssh "),
        "no_engine": Case("a host `python` without the engine", r"has no \w+ engine"),
    }),
    StopReason.CANCELLED: Meaning(
        joiner=", ", lead="the run was terminated (", tail="): its server was torn down, every finished trial and launch stays "
        "in the ledger, and re-executing resumes from them", cases={
            "ui_terminate": Case("the UI's Terminate", r"terminated during"),
            "sigterm": Case("SIGTERM", r"terminated during"),
            "sigint": Case("or SIGINT", r"terminated during"),
        }),
}


def matches_case(reason: StopReason | str, case: str, detail: str) -> bool:
    """Whether a recorded stop's detail shows the run stopped by this case of the reason."""
    return re.search(MEANINGS[StopReason(reason)].cases[case].evidence, detail) is not None


def describe(reason: StopReason | str) -> str:
    """The one-line meaning of a stop reason; an unknown value is an error naming it."""
    try:
        return StopReason(reason).description
    except ValueError as exc:
        known = ", ".join(r.value for r in StopReason)
        raise ValueError(f"unknown stop reason {reason!r}; expected one of {known}") from exc


def markdown_table() -> str:
    """The vocabulary as a Markdown table, for docs/run.md and the report."""
    rows = [f"| `{reason.value}` | {reason.description} |" for reason in StopReason]
    return "\n".join(["| stop reason | meaning |", "|---|---|", *rows])
