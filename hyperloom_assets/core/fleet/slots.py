"""Slots: the accelerators one server takes on a host that declares its GPUs. Pure code.

A host of the hosts file may declare its accelerators (`gpus: [0, 1, 2, 3]`). A launch
then takes as many of them as its engine's own flags ask for (tensor x pipeline x data
parallel sizes, `devices_per_launch`), a *slot*: a set of that many devices, chosen so
they share the fastest link the host reports (`nvidia-smi topo -m`, parsed here), and a
share of the host's CPUs of its own (each declared device owns an equal, contiguous
share; a slot gets its devices' shares). The server sees only its devices, through the
variable its vendor's runtime reads (`device_env`). On a CPU-only host the declared
"devices" are only CPU sets: two slots never share a core.

Leases per device (resources/store/leases.py, keys from leases.device_lease_key) keep two
runs off the same device; a run holds the devices of its slot for its whole length.
"""

from __future__ import annotations

import itertools
import re
from typing import Literal

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.models import Frozen
from hyperloom_assets.core.planning.variants import parse_args

Vendor = Literal["nvidia", "amd", "none"]

# How close two GPUs are, best first, from `nvidia-smi topo -m`'s legend: NV# (bonded
# NVLinks, more is better), PIX (one PCIe bridge), PXB (several), PHB (a host bridge),
# NODE (host bridges within a NUMA node), SYS / SOC (across NUMA nodes).
_PCIE_RANKS = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5, "SOC": 5}
UNKNOWN_LINK = 6
NVLINK = re.compile(r"^NV(\d+)$")
GPU = re.compile(r"GPU\d+")
ANSI = re.compile(r"\x1b\[\d+m")  # collect_env reports underline the header


class SlotError(ValueError):
    """No slot can be made: the launch needs more devices than the host declares, or a
    size flag is not a positive whole number. The message names the field."""


class Slot(Frozen):
    """Devices a run holds on a host, and the CPUs that go with them."""
    host: str
    devices: tuple[int, ...]
    cpus: tuple[int, ...] | None = None  # None: every CPU the run may use (a host without declared GPUs)
    vendor: Vendor = "none"

    def describe(self) -> str:
        cpus = f", CPUs {list(self.cpus)}" if self.cpus else ""
        return f"host {self.host!r} devices {list(self.devices)}{cpus}"


def _size(args: dict[str, str | None], flags: tuple[str, ...], engine: str) -> int:
    for flag in flags:
        if flag in args:
            value = args[flag]
            try:
                size = int(value or "")
            except ValueError:
                size = 0
            if size < 1:
                raise SlotError(f"server_args {flag} {value!r}: expected a positive whole number of devices ({engine})")
            return size
    return 1


class Layout(Frozen):
    """How one server spreads over its devices: tensor x pipeline x data-parallel ranks."""
    tensor: int = 1
    pipeline: int = 1
    data: int = 1  # replicas that each hold the model; 1 where they split the tensor group (DP attention)

    @property
    def devices(self) -> int:
        return self.tensor * self.pipeline * self.data

    @property
    def weight_passes(self) -> int:
        """How many groups of the batch each read their own pass over the weights in one decode
        step: a data-parallel replica reads its own copy, a pipeline micro-batch its stages'."""
        return self.pipeline * self.data

    def describe(self) -> str:
        """The sizes above one ("TP2 x PP2"); "TP1" for a single device."""
        sizes = [f"{name}{size}" for name, size in (("TP", self.tensor), ("PP", self.pipeline), ("DP", self.data))
                 if size > 1]
        return " x ".join(sizes) or "TP1"


def launch_layout(engine: str, server_args: list[str]) -> Layout:
    """One server's parallel sizes, from the engine's own size flags (every spelling it takes)."""
    spec = engine_for(engine)
    flags = spec.devices
    args = parse_args(server_args, spec.boolean_flags)
    tensor, pipeline = _size(args, flags.tensor, engine), _size(args, flags.pipeline, engine)
    data = _size(args, flags.data, engine)
    if flags.data_within_tensor and flags.data_within_tensor in args:
        data = 1  # the data-parallel ranks split the tensor-parallel group's devices
    return Layout(tensor=tensor, pipeline=pipeline, data=data)


def devices_per_launch(engine: str, server_args: list[str]) -> int:
    """How many accelerators one server of these args takes: the one device count of a launch,
    for its slot, its roofline and its throughput per GPU."""
    return launch_layout(engine, server_args).devices


def link_rank(cell: str) -> float:
    """Lower is closer: NVLink beats every PCIe path, and more bonded links beat fewer."""
    cell = cell.strip()
    bonded = NVLINK.match(cell)
    if bonded:
        return 1 / (1 + int(bonded.group(1)))  # NV18 < NV4 < 1 (PIX)
    return _PCIE_RANKS.get(cell, UNKNOWN_LINK)


