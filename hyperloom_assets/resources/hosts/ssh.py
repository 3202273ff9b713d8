"""A GPU host reached over SSH: the same lifecycle as the local host, another transport.

The system `ssh` runs with `BatchMode=yes` and `StrictHostKeyChecking=yes` against the
host's own known_hosts file; every remote command is an argv list quoted with
`shlex.join`, never a shell string made from target data. Each lifecycle step runs on
the host as `python -m hyperloom_assets.cli host-agent OP` (agent.py) with its request
on stdin; files come back with `tar` over the same connection. The benchmark client
runs on the host beside the server, so the network between here and there stays out
of the numbers. An SSH failure is a ServerError of class `environment_unavailable`
naming the host and what failed (refused, authentication denied, host key mismatch,
timeout): the host could not be had, which says nothing about a config.
"""

from __future__ import annotations

import io
import json
import logging
import shlex
import subprocess
import tarfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import dagster as dg

from hyperloom_assets.core.config.hosts import SshHostConfig
from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.fleet.slots import Slot
from hyperloom_assets.core.measurement.measurement import Measurement
from hyperloom_assets.core.measurement.serving import CpuPlacement, LaunchRecord, ServerError, ServerSpec
from hyperloom_assets.resources.hosts import host_side
from hyperloom_assets.resources.hosts.agent_call import (OP_TIMEOUT_S, agent_reply, bench_limit_s, bench_request,
                                                         progress_relay, streamed)
from hyperloom_assets.resources.hosts.lifecycle import serve_on
from hyperloom_assets.resources.bench.client import BenchmarkClient, ProgressFn
from hyperloom_assets.resources.hosts.process_group import TeardownResult
from hyperloom_assets.resources.hosts.reaper import ReapReport

log = logging.getLogger(__name__)

# What ssh prints for each way of failing (exit status 255), in the order they are tried.
SSH_FAILURES = (
    ("host key mismatch", ("REMOTE HOST IDENTIFICATION HAS CHANGED", "Host key verification failed",
                           "No matching host key", "host key for", "is not known")),
    ("authentication denied", ("Permission denied", "Too many authentication failures")),
    ("connection refused", ("Connection refused",)),
    ("timeout", ("timed out", "Connection timeout", "Operation timed out")),
    ("unreachable", ("No route to host", "Could not resolve hostname", "Network is unreachable")),
)


def ssh_failure(host: str, stderr: str) -> str:
    """What went wrong, in words, from ssh's own message."""
    text = stderr.strip()
    for kind, markers in SSH_FAILURES:
        if any(marker in text for marker in markers):
            return f"host {host!r}: ssh {kind}: {text.splitlines()[-1] if text else ''}"
    return f"host {host!r}: ssh failed: {text.splitlines()[-1] if text else 'no message'}"


