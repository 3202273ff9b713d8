"""The whole optimize_job through each sim flavor: a target of each engine, served as it would be.

SGLang cannot run on this CPU and ATOM needs ROCm, so the sim's flavors are their
stand-ins: each speaks its engine's flags and launch record (ATOM's none), takes its
HTTP port the engine's way, and plans from that engine's grid.
"""

from __future__ import annotations

import dagster as dg
import pytest

from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from tests.assets.test_optimize_sim import materialization, write_target

FLAVORS = {
    "vllm": (["--gpu", "H100", "--time-scale", "100", "--max-num-seqs", "4", "--enforce-eager"],
             "--port", {"max_num_seqs": 4}),
    "sglang": (["--gpu", "H100", "--flavor", "sglang", "--time-scale", "100", "--max-running-requests", "4"],
               "--port", {"max_running_requests": 4, "disable_radix_cache": False}),
    "atom": (["--gpu", "MI300X", "--flavor", "atom", "--time-scale", "100", "--max_num_seqs", "4"],
             "--server-port", None),
}


@pytest.fixture
def instance():
    with dg.instance_for_test() as instance:
        yield instance


@pytest.mark.parametrize("flavor", list(FLAVORS))
def test_optimize_job_runs_through_each_flavor(tmp_path, host, store, instance, flavor: str) -> None:
    server_args, port_flag, evidence = FLAVORS[flavor]
    name = f"sim-{flavor}"
    write_target(tmp_path / "targets", name, server_args, max_trials=1, sweep_concurrencies=[16])
    defs = build_defs(tmp_path / "targets", host=host, store=store)
    result = defs.resolve_job_def("optimize_job").execute_in_process(partition_key=name, instance=instance)
    assert result.success

    baseline = materialization(instance, "baseline", name)
    assert f" {port_flag} " in baseline["argv"], "the flavor takes its HTTP port the engine's way"
    if evidence is None:
        assert baseline["launch_evidence"] == {"record": "unknown"}, "ATOM prints no record of its resolved args"
    else:
        assert {k: baseline["launch_evidence"][k] for k in evidence} == evidence

    trials = materialization(instance, "trials", name)
    assert trials["trials_run"] >= 1
    stack = materialization(instance, "optimization_stack", name)
    assert "--time-scale" not in stack["final_argv"] and "--flavor" not in stack["final_argv"]
    assert materialization(instance, "final_report", name)["report_path"]
    assert read_pidfiles(host.state_path() / "pids") == [], "every server is torn down"
