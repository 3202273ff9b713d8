"""vLLM CPU in its default process layout (API server, engine core, worker), launched once
through the local host with the benchmark client's CPU set apart, and asked three read-only
questions while it serves:

- its OpenMP auto-binding (VLLM_CPU_OMP_THREADS_BIND=auto) binds from the mask the host
  pinned, so no thread of any of its processes may run on the client's CPU;
- every series we read is on its /metrics page, and a measured round's telemetry has
  scrapes between its edges;
- the launch evidence read from its log (the args it took, its version), its ZMQ sockets in
  the launch's own folder, and a completion it answers.

Its teardown then leaves nothing: no process of its group, no pidfile, no scratch folder.
That vLLM's telemetry then reaches the trials table and the baseline's metadata is checked
by the SSH host's optimize run (tests/fleet/test_ssh_vllm.py), which launches vLLM anyway.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.core.measurement.telemetry import parse_prometheus, series_value
from hyperloom_assets.resources.bench.client import measure, model_vocab_size
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.hosts.preflight import read_gpu_memory
from hyperloom_assets.resources.hosts.process_group import group_members, read_pidfiles
from tests.conftest import reap_pid_dir

pytestmark = [pytest.mark.real_engine,
              pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or bool(read_gpu_memory()),
                                 reason="a CPU-only host with two CPUs or more")]

ARGS = ["--max-num-seqs", "4", "--enforce-eager", "--max-model-len", "512"]
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
# The CPU backend's KV blocks hold 128 tokens: a 320-token prefix fills two, which later prompts hit.
# 96 prompts keep a round busy across several 0.5 s scrapes even on an AMX CPU, where vLLM's
# sgl-kernel GEMMs served 32 within one interval and left only the idle edges (no gauges).
WORKLOAD = {"kind": "shared_prefix", "isl": 384, "prefix_len": 320, "osl": 16, "concurrency": 8, "num_prompts": 96}


@pytest.fixture(scope="module")
def serving(tmp_path_factory, tiny_model) -> Iterator[tuple[LocalHost, object]]:
    """(host, launch): one server for the module, torn down after its last test."""
    state = tmp_path_factory.mktemp("default-layout") / "state"
    # auto would share the 2 CPUs: the client gets the last one to itself.
    host = LocalHost(state_dir=str(state), check_foreign_processes=False, teardown_term_wait_s=15.0,
                     client_cpus=str(max(os.sched_getaffinity(0))))
    spec = ServerSpec(engine="vllm", model=tiny_model, server_args=ARGS, env=ENV)
    try:
        with host.serve(spec, state.parent / "serve") as launch:
            record = read_pidfiles(host.pid_dir())[0][1]
            yield host, launch
        assert read_pidfiles(Path(host.state_path()) / "pids") == [], "torn down, nothing left"
        assert group_members(record.pgid) == [] and not Path(record.scratch_dir).exists()
        teardown = json.loads((state.parent / "serve" / "teardown.json").read_text())
        assert teardown["survivors"] == [], teardown
    finally:
        reap_pid_dir(state / "pids")


def test_no_vllm_cpu_thread_runs_on_the_clients_cpu(serving) -> None:
    host, launch = serving
    assert launch.cpus is not None
    server = set(launch.cpus.server_cpus)
    pgid = read_pidfiles(host.pid_dir())[0][1].pgid
    processes = group_members(pgid)
    masks = {frozenset(os.sched_getaffinity(t.id)) for p in processes for t in p.threads()}
    assert len(processes) >= 2, "the API server and its engine core"
    assert masks and all(mask <= server for mask in masks), f"thread masks {masks} leave the server's CPUs {server}"
    bound = re.search(r"local_rank=0, core ids=\[([\d, ]*)\]", launch.log_path.read_text(errors="replace"))
    assert bound is not None, "vLLM logs its OpenMP binding"
    assert {int(cpu) for cpu in bound.group(1).split(",") if cpu.strip()} <= server


def test_every_series_we_read_is_on_vllms_metrics_page(serving, tiny_model) -> None:
    _, launch = serving
    measured = measure(launch.base_url, launch.served_model, Workload(**WORKLOAD),
                       vocab_size=model_vocab_size(tiny_model), repeats=1)
    with urllib.request.urlopen(launch.base_url + "/metrics", timeout=30) as reply:
        page = parse_prometheus(reply.read().decode())
    names = engine_for("vllm").metrics
    for field in type(names).model_fields:
        series = getattr(names, field)
        assert series_value(page, series) is not None, f"{field}: {series.name}"
    t = measured.telemetry
    assert t is not None and t.engine == "vllm" and t.scrapes >= 3, "a scrape between the edges"
    assert t.running_max >= 1 and t.prefix_queries > 0 and t.prefix_hits > 0, t
    assert t.prefill_s > 0 and t.decode_s > 0


def test_it_reports_its_evidence_and_answers_a_completion(serving) -> None:
    host, launch = serving
    scratch = Path(read_pidfiles(host.pid_dir())[0][1].scratch_dir)
    # vLLM's ZMQ IPC sockets are in the launch's own folder, not the system temp folder.
    assert any(entry.is_socket() for entry in scratch.iterdir()), list(scratch.iterdir())
    assert launch.evidence is not None and launch.evidence["max_num_seqs"] == 4
    assert launch.evidence["enforce_eager"] is True
    assert launch.engine_version is not None and launch.engine_version.startswith("vllm")
    assert launch.argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert launch.env == ENV
    body = json.dumps({"model": launch.served_model, "prompt": "hello", "max_tokens": 4, "ignore_eos": True}).encode()
    request = urllib.request.Request(f"{launch.base_url}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        assert json.loads(response.read())["usage"]["completion_tokens"] == 4
    print(f"\nvLLM CPU ready in {launch.ready_s:.1f} s")
