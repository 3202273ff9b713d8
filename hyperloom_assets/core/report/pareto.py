"""The Pareto frontier of everything a run measured: throughput per GPU against throughput
per user. Pure code.

Every stored measurement of the run (baseline, trials, the best's relaunches, validation,
sweep rungs, capacity probes) is a point: its output tok/s divided by the devices one
server takes (core/fleet/slots.py's devices_per_launch: tensor x pipeline x data parallel;
a CPU host is one), against the per-user decode rate, 1000 / TPOT p50 (the sweep's
interactivity). A point is on the frontier when no other point is at least as good on
both axes and better on one. A point whose TPOT is not per-token (latency.py's warnings: a
stream that arrived as one burst) has no per-user rate to read, so it is listed but never
on a frontier.

Each point is named by the config it measured, by the fingerprint its row records
(planning/fingerprints.py), whatever step measured it: the baseline's, the final stack's,
or a trial's. The climb's relaunches of the operator's config record none, and are the
baseline's; a validation, sweep or capacity row stored before rows carried their config
is "unrecorded", never guessed from its argv (the baseline's own launch carries the
profiler's flags, so no other launch of its config has its argv).

Under the target's SLO each point carries its own launch's verdict. The SLO also limits
TTFT and E2E, which are not axes, so a point that breaks it can dominate one that meets
it: the frontier within the SLO is taken over the points that meet it alone, and the
recommendation is the one of them with the most throughput per GPU (the most per user
between equals): the config, and the load, to deploy for it.
"""

from __future__ import annotations

from typing import Any

from hyperloom_assets.core.config.targets import TargetSlo
from hyperloom_assets.core.fleet.slots import devices_per_launch
from hyperloom_assets.core.measurement.latency import Latency
from hyperloom_assets.core.measurement.slo_verdict import slo_verdict
from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.planning.fingerprints import BASELINE_FINGERPRINT, config_fingerprint
from hyperloom_assets.core.planning.variants import Variant

UNRECORDED = "unrecorded"  # a row stored before rows named their config
OPERATOR_KINDS = ("baseline", "best_relaunch")  # kinds whose rows without a fingerprint are the operator's config


class ParetoPoint(Strict):
    measurement_id: int
    config: str  # baseline, stack, the trial's keepers and variant, or unrecorded
    fingerprint: str | None = None  # the config's (planning/fingerprints.py); None: unrecorded
    kind: str  # the measurement's kind: baseline, trial, best_relaunch, validation, sweep or capacity
    concurrency: int
    request_rate: float | None = None
    tok_s_per_gpu: float
    tok_s_per_user: float | None  # None: TPOT is not per-token here
    meets_slo: bool | None = None  # None: the target sets no SLO
    on_frontier: bool = False  # of every point
    on_slo_frontier: bool = False  # of the points within the SLO (never without one)
    why_off: str = ""  # why it cannot be on the frontier, when it cannot


class ConfigNames(Strict):
    """Which config each fingerprint is: the final stack's, and each trial's in words."""
    stack: str | None = None  # the final stack's fingerprint (config_fingerprint); None: no stack
    trials: dict[str, str] = {}  # a trial's fingerprint -> its keepers and variant (config_names)


class Frontier(Strict):
    points: list[ParetoPoint]
    devices: int
    has_slo: bool = False  # the target sets an SLO
    slo_user_floor: float | None = None  # tok/s per user that the SLO's TPOT limit implies (its line)
    recommended: ParetoPoint | None = None

    @property
    def frontier(self) -> list[ParetoPoint]:
        """The frontier of every point, ordered by per-user rate."""
        return sorted((p for p in self.points if p.on_frontier), key=lambda p: p.tok_s_per_user or 0.0)

    @property
    def slo_frontier(self) -> list[ParetoPoint]:
        """The frontier of the points within the SLO, ordered by per-user rate."""
        return sorted((p for p in self.points if p.on_slo_frontier), key=lambda p: p.tok_s_per_user or 0.0)


def config_names(trials) -> dict[str, str]:
    """Each trial's fingerprint -> the config it launched, in words (the keepers before it, then it)."""
    names, kept = {}, []
    for trial in trials:
        names[trial.fingerprint] = " + ".join([*kept, trial.name])
        if trial.outcome == "KEEP":
            kept.append(trial.name)
    return names


