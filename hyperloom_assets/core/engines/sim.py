"""The sim: the project's own engine, the stand-in for what this machine cannot run. Pure code.

`hyperloom sim-serve` (hyperloom_assets/sim/) speaks one real engine's flags and log
lines, chosen by its harness flag `--flavor vllm|sglang|atom`; everything that depends
on what a target speaks (evidence, invariant 6 (docs/design.md), the seed grid, accuracy risks) follows
that flavor's module. Its own harness flags (`--gpu`, `--time-scale`, ...) are never
engine args (docs/design.md, invariant 3); they say what a real engine's host would: the GPU
it models, how much faster than that GPU it runs, and what its launch noise depends on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hyperloom_assets.core.engines import atom, sglang, vllm
from hyperloom_assets.core.engines.evidence import parse_sglang_server_args, parse_vllm_non_default_args
from hyperloom_assets.core.engines.spec import (
    CliParser,
    DeviceFlags,
    Distribution,
    EngineSpec,
    Entry,
    Profiler,
    ProfileSource,
    Startup,
)
from hyperloom_assets.core.roofline.gpus import gpu_spec
from hyperloom_assets.sim.calibration import CalibrationError, describe_prediction, is_profile_path, profile_for
from hyperloom_assets.sim.physics import parse_version
from hyperloom_assets.sim.engine_args import (
    FLAVORS,
    engine_parser,
    flavor_of,
    harness_flags,
    http_port_flag,
    split_harness_args,
)
from hyperloom_assets.sim.timescale import time_scale_of

# The engines the sim's flavors imitate: a new flavor is a module here and code in the sim.
FLAVOR_ENGINES: dict[str, EngineSpec] = {spec.name: spec for spec in (vllm.ENGINE, sglang.ENGINE, atom.ENGINE)}
HARNESS_FLAGS: frozenset[str] = frozenset().union(*(harness_flags(flavor) for flavor in FLAVORS))


def flavor_engine(server_args: list[str]) -> EngineSpec:
    return FLAVOR_ENGINES[flavor_of(server_args)]


def parse_evidence(log_text: str) -> dict[str, Any] | None:
    """Whichever record the flavor printed (the ATOM flavor prints none)."""
    return parse_vllm_non_default_args(log_text) or parse_sglang_server_args(log_text)


def prefix_cache_off(server_args: list[str], evidence: dict[str, Any] | None, version: str | None) -> str | None:
    """The flavor's rule; the sim's version is not the imitated engine's, so it is not passed."""
    return flavor_engine(server_args).prefix_cache_off(server_args, evidence, None)


def port_flag(server_args: list[str]) -> str:
    return http_port_flag(flavor_of(server_args))


def profiler_args(trace_dir: str) -> list[str]:
    """The sim's harness flag: its performance model's time breakdown, as a Chrome trace (sim/profiler.py)."""
    return ["--profile-dir", trace_dir]


def named_gpu(server_args: list[str]) -> tuple[str, int]:
    """The GPU of the table its `--gpu`/`--tp` name, for the roofline."""
    harness, _ = split_harness_args(server_args)
    return str(harness.get("--gpu", "H100")), int(harness.get("--tp", 1))


def noise_identity(version: str, server_args: list[str]) -> str:
    """Its version and its harness flags: its launch noise is one of them."""
    harness, _ = split_harness_args(server_args, flavor_of(server_args))
    return version + " " + " ".join(f"{k}={v}" for k, v in sorted(harness.items()))


def predictor_of(server_args: list[str]) -> str:
    """Its performance model, the calibration profile its `--calibration` names, if any, and the
    engine row its `--engine-version` picks."""
    flavor = flavor_of(server_args)
    harness, _ = split_harness_args(server_args, flavor)
    gpu, named = str(harness.get("--gpu", "H100")), harness.get("--calibration")
    try:
        gpu = gpu_spec(gpu).name
    except KeyError:
        pass  # the launch refuses it; the description keeps the name as given
    version = harness.get("--engine-version")
    return describe_prediction(named if isinstance(named, str) else None, gpu, flavor,
                               version if isinstance(version, str) else None)


