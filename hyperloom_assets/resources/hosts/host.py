"""What a serving host offers the rest of the project, wherever the host is.

LocalHost (this machine) and SshHost (a host of the hosts file, through its agent)
implement it; assets and the measurement protocol ask a host only for this, so neither
knows which one serves.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.measurement.measurement import Measurement
from hyperloom_assets.core.measurement.serving import CpuPlacement, LaunchRecord, ServerSpec
from hyperloom_assets.resources.bench.client import BenchmarkClient, ProgressFn
from hyperloom_assets.resources.hosts.reaper import ReapReport


class Host(Protocol):
    name: str  # its name in the hosts file

    def state_path(self) -> Path:
        """This control machine's state folder for the host: its run folders are under it."""

    def python_executable(self, spec: ServerSpec) -> Path:
        """The interpreter a server of `spec` runs under, on the host."""

    def facts(self) -> dict:
        """What `hyperloom hosts check` prints: GPUs, engines, the clock's skew."""

    def gpu_names(self) -> list[str]: ...

    def slot_facts(self) -> dict:
        """What a slot is planned from: the GPU tool, its topology matrix, the CPUs (host_side.slot_facts)."""

    def engine_identity(self, spec: ServerSpec) -> str | None:
        """`distribution version` of the spec's engine in its serving environment."""

    def proposal_checks(self, request: dict) -> dict:
        """The engine's parser and `git apply --check` over a model's proposals, on the host."""

    def reap_orphans(self) -> ReapReport: ...

    def serve(self, spec: ServerSpec, run_dir: Path, label: str | None = None) -> AbstractContextManager[LaunchRecord]:
        """A ready server for `spec`, torn down when the block ends."""

    def measure(self, bench: BenchmarkClient, base_url: str, served_model: str, workload: Workload, vocab_size: int,
                repeats: int, warmups: int | None = None, num_prompts: int | None = None,
                records_dir: Path | None = None, max_model_len: int | None = None, timeout_s: float | None = None,
                progress: ProgressFn | None = None, cpus: CpuPlacement | None = None) -> Measurement:
        """The benchmark client's rounds against a ready server, run beside it."""

    def post(self, url: str, timeout_s: float) -> dict:
        """A server's control route, POSTed from beside the server."""

    def served_path(self, run_dir: Path) -> str:
        """Where a server of this step writes files that come back with its run folder."""
