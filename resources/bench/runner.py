"""The measurement protocol's client side: a warm-up round, then measured repeats.

No Dagster here, so `hyperloom bench` starts fast; resources/bench/client.py wraps this
in a ConfigurableResource. Everything wrong with the input (a bad trace, a prompt that
cannot fit the server) is raised before the first request is sent.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import random
import time
from pathlib import Path
from typing import Any

import aiohttp

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.measurement.measurement import Measurement, RequestRecord
from hyperloom_assets.core.measurement.metrics import repeat_metrics, summarize
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
from hyperloom_assets.core.roofline.model_shape import load_shape
from hyperloom_assets.resources.bench.monitor import ClientLoad, LoadMonitor
from hyperloom_assets.resources.bench.telemetry import TelemetryScraper
from hyperloom_assets.resources.bench.stream import (
    DEFAULT_SOCK_READ_TIMEOUT_S,
    completions_url,
    open_session,
    send_request,
)


class BenchInputError(ValueError):
    """A workload the client refuses before sending anything; the message says why."""


class BenchRunError(RuntimeError):
    """A round in which no request succeeded: the server or the model name is wrong."""


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


async def run_round(session: aiohttp.ClientSession, url: str, model: str, plan: Plan,
                    concurrency: int, request_rate: float | None, arrival_seed: int) -> tuple[list[RequestRecord], float, ClientLoad]:
    """Sessions concurrently up to `concurrency`; a session's turns in order after think_ms."""
    slots = asyncio.Semaphore(concurrency)
    records: list[RequestRecord] = []
    monitor = LoadMonitor()

    async def run_session(turns: list[PlannedRequest]) -> None:
        async with slots:
            for request in turns:
                if request.think_ms > 0:
                    await asyncio.sleep(request.think_ms / 1000)
                records.append(await send_request(session, url, model, request, round_start))

    arrivals = random.Random(arrival_seed)
    monitor.start()
    round_start = time.perf_counter()
    tasks = []
    for turns in plan:
        if request_rate:
            await asyncio.sleep(arrivals.expovariate(request_rate))
        tasks.append(asyncio.create_task(run_session(turns)))
    await asyncio.gather(*tasks)
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
                        sock_read_timeout_s: float = DEFAULT_SOCK_READ_TIMEOUT_S) -> Measurement:
    """Warm up (discarded), then `repeats` measured rounds on the hot server."""
    if repeats < 1:
        raise BenchInputError(f"repeats must be at least 1, got {repeats}")
    check_vocab(vocab_size)
    warm_count = default_warmups(workload.concurrency) if warmups is None else warmups
    plans = [round_plan(workload, f"repeat-{i + 1}", vocab_size, num_prompts) for i in range(repeats)]
    warm = warmup_plan(workload, vocab_size, warm_count)
    check_plans(plans + [warm], max_model_len)
    slo = (workload.slo.ttft_ms, workload.slo.tpot_ms) if workload.slo else None
    url = completions_url(base_url)
    rounds, loads = [], []
    async with open_session(sock_read_timeout_s) as session:
        if warm:
            records, _, _ = await run_round(session, url, served_model, warm, workload.concurrency, None, 0)
            _write_records(records_dir, "warmup", records)
            if not any(r.ok for r in records):
                raise BenchRunError(f"every warm-up request failed against {url}: {_first_error(records)}")
        scraper = TelemetryScraper(session, base_url)
        await scraper.start()
        for index, plan in enumerate(plans, start=1):
            records, duration, load = await run_round(session, url, served_model, plan, workload.concurrency,
                                                      workload.request_rate, round_seed(workload.seed, f"arrivals-{index}"))
            _write_records(records_dir, f"repeat-{index}", records)
            metrics = repeat_metrics(records, duration, slo)
            if metrics.completed == 0:
                raise BenchRunError(f"every request of repeat {index} failed against {url}: {_first_error(records)}")
            rounds.append(metrics)
            loads.append(load)
        telemetry = await scraper.stop()
    if records_dir is not None:
        (records_dir / "client-load.json").write_text(json.dumps([load.model_dump() for load in loads], indent=1))
    return summarize(
        rounds, seed=workload.seed, workload=measurement_signature(workload, plans[0], warm_count, vocab_size),
        theoretical_prefix_hit_pct=theoretical_prefix_hit_pct(plans[0]) if workload.kind == "agentic" else None,
        client_saturated=any(load.saturated for load in loads), source="hyperloom",
        client_loop_lag_p99_ms=max(load.loop_lag_p99_ms for load in loads),
        client_cpu_pct=max(load.cpu_pct for load in loads), telemetry=telemetry,
    )


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop  # a faster loop when installed (vLLM pulls it in); plain asyncio otherwise
        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def _run(coro: Any) -> Any:
    with asyncio.Runner(loop_factory=_new_loop) as runner:
        return runner.run(coro)


def measure(base_url: str, served_model: str, workload: Workload, vocab_size: int, repeats: int = 1,
            warmups: int | None = None, num_prompts: int | None = None, records_dir: Path | None = None,
            max_model_len: int | None = None) -> Measurement:
    """The synchronous face of measure_async, safe to call from inside a running loop."""
    coro = measure_async(base_url, served_model, workload, vocab_size, repeats=repeats, warmups=warmups,
                         num_prompts=num_prompts, records_dir=records_dir, max_model_len=max_model_len)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run(coro)
    # Called from async code: a loop cannot be nested, so the round gets a thread of its own.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_run, coro).result()
