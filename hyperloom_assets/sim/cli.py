"""`hyperloom sim-serve` and `hyperloom sim-predict`.

Both parse harness flags and the flavor's engine args with one argparse parser, so an
unknown flag exits at once with `unrecognized arguments` (code 2) as a real engine does.
Imports stay light (no Dagster, torch or vLLM) so the server is up in about a second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

from hyperloom_assets.core.roofline.gpus import gpu_spec
from hyperloom_assets.sim.engine_args import (
    add_engine_args,
    add_harness_args,
    flavor_of,
    normalize_argv,
    output_salt,
    resolve_config,
)
from hyperloom_assets.sim.perf_model import DEFAULT_CALIBRATION, SimCalibration, SimConfigError


def _parser(prog: str, serving: bool, flavor: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, allow_abbrev=False)
    add_harness_args(parser, serving, flavor)
    if not serving:
        _add_workload_args(parser)
    add_engine_args(parser, flavor)
    return parser


def serve_parser(flavor: str = "vllm") -> argparse.ArgumentParser:
    return _parser("hyperloom sim-serve", True, flavor)


def predict_parser(flavor: str = "vllm") -> argparse.ArgumentParser:
    return _parser("hyperloom sim-predict", False, flavor)


def _parse(argv: list[str], prog: str, serving: bool) -> tuple[argparse.Namespace, str]:
    flavor = flavor_of(argv)
    parser = _parser(prog, serving, flavor)
    args = parser.parse_args(normalize_argv(argv, flavor))
    try:
        gpu_spec(args.gpu)
    except KeyError as exc:
        parser.error(f"argument --gpu: {exc.args[0]}")
    if args.time_scale <= 0:
        parser.error("argument --time-scale: must be positive")
    if args.engine_version is not None:
        from hyperloom_assets.sim.physics import parse_version
        try:
            parse_version(args.engine_version)
        except ValueError as exc:
            parser.error(f"argument --engine-version: {exc}")
    args.calibration_named = args.calibration  # what --calibration said; the parameters replace it
    args.calibration = _calibration(parser, args, flavor)
    return args, flavor


def _calibration(parser: argparse.ArgumentParser, args: argparse.Namespace, flavor: str) -> SimCalibration:
    """The profile's parameters; a bad file or a profile of another GPU stops the launch before it starts."""
    if args.calibration is None:
        return DEFAULT_CALIBRATION
    from hyperloom_assets.sim.calibration import CalibrationError, profile_for

    try:
        profile = profile_for(args.calibration, gpu_spec(args.gpu).name, flavor)
    except CalibrationError as exc:
        parser.error(f"argument --calibration: {exc}")
    return DEFAULT_CALIBRATION if profile is None else profile.parameters


def _add_workload_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workload", choices=["random", "shared_prefix", "agentic"], default="random",
                        help="the workload to predict, as `hyperloom bench --workload` (default random)")
    parser.add_argument("--isl", type=int, default=None, help="input tokens per prompt")
    parser.add_argument("--osl", type=int, default=None, help="output tokens per request")
    parser.add_argument("--prefix-len", type=int, default=0, help="tokens of the shared prefix (shared_prefix)")
    parser.add_argument("--trace", type=Path, default=None, help="the JSONL trace (agentic)")
    parser.add_argument("--concurrency", type=int, default=1, help="requests in flight at once (default 1)")
    parser.add_argument("--num-prompts", type=int, default=None, help="requests per repeat (default: the adaptive rule)")
    parser.add_argument("--request-rate", type=float, default=None, help="Poisson arrivals, requests/s (default: all at once)")
    parser.add_argument("--repeats", type=int, default=1, help="predicted repeats (default 1)")
    parser.add_argument("--warmups", type=int, default=None, help="warm-up requests before each repeat")


def _model_dir(args: argparse.Namespace, flavor: str) -> Path:
    return Path(args.model_path if flavor == "sglang" else args.model)


def _fail(message: str) -> int:
    print(f"ERROR: {message}", file=sys.stderr, flush=True)
    return 1


