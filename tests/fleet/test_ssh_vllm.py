"""Real vLLM CPU through an SSH host (a real sshd on loopback) that declares two "devices": a
whole optimize run with two parallel trial slots, each one CPU of this 2-core machine (no GPU:
the devices are CPU sets only), the benchmark client on the host, vLLM's own telemetry in the
trials table, a real validated gain that vLLM's own client confirms on the same validation
servers, the sweep and the capacity at the target's SLO on the validation's last pair, and
nothing left behind there."""

from __future__ import annotations

import itertools
import os
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import psutil
import pytest
import yaml

from hyperloom_assets.core.measurement.peer_results import read_vllm_result
from benchmarks.support.peers import vllm_bench_serve_argv
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.hosts.ssh import SshHost
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from hyperloom_assets.resources.store.leases import HostLeases
from tests.conftest import VLLM_CPU_ENV, earlier_launch_noise

pytestmark = pytest.mark.real_engine


def vllm_servers(model: Path) -> list[int]:
    return [p.pid for p in psutil.process_iter(["cmdline"])
            if "vllm.entrypoints.openai.api_server" in (p.info["cmdline"] or []) and str(model) in (p.info["cmdline"] or [])]


def server_of(model: Path, base_url: str) -> psutil.Process:
    port = base_url.rsplit(":", 1)[1]
    return next(psutil.Process(pid) for pid in vllm_servers(model) if port in psutil.Process(pid).cmdline())


def thread_cpus(tid: int) -> set[int]:
    try:
        return os.sched_getaffinity(tid)
    except ProcessLookupError:  # a thread that ended since it was listed
        return set()


def threads_affinity(server: psutil.Process) -> set[int]:
    """Every CPU any thread of the server or of its engine core process may run on."""
    processes = [server, *server.children(recursive=True)]
    return {cpu for process in processes for thread in process.threads() for cpu in thread_cpus(thread.id)}


@dataclass
class Served:
    """One launch as the test saw it on the host: its step, slot, CPUs and when it served."""
    step: str
    devices: list[int] | None
    server_cpus: list[int]
    client_cpus: list[int]
    threads_cpus: set[int]  # read from the running server's threads after its rounds
    ready_at: float
    gone_at: float = 0.0


def placement_watched(serve, model: Path, seen: list[Served]):
    """SshHost.serve, recording each launch's slot and the CPUs its server's threads really had."""
    @contextmanager
    def serve_and_watch(self, spec, run_dir, label=None):
        with serve(self, spec, run_dir, label) as launch:
            ready_at = time.monotonic()
            yield launch
            served = Served(step=Path(run_dir).name, devices=launch.devices, server_cpus=launch.cpus.server_cpus,
                            client_cpus=launch.cpus.client_cpus, ready_at=ready_at,
                            threads_cpus=threads_affinity(server_of(model, launch.base_url)))
            # Here, so a server off its slot's CPUs fails its step at once, not after the whole run.
            assert served.threads_cpus == set(served.server_cpus), served
        served.gone_at = time.monotonic()
        seen.append(served)
    return serve_and_watch


def _assert_the_slots_served_at_once_on_their_own_cpus(seen: list[Served], trial: dict) -> None:
    """Every launch in a slot of one CPU, its server's threads and its client on that CPU only; launches
    serving at the same time (the baseline launched again beside itself, the climb's trial beside its
    deep start, each validation pair's two sides) on different slots, on disjoint CPUs; the climb's
    launches on both slots."""
    assert all(s.devices in ([0], [1]) and s.threads_cpus == set(s.server_cpus) == set(s.client_cpus)
               and len(s.server_cpus) == 1 for s in seen), seen
    together = [(a, b) for a, b in itertools.combinations(seen, 2)
                if max(a.ready_at, b.ready_at) < min(a.gone_at, b.gone_at)]
    assert together, f"two servers at the same time: {seen}"
    assert all(a.devices != b.devices and not set(a.server_cpus) & set(b.server_cpus) for a, b in together), together
    climb = [s for s in seen if s.step.startswith(("trial-", "best_relaunch-"))]
    assert {s.devices[0] for s in climb} == {0, 1}, f"the climb measured on both slots: {climb}"
    assert trial["ran_on"] and set(trial["ran_on"].split(", ")) <= {"gpu-ssh:0", "gpu-ssh:1"}, trial


