"""`hyperloom recover HOST [--confirm-scope-gone]`: free a host whose lease holder vanished.

A lease held in another owner scope (another container or machine) whose heartbeat
expired is never taken over silently. This command shows what it found: the holder,
its Dagster run's status, what this machine can tell about the holder's pid. Only with
`--confirm-scope-gone` (the operator saying that scope is gone) does it act: reap the
host's orphan servers, mark the holder's unfinished run canceled, and release every
lease of that scope in one transaction, recording who recovered them. It refuses the
current scope (a dead holder here is reclaimed by the next run on its own), a fresh
heartbeat and a scope that visibly still runs.
"""

from __future__ import annotations

import argparse
import getpass
import socket
import sys
from datetime import datetime, timezone

import dagster as dg

from hyperloom_assets.core.fleet.leases import Lease, lease_subject
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.fleet import HostFleet
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.hosts.owner_scope import current_scope, scope_evidence
from hyperloom_assets.resources.store.leases import HostLeases
from hyperloom_assets.resources.store.results import ResultStore

IN_PROGRESS = {dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
               dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING}


def refusal(lease: Lease, now: datetime) -> str | None:
    if lease.holder.scope == current_scope():
        return (f"refused: the holder {lease.holder.describe()} is in this owner scope; a dead holder here is "
                "reclaimed by the next run on its own, and a live one is still running")
    if not lease.expired(now):
        age = (now - lease.heartbeat_at).total_seconds()
        return f"refused: the holder heartbeat {age:.0f} s ago, within its TTL of {lease.ttl_s:.0f} s: it looks alive"
    alive, why = scope_evidence(lease.holder)
    if alive:
        return f"refused: the holder's scope still runs: {why}"
    return None


def run_status(run_id: str) -> tuple[dg.DagsterInstance | None, dg.DagsterRun | None, str]:
    try:
        instance = dg.DagsterInstance.get()
    except Exception as error:  # noqa: BLE001 - no DAGSTER_HOME, or an instance that does not load
        return None, None, f"Dagster run {run_id}: no instance to ask ({error})"
    run = instance.get_run_by_id(run_id)
    if run is None:
        return instance, None, f"Dagster run {run_id}: not in this instance"
    return instance, run, f"Dagster run {run_id}: {run.status.value}"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hyperloom recover", description=__doc__.splitlines()[0].strip("`"))
    p.add_argument("host", help="the host (of the hosts file) whose lease to recover")
    p.add_argument("--confirm-scope-gone", action="store_true",
                   help="you have confirmed the holder's owner scope (container or machine) is gone")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    store = ResultStore()
    leases = HostLeases(store)
    found = leases.of_host(args.host)
    if not found:
        print(f"host {args.host!r} has no lease: nothing to recover")
        return 0
    # A host with declared GPUs is leased device by device, maybe by several runs: one pass per holder.
    holders = {lease.holder.model_dump_json(): lease for lease in found}
    return max(_recover(leases, store, args, lease) for lease in holders.values())


def _recover(leases: HostLeases, store: ResultStore, args: argparse.Namespace, lease: Lease) -> int:
    now = datetime.now(timezone.utc)
    print(f"{lease_subject(lease.host)} is leased by {lease.holder.describe()} since {lease.since()}, "
          f"last heartbeat {lease.heartbeat_at.isoformat(timespec='seconds')}")
    refused = refusal(lease, now)
    if refused:
        print(refused, file=sys.stderr)
        return 2
    instance, run, status = run_status(lease.holder.run_id)
    print(f"  {status}")
    print(f"  pid: {scope_evidence(lease.holder)[1]}")
    also = [other.host for other in leases.held() if other.holder.scope == lease.holder.scope]
    cancel = run is not None and run.status in IN_PROGRESS
    plan = [f"reap orphan servers on host {args.host!r}",
            *([f"mark run {run.run_id} ({run.status.value}) canceled"] if cancel else []),
            f"release the leases of scope {lease.holder.scope}: {', '.join(also)}",
            f"record the recovery as done by {getpass.getuser()}@{socket.gethostname()}"]
    if not args.confirm_scope_gone:
        print("would:\n" + "\n".join(f"  - {step}" for step in plan))
        print(f"rerun with --confirm-scope-gone once you have confirmed scope {lease.holder.scope} is gone")
        return 0
    hosts = HostFleet(local=LocalHost(), catalog=TargetCatalog(), store=store)
    reaped = hosts.host(args.host).reap_orphans()
    if cancel:
        instance.report_run_canceled(run, message=f"owner scope {lease.holder.scope} confirmed gone "
                                                  f"(hyperloom recover by {getpass.getuser()})")
    by = {"user": getpass.getuser(), "worker": socket.gethostname(), "scope": current_scope(), "at": now.isoformat()}
    released = leases.recover_scope(lease.holder.scope, by, f"{status}; reaped {reaped.reaped}, "
                                                           f"survivors {reaped.survivors}")
    print(f"recovered: reaped {reaped.reaped or 'no'} orphan server(s); released {', '.join(released)}")
    return 0 if not reaped.survivors else 1

