"""`sim-predict`: the sim's scheduler driven by a simulated benchmark client, no HTTP.

Pure code. The client follows the measurement protocol of resources/bench/runner.py:
a warm-up round (discarded, but it warms the prefix cache), then measured rounds on the
same engine, each with its own dataset seed; sessions run concurrently up to
`concurrency` (first come, first served), a session's turns in order after `think_ms`,
sessions released by Poisson arrivals when the workload sets a request rate. Each
request's record is in simulated seconds; the metrics are hyperloom_assets/core/measurement/metrics.py's.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.engines.registry import engine_for
from hyperloom_assets.core.measurement.measurement import Measurement, RequestRecord
from hyperloom_assets.core.measurement.metrics import repeat_metrics, summarize
from hyperloom_assets.core.measurement.workloads import (
    Plan,
    PlannedRequest,
    default_warmups,
    measurement_signature,
    round_plan,
    round_seed,
    theoretical_prefix_hit_pct,
    warmup_plan,
)
from hyperloom_assets.core.roofline.gpus import gpu_spec
from hyperloom_assets.core.roofline.model_shape import ModelShape, load_shape
from hyperloom_assets.sim.build import build_engine, engine_for_shape
from hyperloom_assets.sim.engine_args import engine_parser, resolve_config, split_harness_args
from hyperloom_assets.sim.perf_model import DEFAULT_CALIBRATION, PerfModel, SimCalibration, StepShape
from hyperloom_assets.sim.scheduler import SimEngine, SimRequest


class SimArgError(ValueError):
    """Engine args the real engine's parser would reject (the message is argparse's)."""


class _RoundDriver:
    """A closed-loop client in simulated time: slots, sessions, turns and think times."""

    def __init__(self, engine: SimEngine, plan: Plan, concurrency: int, request_rate: float | None, arrival_seed: int):
        self.engine = engine
        self.plan = plan
        self.start = engine.now
        rng = random.Random(arrival_seed)
        releases, clock = [], self.start
        for _ in plan:
            if request_rate:
                clock += rng.expovariate(request_rate)
            releases.append(clock)
        self.pending = deque(zip(range(len(plan)), releases))
        self.free_slots = concurrency
        self.arrivals: list[tuple[float, int, int, int]] = []  # (time, order, session, turn)
        self.inflight: dict[int, tuple[int, int, SimRequest]] = {}
        self.records: list[RequestRecord] = []
        self._order = 0

    def _schedule(self, at: float, session: int, turn: int) -> None:
        self._order += 1
        think = self.plan[session][turn].think_ms / 1000.0
        heapq.heappush(self.arrivals, (at + think, self._order, session, turn))

    def _start_sessions(self, now: float) -> None:
        while self.free_slots and self.pending:
            session, release = self.pending.popleft()
            self.free_slots -= 1
            self._schedule(max(now, release), session, 0)

    def _submit_due(self) -> None:
        engine = self.engine
        while self.arrivals and self.arrivals[0][0] <= engine.now:
            at, _, session, turn = heapq.heappop(self.arrivals)
            planned = self.plan[session][turn]
            if len(planned.prompt_ids) + planned.output_tokens > engine.max_model_len:
                self._fail(planned, at, f"prompt plus output exceeds max model length {engine.max_model_len}")
                self._next(session, turn, at)
                continue
            request = engine.new_request(planned.prompt_ids, planned.output_tokens, at)
            self.inflight[request.rid] = (session, turn, request)
            engine.submit(request)

    def _fail(self, planned: PlannedRequest, at: float, error: str) -> None:
        self.records.append(RequestRecord(ok=False, prompt_tokens=len(planned.prompt_ids), start_s=at - self.start,
                                          session_id=planned.session_id, turn=planned.turn, error=error))

    def _next(self, session: int, turn: int, now: float) -> None:
        if turn + 1 < len(self.plan[session]):
            self._schedule(now, session, turn + 1)
        else:
            self.free_slots += 1
            self._start_sessions(now)

    def _complete(self, request: SimRequest) -> None:
        session, turn, _ = self.inflight.pop(request.rid)
        planned = self.plan[session][turn]
        times = self.engine.token_times(request)
        assert request.first_token_s is not None and request.finish_s is not None
        self.records.append(RequestRecord(
            ok=True, prompt_tokens=request.prompt_len, output_tokens=request.max_tokens,
            start_s=request.arrival - self.start, ttft_s=request.first_token_s - request.arrival,
            e2el_s=request.finish_s - request.arrival, itl_s=[b - a for a, b in zip(times, times[1:])],
            session_id=planned.session_id, turn=planned.turn))
        self._next(session, turn, request.finish_s)

    def run(self) -> tuple[list[RequestRecord], float]:
        engine = self.engine
        self._start_sessions(engine.now)
        while True:
            self._submit_due()
            step = engine.plan_step() if engine.has_work() else None
            if step is not None:
                for request in engine.apply_step(step):
                    if request.phase == "done":
                        self._complete(request)
            elif self.arrivals:
                engine.now = max(engine.now, self.arrivals[0][0])
            elif engine.has_work():
                raise RuntimeError("the sim scheduler stalled with requests waiting")
            else:
                break
        self.records.sort(key=lambda r: r.start_s)
        return self.records, engine.now - self.start


def simulate_round(engine: SimEngine, plan: Plan, concurrency: int, request_rate: float | None = None,
                   arrival_seed: int = 0) -> tuple[list[RequestRecord], float]:
    """One round on the engine as it is (cache state carries over); records in simulated seconds."""
    return _RoundDriver(engine, plan, concurrency, request_rate, arrival_seed).run()


def parse_engine_args(model_dir: Path, engine_args: list[str], flavor: str) -> Any:
    """Engine args as the flavor's parser reads them; harness flags in the list are ignored."""
    _, engine_only = split_harness_args(list(engine_args), flavor)
    if not any(t in ("--model", "--model-path") or t.startswith(("--model=", "--model-path=")) for t in engine_only):
        engine_only = ["--model", str(model_dir), *engine_only]
    parser = engine_parser(flavor, "sim-predict")
    parser.exit_on_error = False
    try:
        args, unknown = parser.parse_known_args(engine_only)
    except Exception as exc:  # argparse.ArgumentError: an invalid choice or value
        raise SimArgError(str(exc)) from exc
    if unknown:
        raise SimArgError(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def predict(model_dir: Path | str, gpu: str, engine_args: list[str], workload: Workload,
            num_prompts: int | None = None, flavor: str = "vllm", tp: int = 1, seed: int = 0,
            noise_pct: float = 0.0, repeats: int = 1, warmups: int | None = None,
            calibration: SimCalibration = DEFAULT_CALIBRATION, engine_version: str | None = None) -> Measurement:
    """The Measurement `hyperloom bench` would report against `sim-serve` with these args, in simulated time.

    Raises SimArgError for args the engine's parser rejects and SimConfigError for a
    configuration the engine would refuse at startup.
    """
    model_dir = Path(model_dir)
    spec = gpu_spec(gpu)
    args = parse_engine_args(model_dir, engine_args, flavor)
    config = resolve_config(args, flavor, spec.memory_gb)
    engine = build_engine(model_dir, spec, config, tp=tp, seed=seed, noise_pct=noise_pct, calibration=calibration,
                          engine_version=engine_version)
    vocab = load_shape(model_dir).vocab
    warm_count = default_warmups(workload.concurrency) if warmups is None else warmups
    plans = [round_plan(workload, f"repeat-{i + 1}", vocab, num_prompts) for i in range(max(repeats, 1))]
    warm = warmup_plan(workload, vocab, warm_count)
    if warm:
        simulate_round(engine, warm, workload.concurrency)
    slo = workload.slo
    rounds, measured = [], []
    engine.meter.open_window()
    for index, plan in enumerate(plans, start=1):
        records, duration = simulate_round(engine, plan, workload.concurrency, workload.request_rate,
                                           round_seed(workload.seed, f"arrivals-{index}"))
        rounds.append(repeat_metrics(records, duration, slo))
        measured += records
    return summarize(
        rounds, measured, seed=workload.seed, workload=measurement_signature(workload, plans[0], warm_count, vocab),
        theoretical_prefix_hit_pct=theoretical_prefix_hit_pct(plans[0]) if workload.kind == "agentic" else None,
        source="sim-predict", telemetry=engine.meter.window_telemetry(flavor) if engine_for(flavor).metrics else None,
    )


def fixed_batch_latency(shape: ModelShape, gpu: str, engine_args: list[str], batch: int, input_len: int,
                        output_len: int, flavor: str = "vllm", tp: int = 1, seed: int = 0,
                        calibration: SimCalibration = DEFAULT_CALIBRATION, engine_version: str | None = None) -> float:
    """Simulated seconds for one batch of distinct prompts submitted together, run to completion.

    What vLLM's `benchmark_latency` times: `batch` random `input_len`-token prompts, each
    generating exactly `output_len` tokens (EOS ignored), from first step to last.
    """
    engine = _fixed_batch_engine(shape, gpu, engine_args, batch, input_len, output_len, flavor, tp, seed, calibration,
                                 engine_version)
    _run_fixed_batch(engine)
    return engine.now


def fixed_batch_schedule(shape: ModelShape, gpu: str, engine_args: list[str], batch: int, input_len: int,
                         output_len: int, flavor: str = "vllm", tp: int = 1, seed: int = 0,
                         engine_version: str | None = None) -> tuple[PerfModel, list[StepShape]]:
    """The engine's perf model and the steps `fixed_batch_latency` runs, in order.

    With every prompt submitted at once and no noise, what the scheduler batches depends
    on token budgets and KV capacity, never on step times: one schedule serves every
    calibration, so a fit times it again instead of rescheduling (calibrate.py).
    """
    engine = _fixed_batch_engine(shape, gpu, engine_args, batch, input_len, output_len, flavor, tp, seed,
                                 DEFAULT_CALIBRATION, engine_version)
    return engine.model, _run_fixed_batch(engine)


def closed_loop_schedule(shape: ModelShape, gpu: str, engine_args: list[str], concurrency: int, prompts: int,
                         input_len: int, output_len: int, flavor: str = "vllm", tp: int = 1,
                         seed: int = 0, engine_version: str | None = None) -> tuple[PerfModel, list[StepShape]]:
    """The perf model and the steps of `prompts` requests run `concurrency` at a time, the next
    sent the moment one finishes (a serving benchmark's `--max-concurrency` run, no client delay).

    With fixed lengths a request finishes a fixed number of steps after it joins and its
    successor joins at that step, so the schedule does not depend on step times either.
    """
    engine = _bare_engine(shape, gpu, engine_args, flavor, tp, seed, DEFAULT_CALIBRATION, engine_version)
    send = _random_prompts(engine, shape, input_len, output_len, seed)
    for _ in range(min(concurrency, prompts)):
        send()
    sent, shapes = min(concurrency, prompts), []
    while engine.has_work():
        step = engine.plan_step()
        if step is None:
            raise RuntimeError("the sim scheduler stalled with requests waiting")
        shapes.append(step.shape)
        for request in engine.apply_step(step):
            if request.phase == "done" and sent < prompts:
                send()
                sent += 1
    return engine.model, shapes


def _bare_engine(shape: ModelShape, gpu: str, engine_args: list[str], flavor: str, tp: int, seed: int,
                 calibration: SimCalibration, engine_version: str | None = None) -> SimEngine:
    spec = gpu_spec(gpu)
    args = parse_engine_args(Path("model"), engine_args, flavor)
    return engine_for_shape(shape, spec, resolve_config(args, flavor, spec.memory_gb), tp=tp, seed=seed,
                            record_steps=False, calibration=calibration, engine_version=engine_version)


def _random_prompts(engine: SimEngine, shape: ModelShape, input_len: int, output_len: int,
                    seed: int) -> Callable[[], None]:
    """Submits one prompt of random tokens a call, as benchmark_latency's and the random dataset's:
    no prompt shares a cached prefix."""
    rng = random.Random(seed)

    def send() -> None:
        prompt = [rng.randrange(shape.vocab) for _ in range(input_len)]
        engine.submit(engine.new_request(prompt, output_len, engine.now))
    return send


def _fixed_batch_engine(shape: ModelShape, gpu: str, engine_args: list[str], batch: int, input_len: int,
                        output_len: int, flavor: str, tp: int, seed: int, calibration: SimCalibration,
                        engine_version: str | None = None) -> SimEngine:
    engine = _bare_engine(shape, gpu, engine_args, flavor, tp, seed, calibration, engine_version)
    send = _random_prompts(engine, shape, input_len, output_len, seed)
    for _ in range(batch):
        send()
    return engine


def _run_fixed_batch(engine: SimEngine) -> list[StepShape]:
    shapes = []
    while engine.has_work():
        step = engine.plan_step()
        if step is None:
            raise RuntimeError("the sim scheduler stalled with requests waiting")
        shapes.append(step.shape)
        engine.apply_step(step)
    return shapes