def _assert_vllms_telemetry_reached_the_tables(trials: dict, baseline: dict) -> None:
    """vLLM's /metrics, scraped by the client on the host, in the columns the planner and a user read."""
    table = trials["trials"].value
    row = table.records[0].data
    assert row["running_mean"] is not None and row["running_mean"] > 0, row
    assert None not in (row["prefix_hit_pct"], row["prefill_share_pct"], row["preemptions"]), row
    assert {c.name for c in table.schema.columns} >= {"kv_usage_max_pct", "waiting_mean", "prefix_hit_pct"}
    assert baseline["telemetry"].value["engine"] == "vllm"


CONCURRENCY, ISL, OSL = 8, 64, 32
# vLLM's client on the validation's last pair, after our rounds, in the same launches: the
# servers are warm from them, and the client's own warm-up requests come first. One pair:
# each `vllm bench serve` costs 10 s of imports before its requests, and the gain it checks
# is several times the launch noise.
PEER_PROMPTS = 4 * CONCURRENCY
# Under a cap of 1 each of 8 streams waits for the seven before it. On a slot's one CPU, in three
# runs beside other tests, the baseline's TTFT p90 at 8 streams read 875-2237 ms, at 4 met 400 ms
# once and read 781 and 918, at 2 met 400 once and read 413; the lifted cap's read 391 and 470 at
# 12 streams and 541-904 at 16. Under 400 ms (the whole 2-CPU host's SLO) the capacities read
# 0-4 streams and 8-16, one run's lifted cap held to 8 by a bound 3% over: 500 keeps both sides
# clear of the SLO at the probes that decide them.
# Three probes a side: the baseline's at its cap of 1 take 29 requests one by one each.
SLO = {"ttft_ms": 500, "percentile": 90, "capacity_probes": 3}
PEER_STEPS = ("validate-2-base", "validate-2-stack")


def _assert_vllms_client_confirms_the_validated_gain(stack: dict, peer: dict[str, float], record_property) -> None:
    """A real validated gain, and vLLM's own client sees a gain on the same servers.

    Only the sign is held: on these 2 shared cores and this small workload two fresh-clone
    runs read ours +239.5% (95% low +92.4%) against vLLM's client +145.3%, then ours +48.4%
    (low -5.1%) against +58%: the size and our interval's low end move too much to assert.
    """
    ours, low = stack["validated_gain_pct"].value, stack["validated_gain_ci_low"].value
    assert sorted(peer) == sorted(PEER_STEPS), peer
    sides = {side: statistics.fmean(v for step, v in peer.items() if step.endswith(f"-{side}"))
             for side in ("base", "stack")}
    peers = 100 * (sides["stack"] / sides["base"] - 1)
    said = (f"validated gain {ours:+.1f}% (low {low:+.1f}%), vLLM's client {peers:+.1f}% on the same servers "
            f"({sides['base']:.1f} -> {sides['stack']:.1f} tok/s)")
    print(said)
    record_property("cross_check", said)
    assert ours > 0 and stack["validated"].value, f"a validated gain: {said}"
    assert peers > 0, f"vLLM's client sees a gain too: {said}"