def row_fingerprint(row: dict[str, Any]) -> str | None:
    """The fingerprint of the config a stored row measured; None where the row does not say."""
    if row.get("fingerprint"):
        return row["fingerprint"]
    return BASELINE_FINGERPRINT if row["kind"] in OPERATOR_KINDS else None


def config_label(fingerprint: str | None, names: ConfigNames) -> str:
    """The config's name in words: baseline, stack, a trial's, or the fingerprint of one unnamed."""
    if fingerprint is None:
        return UNRECORDED
    if fingerprint == BASELINE_FINGERPRINT:
        return "baseline"
    if fingerprint == names.stack:
        return "stack"
    return names.trials.get(fingerprint, fingerprint)


def _point(row: dict[str, Any], names: ConfigNames, devices: int, slo: TargetSlo | None) -> ParetoPoint | None:
    m = row["measurement"]
    workload = m.get("workload") or {}
    if workload.get("concurrency") is None:
        return None
    latency = Latency.model_validate(m["latency"]) if m.get("latency") else None
    warnings = latency.warnings() if latency else ["no per-request latency recorded"]
    tpot = m.get("tpot_p50_ms")
    user = 1000.0 / tpot if tpot and not warnings else None
    fingerprint = row_fingerprint(row)
    return ParetoPoint(measurement_id=row["id"], config=config_label(fingerprint, names), fingerprint=fingerprint,
                       kind=row["kind"], concurrency=int(workload["concurrency"]),
                       request_rate=workload.get("request_rate"),
                       tok_s_per_gpu=m["output_throughput"] / devices, tok_s_per_user=user,
                       meets_slo=slo_verdict(slo, [latency]).met if slo else None,
                       why_off="; ".join(warnings) if user is None else "")


def _dominated(p: ParetoPoint, q: ParetoPoint) -> bool:
    """q is at least as good as p on both axes and better on one."""
    at_least = q.tok_s_per_gpu >= p.tok_s_per_gpu and q.tok_s_per_user >= p.tok_s_per_user
    return at_least and (q.tok_s_per_gpu > p.tok_s_per_gpu or q.tok_s_per_user > p.tok_s_per_user)


def _undominated(points: list[ParetoPoint]) -> set[int]:
    """The measurement ids of the readable points no other of `points` dominates."""
    readable = [p for p in points if p.tok_s_per_user is not None]
    return {p.measurement_id for p in readable if not any(_dominated(p, q) for q in readable)}


def frontier(rows: list[dict[str, Any]], names: ConfigNames, devices: int, slo: TargetSlo | None = None) -> Frontier:
    """The run's stored measurements (final_report's rows) placed, both frontiers marked, the pick made."""
    points = [p for p in (_point(row, names, devices, slo) for row in rows) if p]
    within = [p for p in points if p.meets_slo and p.tok_s_per_user is not None]
    on_all, on_slo = _undominated(points), _undominated(within)
    marked = [p.model_copy(update={"on_frontier": p.measurement_id in on_all,
                                   "on_slo_frontier": p.measurement_id in on_slo}) for p in points]
    # Its TTFT and E2E are in the verdict, not on an axis: the pick is read off the points within
    # the SLO, never off a frontier that points outside it shaped.
    pick = max((p for p in marked if p.on_slo_frontier), key=lambda p: (p.tok_s_per_gpu, p.tok_s_per_user),
               default=None)
    floor = 1000.0 / slo.tpot_ms if slo and slo.tpot_ms else None
    return Frontier(points=marked, devices=devices, has_slo=slo is not None, slo_user_floor=floor, recommended=pick)


def run_frontier(rows: list[dict[str, Any]], engine: str, server_args: list[str], keepers: list[Variant],
                 trials: list, slo: TargetSlo | None = None) -> Frontier:
    """A run's frontier: its points per device of one launch of the target's args (the count its
    slot and its roofline take too), named after the final stack's `keepers` and the `trials`."""
    names = ConfigNames(stack=config_fingerprint(keepers), trials=config_names(trials))
    return frontier(rows, names, devices_per_launch(engine, server_args), slo)
