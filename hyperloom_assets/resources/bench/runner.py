"""The measurement protocol's client side: a warm-up round, then measured repeats.

No Dagster here, so `hyperloom bench` starts fast; resources/bench/client.py wraps this
in a ConfigurableResource. Everything wrong with the input (a bad trace, a prompt that
cannot fit the server) is raised before the first request is sent. Every measurement is
bounded in all (core/measurement/limits.py: its workload at a floor speed, at most
`max_total_s`), a caller may bound it tighter (`timeout_s`); past the limit the round in
flight is cancelled and BenchOvertime raised. A caller may follow it (`progress`: each
finished round, and a heartbeat while one runs).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.measurement.limits import DEFAULT_MAX_MEASUREMENT_S, measurement_limit_s
from hyperloom_assets.core.measurement.measurement import Measurement, RepeatMetrics, RequestRecord
from hyperloom_assets.core.measurement.metrics import repeat_metrics, summarize
from hyperloom_assets.core.measurement.serving import BenchOvertime, ServerError
from hyperloom_assets.core.measurement.telemetry import Telemetry
from hyperloom_assets.core.measurement.workloads import (
    FIRST_ORDINARY_TOKEN,
    Plan,
    PlannedRequest,
    default_warmups,
    max_context_tokens,
    measurement_signature,
    round_plan,
    round_seed,
    theoretical_prefix_hit_pct,
    warmup_plan,
)
from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.roofline.model_shape import load_shape
from hyperloom_assets.resources.bench.heap import heap_frozen
from hyperloom_assets.resources.bench.monitor import ClientLoad, LoadMonitor
from hyperloom_assets.resources.bench.stream import (
    DEFAULT_SOCK_READ_TIMEOUT_S,
    completions_url,
    open_session,
    send_request,
)
from hyperloom_assets.resources.bench.telemetry import TelemetryScraper
from hyperloom_assets.resources.hosts.signals import signals_deferred


class BenchInputError(ValueError):
    """A workload the client refuses before sending anything; the message says why."""


class BenchRunError(RuntimeError):
    """A round that is not a measurement: a request failed (the server or the model name is wrong)."""


class RoundFailed(BenchRunError, ServerError):
    """Requests of a round failed against a server that was ready: a ServerError with the
    class of the failure, so a trial records FAILED with it and a baseline retries."""

    def __init__(self, error_class: str, message: str):
        ServerError.__init__(self, error_class, message)


def round_error_class(failures: list[RequestRecord]) -> str:
    """A server that stopped answering explains every other failure of its round; else the commonest class."""
    classes = [record.error_class or "bad_response" for record in failures]
    if "server_gone" in classes:
        return "server_gone"
    return max(sorted(set(classes)), key=classes.count)


def check_round(records: list[RequestRecord], what: str, url: str) -> None:
    """RoundFailed unless every request of the round succeeded: a partial round measures a broken server."""
    failures = [record for record in records if not record.ok]
    if not failures and records:
        return
    if not records:
        raise RoundFailed("bad_response", f"no {what} request was sent to {url}")
    every = f"every {what} request" if len(failures) == len(records) else \
        f"{len(failures)} of {len(records)} {what} requests"
    raise RoundFailed(round_error_class(failures), f"{every} failed against {url}: {_first_error(failures)}")


class RoundProgress(Strict):
    """A round under way (metrics None: a heartbeat) or finished (its metrics)."""

    label: str  # "warm-up", "repeat-1", ...
    done: int  # requests finished so far
    total: int
    elapsed_s: float
    metrics: RepeatMetrics | None = None


ProgressFn = Callable[[RoundProgress], None]
HEARTBEAT_S = 30.0  # a round longer than this reports its progress at this interval


def model_vocab_size(model_dir: Path) -> int:
    """The vocabulary size from a model folder's config.json."""
    return load_shape(model_dir).vocab


def model_max_len(model_dir: Path) -> int:
    """The longest context the model allows (`max_position_embeddings`)."""
    return load_shape(model_dir).max_position_embeddings


def check_vocab(vocab_size: int) -> None:
    if vocab_size <= FIRST_ORDINARY_TOKEN:
        raise BenchInputError(f"vocab_size {vocab_size} leaves no ordinary token IDs (need more than {FIRST_ORDINARY_TOKEN})")


def check_plans(plans: list[Plan], max_model_len: int | None) -> None:
    for plan in plans:
        for session in plan:
            for request in session:
                if request.output_tokens <= 0 or not request.prompt_ids:
                    where = f"session {request.session_id} turn {request.turn}" if request.session_id else "a request"
                    raise BenchInputError(f"{where} has no prompt tokens or {request.output_tokens} output tokens")
        longest = max_context_tokens(plan)
        if max_model_len is not None and longest > max_model_len:
            raise BenchInputError(f"the longest request needs {longest} tokens (prompt plus output), "
                                  f"more than the server's max model length {max_model_len}")


