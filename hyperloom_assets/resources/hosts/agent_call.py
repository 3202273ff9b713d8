"""Calling the host agent (agent.py) and reading its reply, on any host.

An SSH host runs every lifecycle step through the agent over `ssh` (ssh.py). A slot of a
host on this machine runs its benchmark client through the same agent op (`bench`), as a
process of its own (local.py): the clients of a run's slots then share no interpreter, and
so no GIL, and a client's own work does not grow with the launches in flight beside it.
Both read the reply here, so an error crosses back as the same exception on every host.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.measurement.serving import BenchOvertime, ServerError
from hyperloom_assets.resources.bench.client import BenchmarkClient, ProgressFn
from hyperloom_assets.resources.bench.runner import BenchInputError, BenchRunError, RoundFailed, RoundProgress
from hyperloom_assets.resources.hosts.agent import PROGRESS_MARK, REPLY_MARK

OP_TIMEOUT_S = 120.0  # what an op may take past its own limit (a process start, a connection)


def streamed(argv: list[str], stdin: bytes, timeout_s: float,
             on_progress: Callable[[dict], None]) -> subprocess.CompletedProcess:
    """subprocess.run with capture, except that each PROGRESS_MARK line of stdout goes to
    `on_progress` as it arrives, in this thread (the run log's), and is left out of stdout."""
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    expired = threading.Event()
    timer = threading.Timer(timeout_s, lambda: (expired.set(), process.kill()))
    errors: list[bytes] = []
    drain = threading.Thread(target=lambda: errors.append(process.stderr.read()), daemon=True)
    out: list[bytes] = []
    mark = PROGRESS_MARK.encode()
    timer.start()
    drain.start()
    try:
        process.stdin.write(stdin)
        process.stdin.close()
        for line in process.stdout:
            if line.startswith(mark):
                on_progress(json.loads(line[len(mark):]))
            else:
                out.append(line)
        process.wait()
        drain.join()
    finally:
        timer.cancel()
        if process.poll() is None:  # an interrupt here: the process goes with it
            process.kill()
            process.wait()
    if expired.is_set():
        raise subprocess.TimeoutExpired(argv, timeout_s)
    return subprocess.CompletedProcess(argv, process.returncode, b"".join(out), b"".join(errors))


def agent_reply(host: str, op: str, python: str, done: subprocess.CompletedProcess) -> dict:
    """The agent's reply to `op`, or the error it sent back raised here as itself."""
    out = done.stdout.decode(errors="replace")
    line = next((l for l in reversed(out.splitlines()) if l.startswith(REPLY_MARK)), None)
    if line is None:
        tail = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise ServerError("environment_unavailable", f"host {host!r}: the host agent under "
                          f"{python} did not answer {op} ({tail}); is the project's client "
                          f"installed there? (`hyperloom hosts bootstrap {host}`)")
    reply = json.loads(line[len(REPLY_MARK):])
    if "server_error" in reply:
        failure = reply["server_error"]
        if failure.get("round_failed"):
            raise RoundFailed(failure["error_class"], failure["message"])
        raise ServerError(failure["error_class"], failure["message"], failure["log_tail"], failure["argv"])
    if "overtime" in reply:
        raise BenchOvertime(**reply["overtime"])
    if "agent_error" in reply:
        failure = reply["agent_error"]
        known = {"BenchInputError": BenchInputError, "BenchRunError": BenchRunError}.get(failure["type"], RuntimeError)
        raise known(f"host {host!r}: {op}: {failure['type']}: {failure['message']}")
    return reply["ok"]


def bench_request(bench: BenchmarkClient, base_url: str, served_model: str, workload: Workload, vocab_size: int,
                  repeats: int, warmups: int | None, num_prompts: int | None, records_dir: str,
                  max_model_len: int | None, timeout_s: float | None, client_cpus: list[int] | None) -> dict:
    """The agent's `bench` request: the client's rounds as BenchmarkClient.measure would run them."""
    return {"base_url": base_url, "served_model": served_model, "workload": workload.model_dump(mode="json"),
            "vocab_size": vocab_size, "repeats": repeats, "warmups": warmups, "num_prompts": num_prompts,
            "records_dir": records_dir, "max_model_len": max_model_len, "timeout_s": timeout_s,
            "client_cpus": client_cpus, "stall_timeout_s": bench.stall_timeout_s,
            "max_measurement_s": bench.max_measurement_s}


def bench_limit_s(bench: BenchmarkClient, timeout_s: float | None) -> float:
    """How long a `bench` op may take: the client's own limit (it stops itself there), and a margin."""
    return min(timeout_s or bench.max_measurement_s, bench.max_measurement_s) + OP_TIMEOUT_S


def progress_relay(progress: ProgressFn | None) -> Callable[[dict], None] | None:
    return (lambda line: progress(RoundProgress.model_validate(line))) if progress else None


def bench_in_process_of_its_own(host: str, request: dict, limit_s: float, progress: ProgressFn | None) -> dict:
    """The agent's `bench` op as a client process of its own on this machine, in this interpreter."""
    argv = [sys.executable, "-m", "hyperloom_assets.cli", "host-agent", "bench"]
    try:
        done = streamed(argv, json.dumps(request).encode(), limit_s, progress_relay(progress) or (lambda _: None))
    except subprocess.TimeoutExpired as error:
        raise BenchOvertime(limit_s, limit_s, "the client process did not end within its limit") from error
    return agent_reply(host, "bench", str(Path(sys.executable)), done)
