"""Which hardware a target runs on, for its roofline.

An engine that names its GPU (the sim's `--gpu`) gets that GPU of the table; a real engine on a GPU host uses
the detected card; a host without a GPU gets its memory bandwidth measured once. A GPU counts as many times as one
server takes devices, in the layout its engine's own flags give (core/fleet/slots.py: `--tp-size`, `-tp`, pipeline and
data parallel alike), the one device count a launch has.
"""

from __future__ import annotations

from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.fleet.slots import Layout, launch_layout
from hyperloom_assets.core.roofline.gpus import GPUS
from hyperloom_assets.core.roofline.roofline import Hardware, gpu_hardware
from hyperloom_assets.resources.hosts.bandwidth import host_hardware
from hyperloom_assets.resources.hosts.host import Host


def _table_name(detected: str) -> str | None:
    """The table entry a detected card's name contains ("NVIDIA H100 80GB HBM3" -> H100)."""
    for name in sorted(GPUS, key=len, reverse=True):
        if name.lower() in detected.lower():
            return name
    return None


def _of_layout(gpu: str, layout: Layout, weight_dtype: str) -> Hardware:
    return gpu_hardware(gpu, layout.tensor, weight_dtype, pipeline_parallel=layout.pipeline, data_parallel=layout.data)


def target_hardware(target: Target, host: Host, weight_dtype: str) -> tuple[Hardware, list[str]]:
    """The hardware and any warnings (a detected card missing from the table)."""
    layout = launch_layout(target.engine, target.server_args)
    named = engine_for(target.engine).named_gpu(target.server_args)
    if named is not None:
        gpu, _ = named  # its size flag is the layout's tensor size (the sim's DeviceFlags)
        return _of_layout(gpu, layout, weight_dtype), []
    warnings = []
    detected = host.gpu_names()
    if detected:
        name = _table_name(detected[0])
        if name is not None:
            return _of_layout(name, layout, weight_dtype), []
        warnings.append(f"detected GPU {detected[0]!r} is not in the GPU table; using the host's measured bandwidth")
    return host_hardware(host.state_path() / "host"), warnings
