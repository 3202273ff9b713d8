"""Fit the perf model's efficiency parameters to measured fixed-batch latencies. Pure code.

Each measurement is one batch submitted at once and run to its last token (vLLM's
`benchmark_latency`). Its schedule does not depend on step times (predict.py,
`fixed_batch_steps`), so it is computed once per case and only re-timed as the
parameters move: a fit takes seconds, not the minutes a re-simulation per guess would.

The fit is least squares on log(predicted / measured) over the parameters the cases
can identify (`identifiable`), each kept inside physical bounds (BOUNDS). Leave-one-out
refits without each case and predicts it: the error to expect on a configuration the
fit has not seen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from hyperloom_assets.sim.calibration import CaseFit
from hyperloom_assets.sim.perf_model import PerfModel, SimCalibration, StepShape

# (low, high) per parameter: what the hardware allows, so a fit cannot explain a gap with
# an impossible number (a bandwidth above the datasheet, a negative cost).
BOUNDS: dict[str, tuple[float, float]] = {
    "layer_fixed_s": (0.0, 500e-6),  # a few dozen small kernels at 2-10 µs each
    "bw_efficiency": (0.2, 0.95),  # GEMVs never sustain the datasheet bandwidth
    "compute_scale": (0.1, 1.6),  # the tables' GEMM efficiency, from a sixth of it to near the peak
    "allreduce_scale": (0.25, 8.0),  # the table against the engine's collective: another TP size, launches, syncs
    "cpu_scale": (0.25, 8.0),  # the host's CPU against the one the engine row describes
    "attention_seq_layer_s": (0.0, 20e-6),  # the attention kernel's fixed work per sequence and layer
}
# Tried in this order: the physics the published gaps point at first (issue 29's breakdown).
PREFERRED = tuple(BOUNDS)
COLLINEAR = 0.05  # a parameter whose effect is within 5% of a mix of those chosen adds nothing
LINEAR_REL = 1e-9


@dataclass(frozen=True)
class FitCase:
    """One measurement, its engine's perf model and the schedule its batch runs."""

    id: str
    measured_s: float
    model: PerfModel
    runs: tuple[tuple[StepShape, int, int], ...]  # (first step, steps, decode-context growth per step)

    def predict(self, calibration: SimCalibration) -> float:
        model = replace(self.model, calibration=calibration)
        return sum(_run_seconds(model, first, count, growth) for first, count, growth in self.runs)


def fit_case(case_id: str, measured_s: float, model: PerfModel, steps: Sequence[StepShape]) -> FitCase:
    return FitCase(case_id, measured_s, model, tuple(_runs(steps)))


def _runs(steps: Sequence[StepShape]) -> list[tuple[StepShape, int, int]]:
    """Consecutive steps that differ only by a steady growth of the decode context."""
    runs: list[tuple[StepShape, int, int]] = []
    for step in steps:
        if runs:
            first, count, growth = runs[-1]
            delta = step.decode_context - first.decode_context - count * growth if count > 1 else 0
            same = replace(step, decode_context=first.decode_context) == first
            if same and count == 1:
                runs[-1] = (first, 2, step.decode_context - first.decode_context)
                continue
            if same and delta == 0:
                runs[-1] = (first, count + 1, growth)
                continue
        runs.append((step, 1, 0))
    return runs


def _run_seconds(model: PerfModel, first: StepShape, count: int, growth: int) -> float:
    """The run's time, exactly: a step's time is a maximum of two lines in its decode context.

    Where the middle step lies on the chord between the ends, the whole run is on one
    line and sums as a trapezoid; otherwise the bound changes inside and the run splits.
    """
    def at(index: int) -> float:
        return model.step_time(replace(first, decode_context=first.decode_context + index * growth))

    if count <= 2:
        return sum(at(i) for i in range(count))
    start, end, middle = at(0), at(count - 1), count // 2
    chord = start + (end - start) * middle / (count - 1)
    if abs(at(middle) - chord) <= LINEAR_REL * max(chord, 1e-12):
        return count * (start + end) / 2
    second = replace(first, decode_context=first.decode_context + middle * growth)
    return _run_seconds(model, first, middle, growth) + _run_seconds(model, second, count - middle, growth)


def _log_errors(cases: Sequence[FitCase], calibration: SimCalibration) -> np.ndarray:
    return np.array([math.log(case.predict(calibration) / case.measured_s) for case in cases])


def _with(start: SimCalibration, names: Sequence[str], unit: np.ndarray) -> SimCalibration:
    """The start's parameters with `names` set from their positions in [0, 1] between their bounds."""
    values = {name: float(BOUNDS[name][0] + u * (BOUNDS[name][1] - BOUNDS[name][0])) for name, u in zip(names, unit)}
    return start.model_copy(update=values)


def _unit(start: SimCalibration, names: Sequence[str]) -> np.ndarray:
    positions = [(getattr(start, n) - BOUNDS[n][0]) / (BOUNDS[n][1] - BOUNDS[n][0]) for n in names]
    return np.clip(positions, 1e-6, 1 - 1e-6)  # strictly inside, as the bounded solver needs


def identifiable(cases: Sequence[FitCase], start: SimCalibration, limit: int) -> list[str]:
    """Parameters, in PREFERRED order, whose effect on the cases no mix of those chosen before reproduces.

    Each parameter's effect is its column of d log(predicted) / d position at `start`;
    one whose column is within COLLINEAR of the span of the chosen ones (two costs per
    layer on cases of one TP size, say) would only trade off against them, so it is held.
    """
    base = _log_errors(cases, start)
    chosen: list[str] = []
    columns: list[np.ndarray] = []
    for name in PREFERRED:
        if len(chosen) >= limit:
            break
        unit = _unit(start, [name])
        step = 0.01 if unit[0] < 0.5 else -0.01
        column = (_log_errors(cases, _with(start, [name], unit + step)) - base) / step
        norm = float(np.linalg.norm(column))
        if norm == 0.0:
            continue
        if columns:
            basis = np.column_stack(columns)
            residual = column - basis @ np.linalg.lstsq(basis, column, rcond=None)[0]
            if np.linalg.norm(residual) < COLLINEAR * norm:
                continue
        chosen.append(name)
        columns.append(column)
    return chosen


def fit(cases: Sequence[FitCase], names: Sequence[str], start: SimCalibration) -> SimCalibration:
    """`start` with `names` moved to minimise the squared log error over `cases`, inside BOUNDS."""
    if not names:
        return start
    result = least_squares(lambda u: _log_errors(cases, _with(start, names, u)), _unit(start, names),
                           bounds=(0.0, 1.0), x_scale="jac", diff_step=1e-4, ftol=1e-6, xtol=1e-6)
    return _with(start, names, result.x)


def case_fits(cases: Sequence[FitCase], names: Sequence[str], fitted: SimCalibration,
              leave_one_out: bool = True) -> list[CaseFit]:
    """Each case's prediction by the fitted parameters and, refitted without it, its leave-one-out prediction."""
    rows = []
    for index, case in enumerate(cases):
        predicted = case.predict(fitted)
        loo = None
        if leave_one_out and len(cases) > len(names):
            others = [c for i, c in enumerate(cases) if i != index]
            loo = case.predict(fit(others, names, fitted))
        rows.append(CaseFit(id=case.id, measured_s=case.measured_s, predicted_s=round(predicted, 5),
                            ratio=round(predicted / case.measured_s, 4),
                            loo_predicted_s=None if loo is None else round(loo, 5),
                            loo_ratio=None if loo is None else round(loo / case.measured_s, 4)))
    return rows
