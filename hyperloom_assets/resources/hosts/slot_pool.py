"""A run's slots as one host: each server it starts takes a free slot for its life.

The parallel climb (core/decisions/parallel.py) measures from several threads at once;
the trials asset gives it a PooledHost over the run's slots (one Host per slot, from the
fleet), so every launch, the accuracy gate's included, runs on a slot no other launch of
the run holds, and waits while all are busy. The slots may be on several hosts (a pool):
what a caller asks about a server it started (the benchmark client, a control route, a
served path) goes to the host whose slot serves it, the one the calling thread borrowed,
and the client is pinned to that slot's CPUs (the launch's placement says them).
"""

from __future__ import annotations

import queue
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from hyperloom_assets.core.measurement.measurement import Measurement
from hyperloom_assets.core.measurement.serving import LaunchRecord, ServerSpec
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.hosts.reaper import ReapReport


class PooledHost:
    """The Host protocol over a run's slots: `serve` borrows a free slot; what is asked of a server
    goes to the slot this thread serves on; the rest is the first slot's host's."""

    def __init__(self, slots: list[Host]):
        if not slots:
            raise ValueError("a pool needs one slot at least")
        self.first, self.name = slots[0], slots[0].name
        self.free: queue.Queue[Host] = queue.Queue()
        for slot in slots:
            self.free.put(slot)
        self.size = len(slots)
        self.serving = threading.local()  # the slot this thread's server runs on, while it runs

    @contextmanager
    def borrowed(self) -> Iterator[Host]:
        slot = self.free.get()
        outer = getattr(self.serving, "slot", None)
        self.serving.slot = slot
        try:
            yield slot
        finally:
            self.serving.slot = outer
            self.free.put(slot)

    def serving_slot(self) -> Host:
        """The slot whose server this thread started (the first slot outside a server's block)."""
        return getattr(self.serving, "slot", None) or self.first

    @contextmanager
    def serve(self, spec: ServerSpec, run_dir: Path, label: str | None = None) -> Iterator[LaunchRecord]:
        with self.borrowed() as slot, slot.serve(spec, run_dir, label) as launch:
            yield launch

    def measure(self, bench: BenchmarkClient, base_url: str, *args, **kwargs) -> Measurement:
        # The client runs beside the server (its base_url is the host's own), pinned by the launch's placement.
        return self.serving_slot().measure(bench, base_url, *args, **kwargs)

    def state_path(self) -> Path:
        return self.first.state_path()

    def python_executable(self, spec: ServerSpec) -> Path:
        return self.first.python_executable(spec)

    def facts(self) -> dict:
        return self.first.facts()

    def gpu_names(self) -> list[str]:
        return self.first.gpu_names()

    def slot_facts(self) -> dict:
        return self.first.slot_facts()

    def engine_identity(self, spec: ServerSpec) -> str | None:
        return self.first.engine_identity(spec)

    def proposal_checks(self, request: dict) -> dict:
        return self.first.proposal_checks(request)

    def reap_orphans(self) -> ReapReport:
        return self.first.reap_orphans()

    def post(self, url: str, timeout_s: float) -> dict:
        return self.serving_slot().post(url, timeout_s)

    def served_path(self, run_dir: Path) -> str:
        return self.serving_slot().served_path(run_dir)