def harness_problems(server_args: list[str]) -> list[str]:
    """What `sim-serve` would refuse in its harness flags, found before anything is launched:
    an unknown --gpu, a --tp or --time-scale that is not a positive number, a --calibration that
    names no packaged profile or a readable one of another GPU (a file this machine does not
    hold is left to the host that serves), an --engine-version that is not dotted numbers."""
    flavor = flavor_of(server_args)
    harness, _ = split_harness_args(server_args, flavor)
    problems = [f"{flag} {harness[flag]}: expected a positive number" for flag, kind in (("--tp", int),
                                                                                         ("--time-scale", float))
                if flag in harness and not _positive(harness[flag], kind)]
    if "--engine-version" in harness:
        try:
            parse_version(str(harness["--engine-version"]))
        except ValueError as exc:
            problems.append(f"--engine-version: {exc}")
    try:
        gpu = gpu_spec(str(harness.get("--gpu", "H100"))).name
    except KeyError as exc:
        return problems + [f"--gpu: {exc.args[0]}"]
    named = harness.get("--calibration")
    if not isinstance(named, str) or (is_profile_path(named) and not Path(named).is_file()):
        return problems
    try:
        profile_for(named, gpu, flavor)
    except CalibrationError as exc:
        problems.append(f"--calibration: {exc}")
    return problems


def _positive(value: object, kind: type) -> bool:
    try:
        return kind(value) > 0
    except (TypeError, ValueError):
        return False


def accepted_flags(flavor: str | None) -> frozenset[str]:
    """The long flags the flavor's parser takes: a grid value it cannot take would only fail its launch."""
    parser = engine_parser(flavor or "vllm", "sim")
    return frozenset(o for action in parser._actions for o in action.option_strings if o.startswith("--") and o != "--help")


ENGINE = EngineSpec(
    name="sim",
    listed_at=3,
    entry=Entry(module="hyperloom_assets.cli", subcommand=("sim-serve",)),
    model_flag="--model",
    port_flag="--port",
    port_flag_of=port_flag,
    launcher_aliases=("--model-path", "--server-port"),
    console_commands=(("hyperloom", "sim-serve"),),
    # A release of the sim packaged on its own wins over the project's copy in its env.
    distributions=(
        Distribution(name="hyperloom-sim-engine", ships="hyperloom_sim_engine/__main__.py",
                     entry=Entry(module="hyperloom_sim_engine")),
        Distribution(name="hyperloom-assets", ships="hyperloom_assets/sim/server.py"),
    ),
    release_distribution="hyperloom-sim-engine",
    source_import_root=".",
    package="hyperloom_assets",
    parse_evidence=parse_evidence,
    prefix_cache_off=prefix_cache_off,
    fatal_markers=(),
    startup=Startup(cold_s=60.0),
    # A model's env knob is judged by the prefixes of the flavor the sim speaks
    # (core/proposer/guard.py), served, and changes nothing the sim models.
    env_prefixes=(),
    # What it does read: its test switches (sim/launch_script.py, sim/devices.py).
    host_env_prefixes=("HYPERLOOM_SIM_",),
    flavor_of=flavor_of,
    accepted_flags_of=accepted_flags,
    harness_flags=HARNESS_FLAGS,
    time_scale_of=time_scale_of,
    named_gpu=named_gpu,
    noise_identity=noise_identity,
    predictor_of=predictor_of,
    harness_problems=harness_problems,
    cli_parser=CliParser(builder="hyperloom_assets.sim.engine_args:add_engine_args"),
    source_context=("sim/perf_model.py",),
    # Its profiler only records once started (sim/profiler.py); profiler_configured.py: no slowdown.
    # It reads its performance model, in simulated time, which has no caches to warm.
    profiler=Profiler(server_args=profiler_args, stop_timeout_s=30.0, free_when_idle=True, warms_up=False,
                      source=ProfileSource(evidence="sim performance model", report="the sim's performance model",
                                           time_unit="simulated ms")),
    devices=DeviceFlags(tensor=("--tp",)),  # its harness's tensor-parallel degree, one device per rank
)