async def _heartbeat(label: str, records: list[RequestRecord], total: int, started: float,
                     progress: ProgressFn) -> None:
    while True:
        await asyncio.sleep(HEARTBEAT_S)
        progress(RoundProgress(label=label, done=len(records), total=total, elapsed_s=time.perf_counter() - started))


async def run_round(session: aiohttp.ClientSession, url: str, model: str, plan: Plan,
                    concurrency: int, request_rate: float | None, arrival_seed: int, label: str = "round",
                    progress: ProgressFn | None = None,
                    from_arrival: bool = False) -> tuple[list[RequestRecord], float, ClientLoad]:
    """Sessions concurrently up to `concurrency`; a session's turns in order after think_ms. At a
    `request_rate` the sessions arrive on a Poisson schedule (each due at its own time, so the
    loop's lag does not add up), and a session's first request records when it was due;
    `from_arrival` times it from then (workload.latency_from)."""
    slots = asyncio.Semaphore(concurrency)
    records: list[RequestRecord] = []
    monitor = LoadMonitor()
    total = sum(len(turns) for turns in plan)

    async def run_session(turns: list[PlannedRequest], arrived: float | None) -> None:
        async with slots:
            for request in turns:
                if request.think_ms > 0:
                    await asyncio.sleep(request.think_ms / 1000)
                    arrived = arrived + request.think_ms / 1000 if arrived is not None else None
                records.append(await send_request(session, url, model, request, round_start, arrived, from_arrival))
                arrived = None  # a later turn follows its own answer: it waits for no slot

    arrivals = random.Random(arrival_seed)
    monitor.start()
    round_start = time.perf_counter()
    beat = asyncio.create_task(_heartbeat(label, records, total, round_start, progress)) if progress else None
    tasks = []
    due = round_start
    try:
        for turns in plan:
            if request_rate:
                due += arrivals.expovariate(request_rate)
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
            tasks.append(asyncio.create_task(run_session(turns, due if request_rate else None)))
        await asyncio.gather(*tasks)
    finally:  # cancelled at a time limit: no request or ticker outlives the round
        for task in [*tasks, *([beat] if beat else [])]:
            task.cancel()
    duration = time.perf_counter() - round_start
    load = await monitor.stop()
    records.sort(key=lambda r: r.start_s)
    return records, duration, load