def _assert_the_capacity_at_the_slo(stack: dict, row: dict, report, record_property) -> None:
    """The baseline breaks the SLO, so the lifted cap is kept for meeting it; then each side's capacity."""
    assert row["reason"].startswith("slo_reached") and row["slo"].startswith("met at p90"), row
    assert stack["slo"].value["met"] is True, stack["slo"].value
    capacity = stack["capacity_at_slo"].value
    said = f"capacity at the SLO: baseline {capacity['baseline']}, stack {capacity['stack']} ({capacity['unit']})"
    print(said)
    record_property("capacity", said)
    assert capacity["unit"] == "concurrency" and capacity["baseline"] is not None, said
    assert capacity["stack"] >= CONCURRENCY > capacity["baseline"], said
    text = Path(report.asset_materialization.metadata["report_path"].value).read_text()
    assert f"Capacity at the SLO: the baseline serves {capacity['baseline']:g} concurrent streams within it" in text


def cross_checked(serve, model: Path, folder: Path, peer: dict[str, float]):
    """SshHost.serve, with `vllm bench serve` run against the validation's last pair before their teardown."""
    @contextmanager
    def serve_then_cross_check(self, spec, run_dir, label=None):
        with serve(self, spec, run_dir, label) as launch:
            yield launch
            step = Path(run_dir).name
            if step in PEER_STEPS:
                argv = vllm_bench_serve_argv(launch.base_url, launch.served_model, model, ISL, OSL,
                                             num_prompts=PEER_PROMPTS, concurrency=CONCURRENCY, result_dir=folder,
                                             result_filename=f"{step}.json", warmups=2 * CONCURRENCY)
                done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
                assert done.returncode == 0, done.stderr[-3000:]
                peer[step] = read_vllm_result(folder / f"{step}.json").output_throughput
    return serve_then_cross_check