class SshTransport:
    def __init__(self, name: str, config: SshHostConfig, local_runs: Path, check_foreign_processes: bool,
                 term_wait_s: float, slot: Slot | None = None):
        self.name, self.config, self.local_runs = name, config, local_runs
        self.check_foreign, self.term_wait_s, self.slot = check_foreign_processes, term_wait_s, slot
        self.pid_dir = f"{config.workdir}/pids"

    def ssh_argv(self, remote: list[str]) -> list[str]:
        c = self.config
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"UserKnownHostsFile={c.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", "IdentitiesOnly=yes", "-o", f"ConnectTimeout={max(1, round(c.connect_timeout_s))}",
                "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3", "-o", "LogLevel=ERROR",
                "-i", str(c.identity_file), "-p", str(c.port)]
        if c.user:
            argv += ["-l", c.user]
        # `--` before the destination: no address can be read as an option (the hosts file checks it too).
        return argv + ["--", c.address, shlex.join(remote)]

    def run(self, remote: list[str], stdin: bytes = b"", timeout_s: float = OP_TIMEOUT_S,
            on_progress: Callable[[dict], None] | None = None) -> subprocess.CompletedProcess:
        """One remote command; ServerError(environment_unavailable) when ssh itself failed.
        With `on_progress`, each PROGRESS_MARK line of its stdout is handed to it as it comes."""
        limit_s = timeout_s + self.config.connect_timeout_s
        try:
            if on_progress is None:
                done = subprocess.run(self.ssh_argv(remote), input=stdin, capture_output=True, timeout=limit_s)
            else:
                done = streamed(self.ssh_argv(remote), stdin, limit_s, on_progress)
        except subprocess.TimeoutExpired as error:
            raise ServerError("environment_unavailable", f"host {self.name!r}: ssh timeout: no answer within "
                              f"{limit_s:.0f} s ({remote[0]} ...)") from error
        except OSError as error:
            raise ServerError("environment_unavailable", f"host {self.name!r}: cannot run ssh: {error}") from error
        if done.returncode == 255:
            raise ServerError("environment_unavailable", ssh_failure(self.name, done.stderr.decode(errors="replace")))
        return done

    def call(self, op: str, request: dict, timeout_s: float = OP_TIMEOUT_S,
             on_progress: Callable[[dict], None] | None = None) -> dict:
        """One host-agent op on the host; its reply, or its ServerError raised here."""
        done = self.run([self.config.python, "-m", "hyperloom_assets.cli", "host-agent", op],
                        json.dumps(request).encode(), timeout_s, on_progress)
        return agent_reply(self.name, op, self.config.python, done)

    def prepare(self, spec: ServerSpec, python: Path) -> host_side.Prepared:
        return host_side.Prepared.model_validate(self.call("prepare", {
            "pid_dir": self.pid_dir, "engine": spec.engine, "python": str(python), "check_foreign": self.check_foreign,
            "env": spec.env, "unset_env": spec.unset_env, "term_wait_s": self.term_wait_s,
            "client_cpus": self.config.client_cpus, "slot": self._slot()}))

    def start(self, argv: list[str], spec: ServerSpec, log_path: str, server_cpus: list[int] | None) -> dict:
        tree = str(spec.framework_tree) if spec.framework_tree else None  # a path on the host
        return self.call("start", {"argv": argv, "env": spec.env, "unset_env": spec.unset_env, "log_path": log_path,
                                   "pid_dir": self.pid_dir, "engine": spec.engine, "framework_tree": tree,
                                   "server_cpus": server_cpus, "slot": self._slot()})

    def _slot(self) -> dict | None:
        return self.slot.model_dump(mode="json") if self.slot else None

    def wait_ready(self, started: dict, spec: ServerSpec, port: int, log_path: str, timeout_s: float,
                   argv: list[str], still_starting=None) -> None:
        """The host's agent waits in windows of STILL_STARTING_NOTE_S, so a slow start on an SSH
        host is relayed here as still-starting notes, as a local one is."""
        began = time.monotonic()
        while True:
            window_s = min(host_side.STILL_STARTING_NOTE_S, max(timeout_s - (time.monotonic() - began), 1.0))
            try:
                self.call("wait_ready", {"record": started["record"], "engine": spec.engine, "port": port,
                                         "log_path": log_path, "timeout_s": window_s, "argv": argv}, window_s + 30)
                return
            except ServerError as error:
                waited_s = time.monotonic() - began
                if error.error_class != "timeout":
                    raise
                if waited_s >= timeout_s:
                    raise ServerError("timeout", f"not ready within {timeout_s:.0f} s", error.log_tail, argv) from error
                if still_starting is not None:
                    still_starting(waited_s)

    def stop(self, started: dict) -> TeardownResult:
        reply = self.call("stop", {"record": started["record"], "pidfile": started["pidfile"],
                                   "term_wait_s": self.term_wait_s}, self.term_wait_s + 30)
        return TeardownResult(**reply)

    def host_dir(self, run_dir: Path) -> str:
        """The host's folder for a run folder here: the same path under the host's workdir."""
        return f"{self.config.workdir}/runs/{Path(run_dir).resolve().relative_to(self.local_runs.resolve()).as_posix()}"

    def fetch(self, host_dir: str, run_dir: Path) -> None:
        """Bring the host's files of this step (server log, request records) into the run folder."""
        done = self.run(["tar", "-C", host_dir, "-cf", "-", "."])
        if done.returncode != 0:
            raise ServerError("environment_unavailable", f"host {self.name!r}: could not fetch {host_dir}: "
                              f"{done.stderr.decode(errors='replace').strip()}")
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
            archive.extractall(run_dir, filter="data")

    def remove(self, host_dir: str) -> None:
        """Delete a step's folder on the host, and its run's and target's once they are empty."""
        self.call("clean", {"folder": host_dir, "root": f"{self.config.workdir}/runs"})