def _write_records(records_dir: Path | None, name: str, records: list[RequestRecord]) -> None:
    if records_dir is None:
        return
    records_dir.mkdir(parents=True, exist_ok=True)
    (records_dir / f"requests-{name}.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))


def _first_error(records: list[RequestRecord]) -> str:
    return next((r.error for r in records if r.error), "no requests were sent")


async def measure_async(base_url: str, served_model: str, workload: Workload, vocab_size: int, repeats: int = 1,
                        warmups: int | None = None, num_prompts: int | None = None, records_dir: Path | None = None,
                        max_model_len: int | None = None,
                        sock_read_timeout_s: float = DEFAULT_SOCK_READ_TIMEOUT_S, timeout_s: float | None = None,
                        progress: ProgressFn | None = None,
                        max_total_s: float = DEFAULT_MAX_MEASUREMENT_S) -> Measurement:
    """Warm up (discarded), then `repeats` measured rounds on the hot server, within the measurement's
    limit: `timeout_s` where given, never past the workload's own (limits.measurement_limit_s)."""
    if repeats < 1:
        raise BenchInputError(f"repeats must be at least 1, got {repeats}")
    check_vocab(vocab_size)
    warm_count = default_warmups(workload.concurrency) if warmups is None else warmups
    plans = [round_plan(workload, f"repeat-{i + 1}", vocab_size, num_prompts) for i in range(repeats)]
    warm = warmup_plan(workload, vocab_size, warm_count)
    check_plans(plans + [warm], max_model_len)
    limit_s, why = measurement_limit_s([warm, *plans], workload.request_rate, max_total_s, timeout_s)
    # Whether the limit fired is the limit's own word (expired()), and its elapsed time is
    # read on the loop's clock: uvloop's timers run on a millisecond clock and may fire a
    # fraction of a millisecond before time.monotonic() says the limit has passed, which
    # turned an overtime into a bare TimeoutError now and then.
    loop = asyncio.get_running_loop()
    started = loop.time()
    limit = asyncio.timeout(limit_s)
    try:
        with heap_frozen():
            async with limit:
                rounds, loads, telemetry, measured = await _rounds(base_url, served_model, workload, warm, plans,
                                                                   records_dir, sock_read_timeout_s, progress)
    except TimeoutError as exc:
        if not limit.expired():
            raise  # a timeout of the requests' own, not the limit's
        raise BenchOvertime(loop.time() - started, limit_s, why) from exc
    if records_dir is not None:
        (records_dir / "client-load.json").write_text(json.dumps([load.model_dump() for load in loads], indent=1))
    return summarize(
        rounds, measured, seed=workload.seed, workload=measurement_signature(workload, plans[0], warm_count, vocab_size),
        theoretical_prefix_hit_pct=theoretical_prefix_hit_pct(plans[0]) if workload.kind == "agentic" else None,
        client_saturated=any(load.saturated for load in loads), source="hyperloom",
        client_loop_lag_p99_ms=max(load.loop_lag_p99_ms for load in loads),
        client_cpu_pct=max(load.cpu_pct for load in loads), telemetry=telemetry,
    )


async def _rounds(base_url: str, served_model: str, workload: Workload, warm: Plan, plans: list[Plan],
                  records_dir: Path | None, sock_read_timeout_s: float,
                  progress: ProgressFn | None,
                  ) -> tuple[list[RepeatMetrics], list[ClientLoad], Telemetry | None, list[RequestRecord]]:
    slo = workload.slo
    url = completions_url(base_url)
    async with open_session(sock_read_timeout_s) as session:
        if warm:
            records, duration, _ = await run_round(session, url, served_model, warm, workload.concurrency, None, 0,
                                                   "warm-up", progress)
            _write_records(records_dir, "warmup", records)
            check_round(records, "warm-up", url)
            _report(progress, "warm-up", records, duration, repeat_metrics(records, duration, slo))
        scraper = TelemetryScraper(session, base_url)  # the server's own counters over the measured rounds
        await scraper.start()
        try:
            rounds, loads, measured = await _measured_rounds(session, url, served_model, workload, plans,
                                                             records_dir, slo, progress)
        finally:
            telemetry = await scraper.stop()
    return rounds, loads, telemetry, measured


async def _measured_rounds(session, url: str, served_model: str, workload: Workload, plans: list[Plan],
                           records_dir: Path | None, slo, progress: ProgressFn | None,
                           ) -> tuple[list[RepeatMetrics], list[ClientLoad], list[RequestRecord]]:
    rounds, loads, measured = [], [], []
    for index, plan in enumerate(plans, start=1):
        label = f"repeat-{index}"
        records, duration, load = await run_round(session, url, served_model, plan, workload.concurrency,
                                                  workload.request_rate, round_seed(workload.seed, f"arrivals-{index}"),
                                                  label, progress, from_arrival=workload.latency_from == "arrival")
        _write_records(records_dir, label, records)
        check_round(records, f"repeat {index}", url)
        metrics = repeat_metrics(records, duration, slo, workload.request_rate)
        _report(progress, label, records, duration, metrics)
        rounds.append(metrics)
        loads.append(load)
        measured += records
    return rounds, loads, measured


def _report(progress: ProgressFn | None, label: str, records: list[RequestRecord], duration: float,
            metrics: RepeatMetrics) -> None:
    if progress is not None:
        progress(RoundProgress(label=label, done=len(records), total=len(records), elapsed_s=duration, metrics=metrics))


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop  # a faster loop when installed (vLLM pulls it in); plain asyncio otherwise
        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def _run(coro: Any) -> Any:
    """Run a measurement on a loop of its own. A SIGINT or SIGTERM meanwhile (a cancelled run)
    cancels it and is delivered again once the loop has stopped: an exception that a signal
    handler raises inside uvloop's loop is logged and dropped, so the cancel would be lost."""
    with asyncio.Runner(loop_factory=_new_loop) as runner:
        loop = runner.get_loop()
        task = loop.create_task(coro)
        with signals_deferred(on_signal=lambda _signum: loop.call_soon_threadsafe(task.cancel)):
            return loop.run_until_complete(task)


def measure(base_url: str, served_model: str, workload: Workload, vocab_size: int, repeats: int = 1,
            warmups: int | None = None, num_prompts: int | None = None, records_dir: Path | None = None,
            max_model_len: int | None = None, timeout_s: float | None = None,
            progress: ProgressFn | None = None,
            sock_read_timeout_s: float = DEFAULT_SOCK_READ_TIMEOUT_S,
            max_total_s: float = DEFAULT_MAX_MEASUREMENT_S) -> Measurement:
    """The synchronous face of measure_async, safe to call from inside a running loop."""
    coro = measure_async(base_url, served_model, workload, vocab_size, repeats=repeats, warmups=warmups,
                         num_prompts=num_prompts, records_dir=records_dir, max_model_len=max_model_len,
                         sock_read_timeout_s=sock_read_timeout_s, timeout_s=timeout_s, progress=progress,
                         max_total_s=max_total_s)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run(coro)
    # Called from async code: a loop cannot be nested, so the round gets a thread of its own.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_run, coro).result()
