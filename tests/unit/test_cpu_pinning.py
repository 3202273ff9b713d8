"""Which CPUs the server and the benchmark client get, and the hosts file's field for it."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from hyperloom_assets.core.config.hosts import load_hosts
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.measurement.serving import ServerError
from hyperloom_assets.resources.hosts import host_side
from hyperloom_assets.resources.hosts.cpu_pinning import bound_within, pinned_thread, plan_placement
from hyperloom_assets.resources.hosts.process_group import teardown


def test_a_cpu_only_host_gives_the_client_its_last_cpu_and_the_server_the_rest() -> None:
    placement = plan_placement("auto", [0, 1, 2, 3], has_gpu=False)
    assert placement is not None
    assert (placement.server_cpus, placement.client_cpus) == ([0, 1, 2], [3])
    assert placement.reason.startswith("auto")


@pytest.mark.parametrize(("setting", "allowed", "has_gpu"), [("auto", [0, 1, 2], True), ("auto", [0, 1], False),
                                                               ("off", [0, 1, 2], False)])
def test_a_gpu_host_one_that_would_leave_the_server_one_cpu_or_off_shares_every_cpu(setting, allowed, has_gpu) -> None:
    assert plan_placement(setting, allowed, has_gpu) is None


def test_the_host_config_names_the_clients_cpus_even_on_a_gpu_host_or_a_two_cpu_one() -> None:
    placement = plan_placement("0,2", [0, 1, 2, 3], has_gpu=True)
    assert placement is not None
    assert (placement.server_cpus, placement.client_cpus) == ([1, 3], [0, 2])
    assert placement.reason == "host config client_cpus=0,2"
    two = plan_placement("1", [0, 1], has_gpu=False)
    assert two is not None and (two.server_cpus, two.client_cpus) == ([0], [1])


def test_client_cpus_the_host_may_not_use_or_that_leave_the_server_none_are_refused() -> None:
    with pytest.raises(ServerError, match=r"client_cpus='7'.*CPUs \[7\] are not among") as foreign:
        plan_placement("7", [0, 1], has_gpu=False)
    assert foreign.value.error_class == "preflight"
    with pytest.raises(ServerError, match="leaves no CPU for the server"):
        plan_placement("0,1", [0, 1], has_gpu=False)


def test_the_hosts_file_refuses_a_client_cpus_that_is_no_cpu_list(tmp_path) -> None:
    file = tmp_path / "hosts.yaml"
    file.write_text("local: {kind: local, client_cpus: many}\nspare: {kind: local, client_cpus: '1,2'}\n")
    hosts, problems = load_hosts(file)
    assert [problem.field for problem in problems] == ["local.client_cpus"]
    assert hosts["spare"].client_cpus == "1,2"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_pinned_thread_runs_on_its_cpus_and_gets_its_mask_back() -> None:
    everything, target = os.sched_getaffinity(0), [max(os.sched_getaffinity(0))]
    seen: dict[str, set[int]] = {}
    with pinned_thread(target):
        seen["inside"] = os.sched_getaffinity(0)
        worker = threading.Thread(target=lambda: seen.update(started=os.sched_getaffinity(0)))
        worker.start()
        worker.join()
    assert seen == {"inside": set(target), "started": set(target)}
    assert os.sched_getaffinity(0) == everything


def test_a_pinned_vllm_binds_its_threads_within_its_cpus_whatever_cpus_its_env_names() -> None:
    """vLLM CPU binds its OpenMP threads to a CPU list it is given, past the mask a slot pins it to."""
    vllm, env = engine_for("vllm"), {"VLLM_CPU_OMP_THREADS_BIND": "0-1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert bound_within(env, vllm, [1]) == {"VLLM_CPU_OMP_THREADS_BIND": "auto", "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert bound_within({"VLLM_CPU_OMP_THREADS_BIND": "nobind"}, vllm, [1]) == {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    assert bound_within(env, vllm, None) == env, "an unpinned server keeps the operator's binding"
    assert bound_within(env, engine_for("sglang"), [1]) == env, "an engine that binds no threads itself"


def binding_seen_by_a_launch(tmp_path, server_cpus: list[int] | None) -> str:
    log = tmp_path / f"bind-{server_cpus}.log"
    code = "import os; print(os.environ['VLLM_CPU_OMP_THREADS_BIND'])"
    server = host_side.start([sys.executable, "-c", code], {"VLLM_CPU_OMP_THREADS_BIND": "0-1"}, [], log,
                             tmp_path / "pids", engine="vllm", server_cpus=server_cpus)
    server.popen.wait(timeout=30)
    teardown(server, term_wait_s=1.0)
    return log.read_text().strip()


def test_a_vllm_server_started_on_a_slots_cpus_gets_the_binding_within_them(tmp_path) -> None:
    assert binding_seen_by_a_launch(tmp_path, [max(os.sched_getaffinity(0))]) == "auto"
    assert binding_seen_by_a_launch(tmp_path, None) == "0-1"