def test_optimize_on_vllm_cpu_through_ssh_leaves_nothing_on_the_host(sshd, tmp_path, tiny_model, host, store,
                                                                     monkeypatch, record_property) -> None:
    workdir = tmp_path / "remote"
    # Two declared "devices" on a host without a GPU: two slots, one CPU each (core/fleet/slots.py).
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"gpu-ssh": sshd.host_entry(workdir, sys.executable,
                                                                                    gpus=[0, 1])}))
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "tiny-ssh.yaml").write_text(yaml.safe_dump({
        "engine": "vllm", "model": str(tiny_model), "host": "gpu-ssh", "env": VLLM_CPU_ENV,
        # A cap of 1 under 8 streams: lifting it gains several times, clear of these 2 cores'
        # launch noise within a trial's three looks. Under a cap of 2 one run read +90% with
        # a 97.5% interval of [-14%, +322%] after three looks, a REVERT and no stack.
        "server_args": ["--max-num-seqs", "1", "--enforce-eager", "--max-model-len", "512"],
        # 32 prompts: the lifted cap's two rounds last about a second together, long enough for
        # two of the client's 0.5 s /metrics scrapes; the baseline's, one request at a time, about
        # 10 s each. The baseline breaks the SLO, so the trial is decided on meeting it
        # (slo_reached), whatever the rounds' spread; the validation's gain is several times it.
        "workload": {"kind": "random", "isl": ISL, "osl": OSL, "concurrency": CONCURRENCY, "num_prompts": 32},
        # The sweep rides on the validation's last pair at one stream: at 8 the baseline's cap of 1
        # serves its 80 prompts one by one (about 25 s); the capacity search probes 8 streams anyway.
        "repeats": 2, "max_trials": 1, "target_gain_pct": 1000, "sweep_concurrencies": [1],
        # Both slots at once: the baseline, measured once, is launched again on the other slot for
        # the climb's first decision (docs/fleet.md, GPU slots). A second trial costs a third round of launches (a cap of 16
        # beside the first's rebench, then its own): the trials step took 122 s in one run, not 92.
        "parallel_trials": 2,
        # The one trial is the lifted cap alone, through the target's own search space (checked by
        # vLLM's parser on the host before the baseline launches). The seed grid's first variant
        # also drops --enforce-eager, and compiled vLLM starts in 33-55 s here instead of about 10,
        # with first rounds spread enough (1370 and 586 tok/s in one run) that the trial needed
        # a second look: two more launches.
        "search_space": {"args": {"--max-num-seqs": [CONCURRENCY]}, "only": True},
        # vLLM's profile takes a launch of its own (Profiler.free_when_idle); profiling through an SSH host
        # is tests/fleet/test_ssh_runs.py's, vLLM's profiler tests/real_engine/test_profile_vllm.py's.
        "profile": False,
        # The gate's reference is asked of the baseline's server after its rounds, where its cap of 1
        # answers the prompts one by one (8 took 10 s). The lifted cap is not accuracy-risky, so no
        # trial asks the gate and nothing here reads its answers: 2, not 32. The gate's verdicts on
        # vLLM are test_patches_vllm.py's.
        "accuracy": {"kind": "agreement", "prompts": 2}, "slo": SLO}))
    # The climb's second look is the sim's test: earlier runs' launch noise lets the trial decide at its first.
    earlier_launch_noise(store, "tiny-ssh", "gpu-ssh", "vllm", tiny_model)
    peer: dict[str, float] = {}
    (tmp_path / "peer").mkdir()
    seen: list[Served] = []
    monkeypatch.setattr(SshHost, "serve", placement_watched(
        cross_checked(SshHost.serve, tiny_model, tmp_path / "peer", peer), tiny_model, seen))
    defs = build_defs(targets, host=host, store=store)
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("optimize_job").execute_in_process(partition_key="tiny-ssh", instance=instance,
                                                                         raise_on_error=False)
        assert result.success, [str(e.event_specific_data.error) for e in result.all_events
                                if e.event_type_value == "STEP_FAILURE"]
        trials = instance.fetch_materializations(dg.AssetKey("trials"), limit=1).records[0]
        base = instance.fetch_materializations(dg.AssetKey("baseline"), limit=1).records[0]
        stack = instance.fetch_materializations(dg.AssetKey("optimization_stack"), limit=1).records[0]
        report = instance.fetch_materializations(dg.AssetKey("final_report"), limit=1).records[0]
    _assert_vllms_telemetry_reached_the_tables(trials.asset_materialization.metadata,
                                               base.asset_materialization.metadata)
    assert trials.asset_materialization.metadata["launch_noise_history_dof"].value == 10, "the prior reached the climb"
    assert trials.asset_materialization.metadata["slots"].value == 2
    baseline = store.measurements("tiny-ssh", "baseline")[0]
    assert baseline["measurement"]["output_throughput"] > 0
    assert baseline["evidence"]["max_num_seqs"] == 1, "the launch evidence read from the log fetched back"
    run_dir = Path(baseline["log_path"]).parent
    assert "non-default args" in (run_dir / "server.log").read_text() and list(run_dir.glob("*.jsonl"))
    kinds = {row["kind"] for row in store.measurements("tiny-ssh")}
    assert {"baseline", "trial", "validation", "sweep", "capacity"} <= kinds, kinds
    rows = trials.asset_materialization.metadata["trials"].value.records
    assert [(r.data["name"], r.data["provenance"]) for r in rows] == [(f"--max-num-seqs={CONCURRENCY}", "search_space")], \
        "the search space alone was searched"
    _assert_the_slots_served_at_once_on_their_own_cpus(seen, rows[0].data)
    _assert_vllms_client_confirms_the_validated_gain(stack.asset_materialization.metadata, peer, record_property)
    _assert_the_capacity_at_the_slo(stack.asset_materialization.metadata, rows[0].data, report, record_property)
    by_step = report.asset_materialization.metadata["launches_by_step"].value
    assert "profile" not in by_step and "sweep" not in by_step and by_step["validate"] == 4, by_step
    assert read_pidfiles(workdir / "pids") == [], "no pidfile left on the host"
    assert not any((workdir / "runs").iterdir()), "no run files left on the host"
    assert vllm_servers(tiny_model) == [], "no server left running on the host"
    assert HostLeases(store).held() == [], "no device lease left"
    assert psutil.Process(sshd.process.pid).children(recursive=True) == [], "no host agent or client left on the host"
