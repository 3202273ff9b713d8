"""A user's own serving benchmarks as calibration cases: `vllm bench serve`, SGLang's
bench_serving or AIPerf result files (core/measurement/peer_results.py reads them), and the
result store's measurements of a target on a real engine. Pure code.

A closed-loop run (a concurrency cap, the next request sent as soon as one finishes, fixed
prompt and output lengths, as `--max-concurrency N` with the random dataset and
`--ignore-eos` runs) has a schedule that does not depend on step times
(predict.closed_loop_schedule), so like a fixed batch it is scheduled once and re-timed for
every guess (calibrate.py), and its measured duration is the sum of its steps. That sum
leaves out the client's and the HTTP server's time between a finish and the next arrival,
which a fit then books as engine time. An open-loop run (a finite request rate) idles for
times that depend on step times, and is refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field

from hyperloom_assets.core.measurement.peer_results import PeerResultError, read_peer_result
from hyperloom_assets.core.models import Frozen
from hyperloom_assets.sim.calibration import CalibrationError


class ServingCase(Frozen):
    """One closed-loop run of a result file: what the sim must schedule, and how long it took."""

    id: str
    concurrency: int = Field(gt=0)
    prompts: int = Field(gt=0)
    input_len: int = Field(gt=0)  # per request, the mean the file reports
    output_len: int = Field(gt=0)
    measured_s: float = Field(gt=0)
    engine_args: list[str] | None = None  # the server's own, where the source records them


def _open_loop(rate: object) -> bool:
    """A finite request rate; vLLM writes an unlimited one as inf (or "inf"), AIPerf and SGLang as none."""
    try:
        return rate is not None and math.isfinite(float(rate))
    except (TypeError, ValueError):
        return False


def serving_cases(path: Path) -> list[ServingCase]:
    """Each run in the file as a case; CalibrationError names the file and what it lacks."""
    try:
        measurement = read_peer_result(path)
    except PeerResultError as exc:
        raise CalibrationError(f"serving result {exc}") from exc
    workload = measurement.workload or {}
    if _open_loop(workload.get("request_rate")):
        raise CalibrationError(f"serving result {path}: request_rate {workload['request_rate']} is an open-loop run, "
                               "whose idle time depends on step times; expected a closed-loop run "
                               "(--max-concurrency N with an infinite request rate)")
    concurrency = workload.get("max_concurrency") or workload.get("concurrency")
    if not concurrency:
        raise CalibrationError(f"serving result {path}: no max_concurrency (or concurrency): expected the "
                               "concurrency cap the run kept")
    cases = []
    for index, run in enumerate(measurement.repeats, start=1):
        if not run.total_input_tokens or not run.total_output_tokens:
            raise CalibrationError(f"serving result {path}: run {index} has no total_input_tokens or "
                                   "total_output_tokens: expected the tokens sent and received")
        cases.append(ServingCase(
            id=path.name if len(measurement.repeats) == 1 else f"{path.name}#{index}",
            concurrency=int(concurrency), prompts=run.completed,
            input_len=round(run.total_input_tokens / run.completed),
            output_len=round(run.total_output_tokens / run.completed), measured_s=run.duration_s))
    return cases


def store_cases(rows: list[dict[str, Any]],
                server_args_of: Callable[[list[str]], list[str] | None]) -> tuple[list[ServingCase], list[str]]:
    """A target's stored measurements (ResultStore.measurements rows) as cases, one per measured round,
    each with the engine args its launch ran; and why each row left out was left out.

    Our client's closed-loop random workload has fixed prompt and output lengths; a row of
    another workload, of a request rate, without a measurement or with a command the engine's
    `build_argv` did not write is left out.
    """
    cases, skipped = [], []
    for row in rows:
        name = f"{row['target']} {row['kind']} #{row['id']}"
        measurement, args = row.get("measurement"), server_args_of(row["argv"])
        workload = (measurement or {}).get("workload") or {}
        why = ("no measurement (the launch failed)" if measurement is None
               else f"workload {workload.get('kind')!r}, not a random one" if workload.get("kind") != "random"
               else "a request rate (open loop)" if workload.get("request_rate") is not None
               else "a command the engine's launcher did not build" if args is None else None)
        if why:
            skipped.append(f"{name}: {why}")
            continue
        cases += [ServingCase(id=f"{name}.{index}", concurrency=workload["concurrency"], prompts=run["completed"],
                              input_len=workload["isl"], output_len=workload["osl"], measured_s=run["duration_s"],
                              engine_args=args)
                  for index, run in enumerate(measurement["repeats"], start=1)]
    return cases, skipped
