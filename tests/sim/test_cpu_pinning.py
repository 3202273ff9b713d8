"""The local host pins the server and the benchmark client apart (by its config, or by "auto" on a
CPU-only host with three CPUs or more): a real sim-serve launched through LocalHost.serve and
measured through LocalHost.measure."""

from __future__ import annotations

import os

import psutil
import pytest

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.hosts.preflight import read_gpu_memory
from hyperloom_assets.resources.hosts.process_group import group_members, read_pidfiles
from tests.conftest import SIM_MODEL

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or bool(read_gpu_memory()),
                                reason="a CPU-only host with two CPUs or more")

SIM = ["--gpu", "H100", "--time-scale", "50", "--max-num-seqs", "4", "--enforce-eager"]
WORKLOAD = Workload(kind="random", isl=64, osl=8, concurrency=2)


def _server_affinities(host) -> set[frozenset[int]]:
    """The CPU masks of every thread of every process of the server's group."""
    pgid = read_pidfiles(host.pid_dir())[0][1].pgid
    masks = set()
    for process in group_members(pgid):
        for thread in process.threads():
            masks.add(frozenset(os.sched_getaffinity(thread.id)))
    return masks


def _measure_seeing_client_cpus(host, launch) -> list[set[int]]:
    seen: list[set[int]] = []
    host.measure(BenchmarkClient(), launch.base_url, launch.served_model, WORKLOAD, 32000, repeats=1, warmups=1,
                 num_prompts=4, max_model_len=8192, cpus=launch.cpus,
                 progress=lambda _round: seen.append(os.sched_getaffinity(0)))
    return seen


def _pinned_apart(host, tmp_path, client: set[int]) -> None:
    everything = os.sched_getaffinity(0)
    with host.serve(ServerSpec(engine="sim", model=SIM_MODEL, server_args=SIM), tmp_path / "run") as launch:
        assert launch.cpus is not None
        assert set(launch.cpus.client_cpus) == client and set(launch.cpus.server_cpus) == everything - client
        assert _server_affinities(host) == {frozenset(everything - client)}, "every server thread off the client's CPU"
        seen = _measure_seeing_client_cpus(host, launch)
    assert seen and all(mask == client for mask in seen), "the client's rounds ran on its CPU alone"
    assert os.sched_getaffinity(0) == everything, "the caller's thread gets every CPU back"


def test_the_host_config_puts_the_server_off_the_clients_cpu_and_the_client_on_it_alone(host, tmp_path) -> None:
    last = max(os.sched_getaffinity(0))
    _pinned_apart(host.model_copy(update={"client_cpus": str(last)}), tmp_path, {last})


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 3, reason="auto pins only when the server keeps two CPUs")
def test_auto_gives_the_client_the_last_cpu_on_a_cpu_only_host(host, tmp_path) -> None:
    _pinned_apart(host, tmp_path, {max(os.sched_getaffinity(0))})


def test_off_in_the_host_config_shares_every_cpu(host, tmp_path) -> None:
    everything = os.sched_getaffinity(0)
    shared = host.model_copy(update={"client_cpus": "off"})
    with shared.serve(ServerSpec(engine="sim", model=SIM_MODEL, server_args=SIM), tmp_path / "run") as launch:
        assert launch.cpus is None
        assert _server_affinities(shared) == {frozenset(everything)}
        seen = _measure_seeing_client_cpus(shared, launch)
    assert seen and all(mask == everything for mask in seen)