def serve_main(argv: list[str]) -> int:
    args, flavor = _parse(argv, "hyperloom sim-serve", serving=True)
    from hyperloom_assets.sim.build import build_engine
    from hyperloom_assets.sim.devices import DeviceClaimError, claim_devices, free_devices
    from hyperloom_assets.sim.launch_record import launch_record, log_line
    from hyperloom_assets.sim.launch_script import LaunchOffset, take_entry

    scripted = take_entry()  # a test's scripted launch (launch_script.py); plain otherwise
    if scripted.crash:
        return _fail("RuntimeError: this launch was scripted to crash at startup")

    gpu = gpu_spec(args.gpu)
    config = resolve_config(args, flavor, gpu.memory_gb)
    record = launch_record(args, config)
    if record is not None:
        print(record, flush=True)
    model_dir = _model_dir(args, flavor)
    if not (model_dir / "config.json").is_file():
        return _fail(f"ValueError: no config.json in model folder {model_dir}")
    try:
        devices, held = claim_devices(args.tp)  # held open until the server exits
    except DeviceClaimError as exc:
        return _fail(str(exc))
    if devices:
        print(log_line(config, f"Holding emulated devices {devices} (CUDA_VISIBLE_DEVICES), pid {os.getpid()}",
                       "devices.py:1"), flush=True)
    try:
        engine = build_engine(model_dir, gpu, config, tp=args.tp, seed=args.seed, noise_pct=args.noise_pct,
                              record_steps=False, calibration=args.calibration, engine_version=args.engine_version)
    except SimConfigError as exc:
        return _fail(f"ValueError: {exc}")
    engine.noise = LaunchOffset(engine.noise, scripted.speed)
    print(log_line(config, f"GPU KV cache size: {engine.kv_tokens:,} tokens", "kv_cache_utils.py:1"), flush=True)
    print(log_line(config, f"Maximum concurrency for {engine.max_model_len:,} tokens per request: "
                           f"{engine.kv_tokens / engine.max_model_len:.2f}x", "kv_cache_utils.py:2"), flush=True)
    if scripted.fault is not None:
        args.fault, args.fault_after_requests = scripted.fault, scripted.fault_after_requests
    time.sleep(scripted.startup_delay_s)  # a scripted slow start, before the port is bound
    asyncio.run(_serve(engine, config, args, model_dir, output_salt(argv, flavor, args.alter_outputs_with)))
    free_devices(devices, held)
    return 0


async def _serve(engine, config, args: argparse.Namespace, model_dir: Path, salt: str) -> None:  # noqa: ANN001
    from aiohttp import web

    from hyperloom_assets.sim.calibration import describe_prediction
    from hyperloom_assets.sim.faults import Fault
    from hyperloom_assets.sim.launch_record import log_line
    from hyperloom_assets.sim.profiler import SimProfiler
    from hyperloom_assets.sim.prompts import PromptTokenizer
    from hyperloom_assets.sim.server import SimServer

    tokenizer = PromptTokenizer(model_dir, config.tokenizer)
    profiler = SimProfiler(engine.model, Path(args.profile_dir)) if args.profile_dir else None
    server = SimServer(engine, config, tokenizer, args.time_scale, args.stream_interval_ms / 1000.0, salt,
                       Fault(kind=args.fault, after_requests=args.fault_after_requests), profiler)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.add_routes(server.routes())
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, args.host, args.port, backlog=4096).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    engine_task = asyncio.create_task(server.run_engine())
    print(log_line(config, f"Starting sim API server ({config.flavor} flavor, {args.gpu}, tp {args.tp}, "
                           f"time scale {args.time_scale:g}) on http://{args.host}:{args.port}", "api_server.py:1"),
          flush=True)
    print(log_line(config, "Predicted by " + describe_prediction(args.calibration_named, gpu_spec(args.gpu).name,
                                                                 config.flavor, args.engine_version), "sim.py:1"),
          flush=True)
    print("INFO:     Application startup complete.", flush=True)
    if config.flavor == "atom":
        print(log_line(config, "Server started successfully and ready to accept requests"), flush=True)
    await stop.wait()
    engine_task.cancel()
    await runner.cleanup()


def predict_main(argv: list[str]) -> int:
    args, flavor = _parse(argv, "hyperloom sim-predict", serving=False)
    from hyperloom_assets.core.config.targets import Workload
    from hyperloom_assets.sim.engine_args import split_harness_args
    from hyperloom_assets.sim.predict import predict

    try:
        workload = Workload(kind=args.workload, isl=args.isl, osl=args.osl, prefix_len=args.prefix_len,
                            trace=args.trace, concurrency=args.concurrency, num_prompts=args.num_prompts,
                            request_rate=args.request_rate, seed=args.seed)
    except ValueError as exc:
        return _fail(f"bad workload: {exc}")
    missing = workload.missing_fields()
    if missing:
        return _fail("; ".join(f"{field}: {expected}" for field, expected in missing))
    _, engine_argv = split_harness_args(normalize_argv(argv, flavor), flavor)
    engine_argv = _drop_workload_flags(engine_argv)
    try:
        measurement = predict(_model_dir(args, flavor), args.gpu, engine_argv, workload, flavor=flavor, tp=args.tp,
                              seed=args.seed, noise_pct=args.noise_pct, repeats=args.repeats, warmups=args.warmups,
                              calibration=args.calibration, engine_version=args.engine_version)
    except SimConfigError as exc:
        return _fail(f"ValueError: {exc}")
    print(json.dumps(measurement.flat(), indent=1))
    return 0


WORKLOAD_FLAGS = ("--workload", "--isl", "--osl", "--prefix-len", "--trace", "--concurrency", "--num-prompts",
                  "--request-rate", "--repeats", "--warmups")


def _drop_workload_flags(argv: list[str]) -> list[str]:
    kept, skip = [], False
    for token in argv:
        if skip:
            skip = False
            continue
        name = token.split("=", 1)[0]
        if name in WORKLOAD_FLAGS:
            skip = "=" not in token
            continue
        kept.append(token)
    return kept
