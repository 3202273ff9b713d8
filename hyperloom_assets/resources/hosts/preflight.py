"""Preflight: is this host free to serve? GPU memory, foreign servers, ports.

The GPU tools' outputs are parsed by pure functions, tested on real captured samples
(tests/fixtures/gpu_tools/); `read_gpu_memory` runs whichever tool the host has.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import psutil

from hyperloom_assets.core.engines import known_engines

MIB = 1024 * 1024
BUSY_GPU_FRACTION = 0.01  # a card with 1% or more of its memory in use is busy

NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=index,name,memory.used,memory.total", "--format=csv,noheader,nounits"]
AMD_SMI_QUERY = ["amd-smi", "metric", "--mem-usage", "--json"]
ROCM_SMI_QUERY = ["rocm-smi", "--showmeminfo", "vram", "--showproductname", "--json"]


@dataclass(frozen=True)
class GpuMemory:
    index: int
    name: str
    used_mib: float
    total_mib: float

    @property
    def used_fraction(self) -> float:
        return self.used_mib / self.total_mib if self.total_mib > 0 else 0.0


class GpuToolOutputError(ValueError):
    """A GPU tool printed something its parser cannot read."""


def _number(text: str) -> float:
    """`18324`, `18324 MiB`: the leading number."""
    word = text.strip().split()[0] if text.strip() else ""
    try:
        return float(word)
    except ValueError:
        raise GpuToolOutputError(f"not a number: {text!r}") from None


def parse_nvidia_smi(text: str) -> list[GpuMemory]:
    """`nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv[,noheader,nounits]`."""
    gpus = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if not line.strip() or cells[0] == "index":
            continue  # blank or the header row (when `noheader` was left off)
        if len(cells) < 4:
            raise GpuToolOutputError(f"nvidia-smi row has {len(cells)} fields, expected 4: {line!r}")
        # Columns in the queried order; any further columns (e.g. utilization) are ignored.
        index, name, used, total = cells[:4]
        gpus.append(GpuMemory(index=int(_number(index)), name=name, used_mib=_number(used), total_mib=_number(total)))
    return gpus


def parse_rocm_smi(text: str) -> list[GpuMemory]:
    """`rocm-smi --showmeminfo vram [--showproductname] --json`: {"card0": {... (B) ...}}."""
    data = _json_after_banner(text, "{")
    if not isinstance(data, dict):
        raise GpuToolOutputError("rocm-smi JSON is not an object")
    gpus = []
    for key, card in data.items():
        if not key.startswith("card") or not isinstance(card, dict):
            continue  # e.g. "system"
        try:
            total = float(card["VRAM Total Memory (B)"]) / MIB
            used = float(card["VRAM Total Used Memory (B)"]) / MIB
        except (KeyError, ValueError) as error:
            raise GpuToolOutputError(f"rocm-smi {key}: no readable VRAM fields ({error})") from None
        name = card.get("Card Series") or card.get("Card series") or card.get("Device Name") or key
        gpus.append(GpuMemory(index=int(key[4:]), name=str(name), used_mib=used, total_mib=total))
    return sorted(gpus, key=lambda gpu: gpu.index)


def parse_amd_smi(text: str) -> list[GpuMemory]:
    """`amd-smi metric --mem-usage --json`: a list of GPUs, or {"gpu_data": [...]} (newer)."""
    data = _json_after_banner(text, "[{")
    rows = data.get("gpu_data") if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise GpuToolOutputError("amd-smi JSON has no GPU list")
    gpus = []
    for row in rows:
        try:
            usage = row["mem_usage"]
            used = _amd_mib(usage["used_vram"])
            total = _amd_mib(usage["total_vram"])
            index = int(row["gpu"])
        except (KeyError, TypeError, ValueError) as error:
            raise GpuToolOutputError(f"amd-smi row without readable mem_usage ({error!r})") from None
        gpus.append(GpuMemory(index=index, name=f"gpu{index}", used_mib=used, total_mib=total))
    return sorted(gpus, key=lambda gpu: gpu.index)


_UNIT_MIB = {"B": 1 / MIB, "KB": 1 / 1024, "MB": 1.0, "MIB": 1.0, "GB": 1024.0, "GIB": 1024.0}


def _amd_mib(field: Any) -> float:
    """amd-smi gives {"value": 202, "unit": "MB"} (its MB are MiB) or a bare number."""
    if isinstance(field, dict):
        factor = _UNIT_MIB.get(str(field.get("unit", "MB")).upper())
        if factor is None:
            raise ValueError(f"unknown unit {field.get('unit')!r}")
        return float(field["value"]) * factor
    return float(field)


def _json_after_banner(text: str, openers: str) -> Any:
    """The JSON document, skipping banner lines the AMD tools print first (WARNING: ...)."""
    starts = [at for at in (text.find(opener) for opener in openers) if at >= 0]
    if not starts:
        raise GpuToolOutputError("no JSON in the tool's output")
    try:
        return json.loads(text[min(starts):])
    except json.JSONDecodeError as error:
        raise GpuToolOutputError(f"unreadable JSON: {error}") from None


Runner = Callable[[list[str]], str]


def _run_tool(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    return done.stdout


def read_gpu_memory(run: Runner = _run_tool, which: Callable[[str], str | None] = shutil.which,
                    ) -> tuple[str, list[GpuMemory]] | None:
    """(tool, per-GPU memory) from the first GPU tool this host has; None on a CPU host."""
    tools = ((NVIDIA_SMI_QUERY, parse_nvidia_smi), (AMD_SMI_QUERY, parse_amd_smi), (ROCM_SMI_QUERY, parse_rocm_smi))
    for argv, parse in tools:
        if which(argv[0]):
            return argv[0], parse(run(argv))
    return None


def busy_gpus(gpus: Iterable[GpuMemory], limit: float = BUSY_GPU_FRACTION) -> list[GpuMemory]:
    return [gpu for gpu in gpus if gpu.used_fraction >= limit]


def _serving_commands() -> set[tuple[str, ...]]:
    """Every known engine's entry modules and console commands (hyperloom_assets/core/engines/)."""
    return set().union(*(spec.serving_commands() for spec in known_engines().values()))


def is_serving_cmdline(cmdline: list[str]) -> bool:
    """A server of a known engine (vLLM, SGLang, ATOM, the sim), by its argv.

    A lone entry module counts wherever it stands (`python -m module`); a command of
    several words counts near the start, its first word as a path or a module name.
    """
    commands = _serving_commands()
    if any((token,) in commands for token in cmdline):
        return True
    for at, token in enumerate(cmdline[:4]):
        for command in commands:
            rest = command[1:]
            if rest and command[0] in (token, Path(token).name) and tuple(cmdline[at + 1 : at + 1 + len(rest)]) == rest:
                return True
    return False


@dataclass(frozen=True)
class ForeignProcess:
    pid: int
    cmdline: list[str]

    def describe(self) -> str:
        return f"pid {self.pid}: {' '.join(self.cmdline)[:200]}"


def find_serving_processes(exclude_pids: Iterable[int] = ()) -> list[ForeignProcess]:
    """Serving processes on this host, except the given ones (and this process)."""
    skip = set(exclude_pids) | {os.getpid()}
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if proc.info["pid"] not in skip and is_serving_cmdline(cmdline):
            found.append(ForeignProcess(pid=proc.info["pid"], cmdline=list(cmdline)))
    return found


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def allocate_port(host: str = "127.0.0.1") -> int:
    """A port the kernel says is free now (the server binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])
