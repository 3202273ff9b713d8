"""Scale-out for real: a Redis broker, the daemon, and one Celery worker (concurrency 1) per
host, standing in for two GPU hosts. Runs of targets on two hosts overlap in time; runs of
two targets on one host never do. Bounded in time; nothing is left running afterwards."""

from __future__ import annotations

import dagster as dg
import pytest

from benchmarks.support.fleet_run import backfill, deployed, failures, fleet_env, overlaps, wait_finished, write_fleet
from hyperloom_assets.core.fleet.tags import CELERY_QUEUE_TAG, HOST_TAG, celery_queue
from hyperloom_assets.resources.store.leases import HostLeases
from hyperloom_assets.resources.store.results import ResultStore
from tests.conftest import SIM_MODEL

pytestmark = pytest.mark.cli

HOST_OF = {"a1": "gpu-a", "a2": "gpu-a", "b1": "gpu-b", "b2": "gpu-b"}


def sim_target(host: str) -> dict:
    # At --time-scale 1 a baseline run lasts about 7 s (16 prompts, four waves a round under a
    # cap of 4): long beside the seconds a run worker takes to start on two busy cores, and
    # longer than the gap between one host's two runs (about 4 s), so a run on the other host
    # can only miss both by starting two runs late; the daemon dequeues both hosts' first runs
    # together (one run read a1 729-737, b1 733-741, a2 741-748, b2 746-753). At 20 a run lasts
    # about 3 s, and the two hosts' runs may then come one after another; 32 prompts (about
    # 12 s a run) bought nothing more.
    return {"engine": "sim", "model": str(SIM_MODEL), "host": host, "repeats": 2,
            "server_args": ["--gpu", "H100", "--time-scale", "1", "--max-num-seqs", "4", "--enforce-eager"],
            "workload": {"kind": "random", "isl": 256, "osl": 64, "concurrency": 8, "num_prompts": 16}}


def test_two_hosts_overlap_and_one_host_never_does(tmp_path, postgres_url, redis_server) -> None:
    write_fleet(tmp_path, {"gpu-a": {"kind": "local"}, "gpu-b": {"kind": "local"}},
                {name: sim_target(host) for name, host in HOST_OF.items()})
    env = fleet_env(tmp_path, postgres_url, redis_server.url)
    with deployed(tmp_path, ["gpu-a", "gpu-b"], env):
        backfill(tmp_path, env, "baseline_job", list(HOST_OF))
        records = wait_finished(tmp_path, len(HOST_OF), deadline_s=420)

    by_target = {r.dagster_run.tags["dagster/partition"]: r for r in records}
    assert all(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in records), failures(tmp_path / "home")
    for name, record in by_target.items():
        assert record.dagster_run.tags[HOST_TAG] == HOST_OF[name], "runs carry their target's host"
        assert record.dagster_run.tags[CELERY_QUEUE_TAG] == celery_queue(HOST_OF[name])
    assert not overlaps(by_target["a1"], by_target["a2"]), "two targets on one host never overlap"
    assert not overlaps(by_target["b1"], by_target["b2"]), "two targets on one host never overlap"
    spans = {name: (round(r.start_time % 1000, 1), round(r.end_time % 1000, 1)) for name, r in sorted(by_target.items())}
    print(f"run spans (start, end) mod 1000 s: {spans}")
    assert any(overlaps(by_target[a], by_target[b]) for a in ("a1", "a2") for b in ("b1", "b2")), \
        f"targets on two hosts run at the same time: {spans}"
    store = ResultStore(url=postgres_url)
    assert HostLeases(store).held() == [], "no lease outlives its run"
    assert sorted({row["target"] for name in HOST_OF for row in store.measurements(name)}) == sorted(HOST_OF)
