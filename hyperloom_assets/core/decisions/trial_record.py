"""What the climb records: one launch's measurement, a look (one launch of a trial), a trial. Pure models.

The ledger keeps them (climb.py's Ledger): a re-executed run replays a TrialRecord, and a
run killed mid-trial resumes from the trial's recorded Looks.
"""

from __future__ import annotations

import statistics

from hyperloom_assets.core.config.targets import Objective
from hyperloom_assets.core.decisions.rule import Decision
from hyperloom_assets.core.measurement.latency import Latency
from hyperloom_assets.core.measurement.slo_verdict import SloVerdict
from hyperloom_assets.core.measurement.stats import Launches, repeats_of
from hyperloom_assets.core.measurement.telemetry import Telemetry
from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.proposer.critic_rules import Review


class TrialMeasurement(Strict):
    """One launch of a trial's config: per-repeat throughputs, or the failure.

    error_class OVERTIME: the measure stopped the launch at `rule.overtime_limit_s` and
    tore its server down; `measuring_s` says when.
    """

    throughputs: list[float] = []  # output tok/s
    goodputs: list[float] = []  # requests/s within the SLO (objective.decision_goodput); [] without an slo
    measuring_s: float = 0.0
    measurement_id: int | None = None
    error_class: str | None = None
    error: str | None = None
    argv: list[str] = []
    env: dict[str, str] = {}
    telemetry: Telemetry | None = None  # the engine's /metrics over the measured rounds
    latency: Latency | None = None  # per-request percentiles over the measured rounds (None: a failed launch)
    ran_on: str | None = None  # `host:devices` of the launch's slot (LaunchRecord.slot_text); None off a slot


class Look(Strict):
    """One launch of a trial, in the order the climb asked for it: the unit a resume replays."""

    trial: str  # the trial's fingerprint
    index: int  # 1, 2, ... within the trial
    role: str  # "variant" (stack plus variant), "best" (the running best), "rebench" (the new stack) or
    # "spare" (a launch of the trial's config started ahead that its decision did not ask for: parallel.py)
    measurement: TrialMeasurement
    against: str | None = None  # the running best's key the trial was measured against (None: an older look)


class TrialRecord(Strict):
    index: int
    name: str
    fingerprint: str  # of the whole launched change, relative to the operator's base
    variant: Variant
    against: str  # "baseline" or "stack of N keepers"
    against_key: str | None = None  # the running best's evidence key, where a parallel climb settled it
    decision: Decision
    measurements: int  # launches of the variant
    # The variant's per-repeat values of the objective, launch by launch (so too the best's and
    # the rebench's): output tok/s, or goodput where `objective` says so.
    launches: Launches
    best_launches: Launches = []  # the running best, re-launched beside the variant
    rebenches: int = 0  # fresh launches of the new stack after a KEEP, failed ones included
    rebench_launches: Launches = []
    measurement_ids: list[int] = []
    best_measurement_ids: list[int] = []
    rebench_measurement_ids: list[int] = []
    error_class: str | None = None
    argv: list[str] = []
    env: dict[str, str] = {}
    replayed: bool = False  # taken from the ledger, not measured in this execution
    telemetry: Telemetry | None = None  # the variant's last launch, as the engine reported it
    review: Review | None = None  # the critic's word on a planned patch, taken before it touched the tree
    slo: SloVerdict | None = None  # the target's SLO over the variant's launches (None: no SLO, or none measured)
    objective: Objective = "throughput"
    output_throughputs: Launches = []  # the variant's output tok/s, when the objective is not throughput
    ran_on: list[str] = []  # each launch's slot, `host:devices`, in launch order (launches off a slot: none)

    @property
    def outcome(self) -> str:
        return self.decision.outcome.value

    @property
    def mean(self) -> float | None:
        repeats = repeats_of(self.launches)
        return statistics.fmean(repeats) if repeats else None

    @property
    def output_throughput(self) -> float | None:
        """The variant's mean output tok/s, whatever the objective."""
        if self.objective == "throughput":
            return self.mean
        repeats = repeats_of(self.output_throughputs)
        return statistics.fmean(repeats) if repeats else None

    @property
    def launch_count(self) -> int:
        """Servers this trial started: the variant's, the best's beside it, the stack's rebench."""
        return self.measurements + len(self.best_launches) + self.rebenches