class SshHost(dg.ConfigurableResource):
    """A GPU host of the hosts file reached over SSH (a Host, host.py); its state (runs, pidfiles) is under
    `workdir` there, and its run folders here under `state_dir` like the local host's."""

    name: str
    config: dict  # the SshHostConfig fields (a resource's config is plain data)
    state_dir: str
    check_foreign_processes: bool = True
    teardown_term_wait_s: float = 15.0
    slot: dict | None = None  # the run's slot on this host (core/fleet/slots.Slot), from the fleet

    def ssh(self) -> SshHostConfig:
        return SshHostConfig.model_validate(self.config)

    def transport(self) -> SshTransport:
        return SshTransport(self.name, self.ssh(), self.state_path() / "runs", self.check_foreign_processes,
                            self.teardown_term_wait_s, Slot.model_validate(self.slot) if self.slot else None)

    def slot_facts(self) -> dict:
        """The GPU tool, its topology matrix and the CPUs, read on the host (host_side.slot_facts)."""
        return self.transport().call("slot_facts", {})

    def state_path(self) -> Path:
        return Path(self.state_dir)

    def python_executable(self, spec: ServerSpec) -> Path:
        return Path(spec.python) if spec.python else Path(self.ssh().python)

    def facts(self) -> dict:
        t0 = time.time()
        facts = self.transport().call("facts", {"python": self.ssh().python})
        facts["clock_skew_s"] = facts["time"] - (t0 + time.time()) / 2
        return facts

    def gpu_names(self) -> list[str]:
        return [gpu["name"] for gpu in self.facts()["gpus"]]

    def engine_identity(self, spec: ServerSpec) -> str | None:
        return self.facts()["engines"].get(spec.engine)

    def proposal_checks(self, request: dict) -> dict:
        """The same checks as the local host's, run on the host by its agent."""
        return self.transport().call("proposal_checks", request)

    def reap_orphans(self) -> ReapReport:
        """This tool's orphan servers on the host, torn down there (docs/design.md, invariant 8)."""
        transport = self.transport()
        return ReapReport(**transport.call("reap", {"pid_dir": transport.pid_dir,
                                                    "term_wait_s": self.teardown_term_wait_s}))

    @contextmanager
    def serve(self, spec: ServerSpec, run_dir: Path, label: str | None = None) -> Iterator[LaunchRecord]:
        transport = self.transport()
        try:
            with serve_on(transport, self.name, spec, self.python_executable(spec), run_dir, label) as launch:
                yield launch
        finally:
            try:
                transport.remove(transport.host_dir(Path(run_dir)))
            except ServerError as error:
                log.warning("host %r: step folder left on the host: %s", self.name, error)

    def post(self, url: str, timeout_s: float) -> dict:
        """A server's control route, POSTed by the host's agent beside the server."""
        return self.transport().call("post", {"url": url, "timeout_s": timeout_s}, timeout_s + OP_TIMEOUT_S)

    def served_path(self, run_dir: Path) -> str:
        """The step's folder on the host, which comes back whole with the server log at teardown."""
        return self.transport().host_dir(Path(run_dir))

    def measure(self, bench: BenchmarkClient, base_url: str, served_model: str, workload: Workload, vocab_size: int,
                repeats: int, warmups: int | None = None, num_prompts: int | None = None,
                records_dir: Path | None = None, max_model_len: int | None = None, timeout_s: float | None = None,
                progress: ProgressFn | None = None,
                cpus: CpuPlacement | None = None) -> Measurement:
        """The benchmark client on the host beside the server (on the placement's client CPUs). Its records
        are written into the step's folder there, which comes back whole with the server log at teardown.
        The time limit holds there too (the caller's, else the workload's, never past the client's
        max_measurement_s; the ssh call itself ends a little after); each round's progress comes back as
        the agent reports it."""
        transport, local = self.transport(), Path(records_dir) if records_dir else None
        host_records = transport.host_dir(local) if local else f"{self.ssh().workdir}/runs/bench"
        reply = transport.call("bench", bench_request(
            bench, base_url, served_model, workload, vocab_size, repeats, warmups, num_prompts, host_records,
            max_model_len, timeout_s, cpus.client_cpus if cpus else None),
            timeout_s=bench_limit_s(bench, timeout_s), on_progress=progress_relay(progress))
        return Measurement.model_validate(reply)
