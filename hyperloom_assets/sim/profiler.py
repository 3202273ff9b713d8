"""The sim's profiler: its performance model's own account of where each step's time goes.

`sim-serve --profile-dir DIR` (a harness flag) turns on POST /start_profile and
/stop_profile, as vLLM's `--profiler-config` does for vLLM. Between the two, every step
the engine applies is split by the model (`PerfModel.step_breakdown`, scaled to the
step's noisy duration) into one complete event per part, laid end to end in simulated
microseconds, and the time the engine waited for work between steps is a `sim::idle`
event (a real engine's trace cannot tell idle from scheduling; the sim can); stop writes them as a Chrome trace, `DIR/sim.<n>.pt.trace.json`, the
format torch's profiler writes, so one reduction reads both. Pure code.
"""

from __future__ import annotations

import json
from pathlib import Path

from hyperloom_assets.sim.perf_model import PerfModel, StepShape

# Event names by part: the reduction classifies them by these words, as it does real ops.
EVENT_NAMES = {"gemm": "sim::gemm", "attention": "sim::paged_attention", "sampling": "sim::sampler",
               "scheduling": "sim::scheduler", "kernel_launch": "sim::kernel_launch",
               "all_reduce": "sim::all_reduce", "idle": "sim::idle"}
MAX_EVENTS = 200_000  # a profile left running stops growing here; the trace says it was cut


class SimProfiler:
    def __init__(self, model: PerfModel, folder: Path):
        self.model, self.folder = model, folder
        self.events: list[dict] | None = None
        self.truncated = False
        self.last_end_s = 0.0
        self.sessions = 0

    @property
    def active(self) -> bool:
        return self.events is not None

    def start(self, now_s: float) -> None:
        if self.events is None:
            self.events, self.truncated, self.last_end_s = [], False, now_s

    def record(self, shape: StepShape, start_s: float, duration_s: float) -> None:
        """One applied step: its parts, each stretched by the step's noise like the step itself."""
        if self.events is None:
            return
        parts = self.model.step_breakdown(shape)
        scale = duration_s / (sum(parts.values()) or 1.0)
        idle_s = max(start_s - self.last_end_s, 0.0)
        self.last_end_s = start_s + duration_s
        ts = round((start_s - idle_s) * 1e6, 3)
        for part, seconds in [("idle", idle_s)] + [(p, s * scale) for p, s in parts.items()]:
            dur = round(seconds * 1e6, 3)  # whole ns, as torch writes them; the next part starts where it ends
            if dur <= 0.0:
                continue
            if len(self.events) >= MAX_EVENTS:
                self.truncated = True
                return
            self.events.append({"ph": "X", "cat": "sim_op", "name": EVENT_NAMES[part], "pid": 0, "tid": 0,
                                "ts": ts, "dur": dur})
            ts = round(ts + dur, 3)

    def stop(self) -> Path | None:
        """Write the session's trace; None when no session was running."""
        if self.events is None:
            return None
        self.sessions += 1
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"sim.{self.sessions}.pt.trace.json"
        trace = {"traceEvents": self.events, "displayTimeUnit": "ms",
                 "otherData": {"source": "hyperloom sim performance model", "time": "simulated",
                               "truncated": self.truncated}}
        path.write_text(json.dumps(trace))
        self.events = None
        return path