def _cells(line: str) -> list[str]:
    return [ANSI.sub("", cell).strip() for cell in line.split("\t")]


def parse_nvidia_topo(text: str) -> dict[tuple[int, int], str]:
    """`nvidia-smi topo -m`: (GPU i, GPU j) -> the link between them, GPU rows and columns only
    (NICs, CPU and NUMA affinity ignored); {} when the text holds no matrix."""
    rows = [_cells(line) for line in text.splitlines() if line.strip()]
    header = next((cells for cells in rows if "GPU0" in cells and "X" not in cells), None)
    if header is None:
        return {}
    if header[0]:  # printed without the leading tab: line it up with the rows' label column
        header = ["", *header]
    columns = {at: int(cell[3:]) for at, cell in enumerate(header) if GPU.fullmatch(cell)}
    links: dict[tuple[int, int], str] = {}
    for cells in rows:
        if not GPU.fullmatch(cells[0]) or "X" not in cells:
            continue
        row = int(cells[0][3:])
        links.update({(row, column): cells[at] for at, column in columns.items() if at < len(cells) and column != row})
    return links


def choose_devices(free: list[int], count: int, links: dict[tuple[int, int], str] | None = None) -> tuple[int, ...] | None:
    """The `count` free devices that share the closest links (the worst pair first, then the
    sum over pairs, then the lowest ids); None when too few are free."""
    if count > len(free):
        return None
    links = links or {}

    def cost(group: tuple[int, ...]) -> tuple[float, float, tuple[int, ...]]:
        ranks = [link_rank(links.get((a, b), "")) if links else 0.0 for a, b in itertools.combinations(group, 2)]
        return (max(ranks, default=0.0), sum(ranks), group)

    return min(itertools.combinations(sorted(free), count), key=cost)


def slot_cpus(allowed: list[int], gpus: list[int], devices: tuple[int, ...]) -> tuple[int, ...]:
    """The slot's CPUs: each declared device owns an equal contiguous share of `allowed`
    (the first shares one CPU longer when they do not divide); a slot gets its devices' shares.
    With fewer CPUs than devices, devices share CPUs round-robin."""
    ordered = sorted(gpus)
    if len(allowed) < len(ordered):
        return tuple(sorted({allowed[ordered.index(d) % len(allowed)] for d in devices}))
    base, extra = divmod(len(allowed), len(ordered))
    shares, start = {}, 0
    for at, device in enumerate(ordered):
        size = base + (1 if at < extra else 0)
        shares[device] = allowed[start:start + size]
        start += size
    return tuple(sorted(cpu for device in devices for cpu in shares[device]))


def device_env(vendor: Vendor, devices: tuple[int, ...]) -> dict[str, str]:
    """The variables that make the server see only its devices.

    AMD's runtime reads HIP_VISIBLE_DEVICES; vLLM on ROCm requires CUDA_VISIBLE_DEVICES,
    when set, to equal it, so both are given. On a CPU-only host CUDA_VISIBLE_DEVICES
    still names the slot (the sim emulates its GPUs from it; vLLM CPU ignores it)."""
    listed = ",".join(str(device) for device in devices)
    if vendor == "amd":
        return {"HIP_VISIBLE_DEVICES": listed, "CUDA_VISIBLE_DEVICES": listed}
    return {"CUDA_VISIBLE_DEVICES": listed}


def vendor_of(gpu_tool: str | None) -> Vendor:
    """The vendor from the GPU tool the host answered with (preflight.read_gpu_memory)."""
    if gpu_tool == "nvidia-smi":
        return "nvidia"
    if gpu_tool in ("amd-smi", "rocm-smi"):
        return "amd"
    return "none"


def plan_slot(host: str, gpus: list[int], busy: set[int], count: int, allowed_cpus: list[int],
              links: dict[tuple[int, int], str] | None = None, vendor: Vendor = "none") -> Slot | None:
    """A slot of `count` devices among the declared ones not `busy`, or None when none is free now.

    Raises SlotError when the host could never give one (it declares fewer devices)."""
    if count > len(gpus):
        raise SlotError(f"a launch needs {count} devices (its tensor x pipeline x data parallel sizes), "
                        f"but host {host!r} declares {len(gpus)} in gpus: {gpus}")
    chosen = choose_devices([d for d in gpus if d not in busy], count, links)
    if chosen is None:
        return None
    return Slot(host=host, devices=chosen, cpus=slot_cpus(allowed_cpus, gpus, chosen), vendor=vendor)
