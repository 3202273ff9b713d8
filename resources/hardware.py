"""Which hardware a target runs on, for its roofline.

A sim target's `--gpu`/`--tp` name a GPU of the table; a real engine on a GPU host uses
the detected card; a host without a GPU gets its memory bandwidth measured once.
"""

from __future__ import annotations

from hyperloom_assets.gpus import GPUS
from hyperloom_assets.roofline import Hardware, gpu_hardware
from hyperloom_assets.targets import Target
from resources.host_bandwidth import host_hardware


def _flag_value(args: list[str], flag: str) -> str | None:
    for index, token in enumerate(args):
        if token == flag and index + 1 < len(args):
            return args[index + 1]
        if token.startswith(flag + "="):
            return token.split("=", 1)[1]
    return None


def _table_name(detected: str) -> str | None:
    """The table entry a detected card's name contains ("NVIDIA H100 80GB HBM3" -> H100)."""
    for name in sorted(GPUS, key=len, reverse=True):
        if name.lower() in detected.lower():
            return name
    return None


def target_hardware(target: Target, host, weight_dtype: str) -> tuple[Hardware, list[str]]:
    """The hardware and any warnings (a detected card missing from the table)."""
    if target.engine == "sim":
        gpu = _flag_value(target.server_args, "--gpu") or "H100"
        tp = int(_flag_value(target.server_args, "--tp") or 1)
        return gpu_hardware(gpu, tp, weight_dtype), []
    warnings = []
    detected = host.gpu_names()
    if detected:
        name = _table_name(detected[0])
        tp = int(_flag_value(target.server_args, "--tensor-parallel-size") or _flag_value(target.server_args, "--tp") or 1)
        if name is not None:
            return gpu_hardware(name, tp, weight_dtype), []
        warnings.append(f"detected GPU {detected[0]!r} is not in the GPU table; using the host's measured bandwidth")
    return host_hardware(host.state_path() / "host"), warnings
