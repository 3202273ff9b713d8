"""The fleet under load: N sim targets over M SSH hosts, through the whole deployment.

Each host is a real sshd on loopback with its own keys, known_hosts and workdir; every
server launch and benchmark round runs there over SSH. The deployment is the README's:
Postgres, a Redis broker, the daemon (one run per host tag), one dagster-celery worker
per host. One `baseline_job` run per target is asked for at once (a backfill). Prints the
makespan against the ideal (the runs' total time / M), the overlapping runs per host and
the leases still held at the end, and writes benchmarks/results/fleet.json.

Goals (`target_met`): every run succeeded, zero overlaps, zero stale leases, makespan within
1.25x of the ideal.

    .venv/bin/python benchmarks/fleet.py [--targets 8] [--hosts 2]
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.support.fleet_run import (  # noqa: E402
    backfill, deployed, failures, fleet_env, overlaps, wait_finished, write_fleet)
from benchmarks.support.fleet_services import start_postgres, start_redis, start_sshd  # noqa: E402
from benchmarks.support.results import start_run, write_results  # noqa: E402
from hyperloom_assets.resources.store.leases import HostLeases  # noqa: E402
from hyperloom_assets.resources.store.results import ResultStore  # noqa: E402

# The source paths whose code this benchmark measures: its result is stale once one changes
# (benchmarks/support/staleness.py).
EXERCISES = ("hyperloom_assets/", "benchmarks/support/fleet_run.py", "benchmarks/support/fleet_services.py")

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "models" / "llama-3-8b"
MAKESPAN_GOAL = 1.25


def sim_target(host: str) -> dict:
    return {"engine": "sim", "model": str(MODEL), "host": host, "repeats": 3,
            "server_args": ["--gpu", "H100", "--time-scale", "10", "--max-num-seqs", "8", "--enforce-eager"],
            "workload": {"kind": "random", "isl": 512, "osl": 128, "concurrency": 8, "num_prompts": 48}}


def summarize(records: list, host_of: dict[str, str], hosts: int, stale: list) -> dict:
    by_host: dict[str, list] = {}
    for record in records:
        by_host.setdefault(host_of[record.dagster_run.tags["dagster/partition"]], []).append(record)
    durations = [r.end_time - r.start_time for r in records]
    makespan = max(r.end_time for r in records) - min(r.start_time for r in records)
    ideal = sum(durations) / hosts
    return {
        "targets": len(records), "hosts": hosts, "succeeded": sum(r.dagster_run.status.value == "SUCCESS" for r in records),
        "run_s": {"min": min(durations), "mean": sum(durations) / len(durations), "max": max(durations)},
        "total_work_s": sum(durations), "ideal_s": ideal, "makespan_s": makespan, "makespan_over_ideal": makespan / ideal,
        "overlaps_per_host": {host: sum(overlaps(a, b) for a, b in itertools.combinations(runs, 2))
                              for host, runs in sorted(by_host.items())},
        "runs_per_host": {host: len(runs) for host, runs in sorted(by_host.items())},
        "stale_leases": [lease.model_dump(mode="json") for lease in stale],
    }


def print_table(result: dict) -> None:
    overlaps_total = sum(result["overlaps_per_host"].values())
    rows = [("targets / hosts / succeeded", f"{result['targets']} / {result['hosts']} / {result['succeeded']}", ""),
            ("run time min / mean / max (s)", "{min:.1f} / {mean:.1f} / {max:.1f}".format(**result["run_s"]), ""),
            ("ideal (total work / M) (s)", f"{result['ideal_s']:.1f}", ""),
            ("makespan (s)", f"{result['makespan_s']:.1f}", ""),
            ("makespan / ideal", f"{result['makespan_over_ideal']:.3f}",
             "met" if result["makespan_over_ideal"] <= MAKESPAN_GOAL else f"MISSED (goal <= {MAKESPAN_GOAL})"),
            ("overlaps per host", ", ".join(f"{h}: {n}" for h, n in result["overlaps_per_host"].items()),
             "met" if overlaps_total == 0 else "MISSED (goal 0)"),
            ("stale leases at the end", str(len(result["stale_leases"])),
             "met" if not result["stale_leases"] else "MISSED (goal 0)")]
    width = max(len(r[0]) for r in rows)
    for name, value, goal in rows:
        print(f"{name:<{width}}  {value:<28} {goal}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=8)
    parser.add_argument("--hosts", type=int, default=2)
    args, bench_run = start_run(parser)
    root = Path(tempfile.mkdtemp(prefix="hyperloom-fleet-"))
    postgres, redis, sshds = start_postgres(), start_redis(), []
    try:
        sshds = [start_sshd() for _ in range(args.hosts)]
        hosts = {f"ssh-{i}": sshd.host_entry(root / f"remote-{i}", sys.executable) for i, sshd in enumerate(sshds)}
        host_of = {f"t{j:02d}": f"ssh-{j % args.hosts}" for j in range(args.targets)}
        write_fleet(root, hosts, {name: sim_target(host) for name, host in host_of.items()})
        url = postgres.create_database()
        env = fleet_env(root, url, redis.url)
        with deployed(root, sorted(hosts), env):
            backfill(root, env, "baseline_job", sorted(host_of))
            records = wait_finished(root, args.targets, deadline_s=120 + 90 * args.targets / args.hosts)
        result = summarize(records, host_of, args.hosts, HostLeases(ResultStore(url=url)).held())
        result["failures"] = failures(root / "home")
    finally:
        for service in (*sshds, redis, postgres):
            service.stop()
        shutil.rmtree(root, ignore_errors=True)
    print_table(result)
    for target, why in result["failures"].items():
        print(f"failed: {target}: {why}")
    met = (result["makespan_over_ideal"] <= MAKESPAN_GOAL and not sum(result["overlaps_per_host"].values())
           and not result["stale_leases"] and result["succeeded"] == result["targets"])
    write_results("fleet", {**result, "makespan_over_ideal_target": MAKESPAN_GOAL, "target_met": met}, bench_run)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
