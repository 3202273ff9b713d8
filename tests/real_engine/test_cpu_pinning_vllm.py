"""vLLM CPU launched through the local host with the client's CPU set apart: its OpenMP auto-binding
(VLLM_CPU_OMP_THREADS_BIND=auto) binds from the mask the host pinned, so no thread of any
of its processes (API server, engine core, worker and its OpenMP threads) may run on the
benchmark client's CPU."""

from __future__ import annotations

import os
import re

import pytest

from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.resources.hosts.preflight import read_gpu_memory
from hyperloom_assets.resources.hosts.process_group import group_members, read_pidfiles

pytestmark = [pytest.mark.real_engine,
              pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or bool(read_gpu_memory()),
                                 reason="a CPU-only host with two CPUs or more")]


def test_no_vllm_cpu_thread_runs_on_the_clients_cpu(host, tiny_model, tmp_path) -> None:
    host = host.model_copy(update={"client_cpus": str(max(os.sched_getaffinity(0)))})  # auto shares 2 CPUs
    spec = ServerSpec(engine="vllm", model=tiny_model, server_args=["--max-num-seqs", "2", "--enforce-eager"],
                      env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    with host.serve(spec, tmp_path / "run") as launch:
        assert launch.cpus is not None
        server = set(launch.cpus.server_cpus)
        pgid = read_pidfiles(host.pid_dir())[0][1].pgid
        processes = group_members(pgid)
        masks = {frozenset(os.sched_getaffinity(t.id)) for p in processes for t in p.threads()}
        log_text = launch.log_path.read_text(errors="replace")
    assert len(processes) >= 2, "the API server and its engine core"
    assert masks and all(mask <= server for mask in masks), f"thread masks {masks} leave the server's CPUs {server}"
    bound = re.search(r"local_rank=0, core ids=\[([\d, ]*)\]", log_text)
    assert bound is not None, "vLLM logs its OpenMP binding"
    assert {int(cpu) for cpu in bound.group(1).split(",") if cpu.strip()} <= server
