"""A run with no executor of its own, as the UI's "Materialize" launches one, takes its host
once for the whole run: it runs under the definitions' executor, and the fleet resource
takes the host's lease each time a process sets up its resources."""

from __future__ import annotations

import dagster as dg

from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.store.leases import HostLeases
from hyperloom_assets.resources.store.results import ResultStore
from tests.assets.test_optimize_sim import CAPPED, write_target

NAME = "sim-lease"


def materialize_job() -> dg.JobDefinition:
    """A job like the one the UI runs for a selection of assets, with no executor of its own,
    built afresh in every process from HYPERLOOM_TARGETS_DIR, as a run worker builds it."""
    selected = dg.define_asset_job("materialize", selection=["baseline", "roofline"])
    return dg.Definitions.merge(build_defs(), dg.Definitions(jobs=[selected])).resolve_job_def("materialize")


def test_a_run_without_a_job_executor_takes_the_host_once(tmp_path, home, monkeypatch) -> None:
    targets = tmp_path / "targets"
    write_target(targets, NAME, CAPPED, repeats=1, workload={"kind": "random", "isl": 128, "osl": 32,
                                                            "concurrency": 4, "num_prompts": 8})
    monkeypatch.setenv("DAGSTER_HOME", str(home))  # the default store and host state live under it
    monkeypatch.setenv("HYPERLOOM_TARGETS_DIR", str(targets))
    monkeypatch.setenv("HYPERLOOM_CHECK_FOREIGN_SERVERS", "0")  # other test sessions may be serving
    monkeypatch.delenv("HYPERLOOM_POSTGRES_URL", raising=False)

    with dg.DagsterInstance.get() as instance:
        # Two steps that each need the host: under the multiprocess default, two processes.
        # Not entered as a context manager: that sets the resources up again, to load outputs.
        result = dg.execute_job(dg.reconstructable(materialize_job), instance, tags={"dagster/partition": NAME})
        assert result.success, [e.message for e in result.all_events if e.is_failure][:3]

    taken = [e for e in HostLeases(ResultStore()).events("local") if e["action"] == "taken"]
    assert len(taken) == 1 and result.run_id in taken[0]["holder"], taken
