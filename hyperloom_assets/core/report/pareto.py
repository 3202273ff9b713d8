"""The Pareto frontier of everything a run measured: throughput per GPU against throughput
per user. Pure code.

Every stored measurement of the run (baseline, trials, the best's relaunches, validation,
sweep rungs, capacity probes) is a point: its output tok/s divided by the devices serving
the model (tensor x pipeline parallel; a CPU host is one), against the per-user decode
rate, 1000 / TPOT p50 (the sweep's interactivity). A point is on the frontier when no
other point is at least as good on both axes and better on one. A point whose TPOT is not
per-token (latency.py's warnings: a stream that arrived as one burst) has no per-user rate
to read, so it is listed but never on the frontier. Under the target's SLO each point
carries its own launch's verdict, and the recommendation is the frontier point within the
SLO with the most throughput per GPU: the config, and the load, to deploy for it.
"""

from __future__ import annotations

from typing import Any

from hyperloom_assets.core.config.targets import TargetSlo
from hyperloom_assets.core.measurement.latency import Latency
from hyperloom_assets.core.measurement.slo_verdict import slo_verdict
from hyperloom_assets.core.models import Strict


class ParetoPoint(Strict):
    measurement_id: int
    config: str  # baseline, stack, or the trial's keepers and variant
    kind: str  # the measurement's kind: baseline, trial, best_relaunch, validation, sweep or capacity
    concurrency: int
    request_rate: float | None = None
    tok_s_per_gpu: float
    tok_s_per_user: float | None  # None: TPOT is not per-token here
    meets_slo: bool | None = None  # None: the target sets no SLO
    on_frontier: bool = False
    why_off: str = ""  # why it cannot be on the frontier, when it cannot


class Frontier(Strict):
    points: list[ParetoPoint]
    devices: int
    slo_user_floor: float | None = None  # tok/s per user that the SLO's TPOT limit implies (its line)
    recommended: ParetoPoint | None = None

    @property
    def frontier(self) -> list[ParetoPoint]:
        return sorted((p for p in self.points if p.on_frontier), key=lambda p: p.tok_s_per_user or 0.0)


def without_port(argv: list[str]) -> list[str]:
    """A launch's argv without the port it was given: what makes two launches the same config."""
    kept: list[str] = []
    skip = False
    for token in argv:
        if skip:
            skip = False
            continue
        if token.startswith("--") and "port" in token:
            skip = "=" not in token
            continue
        kept.append(token)
    return kept


def config_names(trials) -> dict[str, str]:
    """Each trial's fingerprint -> the config it launched, in words (the keepers before it, then it)."""
    names, kept = {}, []
    for trial in trials:
        names[trial.fingerprint] = " + ".join([*kept, trial.name])
        if trial.outcome == "KEEP":
            kept.append(trial.name)
    return names


def _config(row: dict[str, Any], baseline_argv: list[str], names: dict[str, str]) -> str:
    if row["kind"] == "baseline":
        return "baseline"
    if row.get("fingerprint"):
        return names.get(row["fingerprint"], row["fingerprint"])
    return "baseline" if without_port(row["argv"]) == without_port(baseline_argv) else "stack"


def _point(row: dict[str, Any], config: str, devices: int, slo: TargetSlo | None) -> ParetoPoint | None:
    m = row["measurement"]
    workload = m.get("workload") or {}
    if workload.get("concurrency") is None:
        return None
    latency = Latency.model_validate(m["latency"]) if m.get("latency") else None
    warnings = latency.warnings() if latency else ["no per-request latency recorded"]
    tpot = m.get("tpot_p50_ms")
    user = 1000.0 / tpot if tpot and not warnings else None
    return ParetoPoint(measurement_id=row["id"], config=config, kind=row["kind"],
                       concurrency=int(workload["concurrency"]), request_rate=workload.get("request_rate"),
                       tok_s_per_gpu=m["output_throughput"] / devices, tok_s_per_user=user,
                       meets_slo=slo_verdict(slo, [latency]).met if slo else None,
                       why_off="; ".join(warnings) if user is None else "")


def _dominated(p: ParetoPoint, q: ParetoPoint) -> bool:
    """q is at least as good as p on both axes and better on one."""
    at_least = q.tok_s_per_gpu >= p.tok_s_per_gpu and q.tok_s_per_user >= p.tok_s_per_user
    return at_least and (q.tok_s_per_gpu > p.tok_s_per_gpu or q.tok_s_per_user > p.tok_s_per_user)


def frontier(rows: list[dict[str, Any]], baseline_argv: list[str], names: dict[str, str], devices: int,
             slo: TargetSlo | None = None) -> Frontier:
    """The run's stored measurements (final_report's rows) placed, the frontier marked, the pick made."""
    points = [p for p in (_point(row, _config(row, baseline_argv, names), devices, slo) for row in rows) if p]
    readable = [p for p in points if p.tok_s_per_user is not None]
    marked = [p.model_copy(update={"on_frontier": p.tok_s_per_user is not None
                                   and not any(_dominated(p, q) for q in readable)}) for p in points]
    within = [p for p in marked if p.on_frontier and p.meets_slo]
    recommended = max(within, key=lambda p: p.tok_s_per_gpu) if slo and within else None
    floor = 1000.0 / slo.tpot_ms if slo and slo.tpot_ms else None
    return Frontier(points=marked, devices=devices, slo_user_floor=floor, recommended=recommended)
