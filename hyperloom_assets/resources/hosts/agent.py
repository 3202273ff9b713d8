"""`hyperloom host-agent OP`: the lifecycle's host-side steps, run on an SSH host.

The control node sends one JSON request on stdin and reads one JSON reply, the last
line of stdout after REPLY_MARK (a benchmark's rounds report on lines after PROGRESS_MARK
before it, which the control node logs as they come). Each op calls the same host_side / process_group /
benchmark-client functions the local host calls in-process, so both hosts keep one
implementation. A ServerError crosses back as itself (its class, message, log tail);
anything else is an agent error. No Dagster is imported here, so each call starts fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable

from hyperloom_assets.core.engines import known_engines
from hyperloom_assets.core.fleet.slots import Slot
from hyperloom_assets.core.measurement.serving import BenchOvertime, ServerError
from hyperloom_assets.resources.hosts import host_side
from hyperloom_assets.resources.hosts.engines import identity, installed_in
from hyperloom_assets.resources.hosts.preflight import allocate_port, read_gpu_memory
from hyperloom_assets.resources.hosts.process_group import PidRecord
from hyperloom_assets.resources.hosts.reaper import reap_orphans, recorded_exit, stop_recorded
from hyperloom_assets.resources.hosts.proposal_checks import proposal_checks

REPLY_MARK = "HYPERLOOM-AGENT-REPLY "
# A line of stdout the control node relays as it comes: a benchmark round's progress.
PROGRESS_MARK = "HYPERLOOM-AGENT-PROGRESS "


def _print_progress(progress) -> None:  # noqa: ANN001 - a runner.RoundProgress, imported lazily
    sys.stdout.write(PROGRESS_MARK + progress.model_dump_json() + "\n")
    sys.stdout.flush()


def _slot(req: dict) -> Slot | None:
    return Slot.model_validate(req["slot"]) if req.get("slot") else None


def _prepare(req: dict) -> dict:
    prepared = host_side.prepare(Path(req["pid_dir"]), req["engine"], Path(req["python"]), req["check_foreign"],
                                 req["env"], req["unset_env"], req["term_wait_s"], req.get("client_cpus", "auto"),
                                 _slot(req))
    return prepared.model_dump(mode="json")


def _start(req: dict) -> dict:
    server = host_side.start(req["argv"], req["env"], req["unset_env"], Path(req["log_path"]), Path(req["pid_dir"]),
                             req.get("engine"), req.get("framework_tree"), req.get("server_cpus"), _slot(req))
    # This agent exits now; the server runs on in its own session, watched through its pidfile.
    return {"record": server.record.model_dump(mode="json"), "pidfile": str(server.pidfile)}


def _wait_ready(req: dict) -> dict:
    record = PidRecord.model_validate(req["record"])
    host_side.wait_ready(lambda: recorded_exit(record), req["engine"], req["port"], Path(req["log_path"]),
                         req["timeout_s"], req["argv"])
    return {}


def _stop(req: dict) -> dict:
    result = stop_recorded(PidRecord.model_validate(req["record"]), Path(req["pidfile"]), req["term_wait_s"])
    return {"elapsed_s": result.elapsed_s, "signalled": result.signalled, "survivors": result.survivors,
            "killed": result.killed}


def _reap(req: dict) -> dict:
    report = reap_orphans(Path(req["pid_dir"]), term_wait_s=req["term_wait_s"])
    return dataclasses.asdict(report)  # the kept and dropped pidfiles too, as the local host's report has them


def _clean(req: dict) -> dict:
    folder, root = Path(req["folder"]), Path(req["root"])
    if root.resolve() not in folder.resolve().parents:  # only a run folder, strictly inside runs/, ever goes
        raise ValueError(f"refusing to delete {folder}: it is not inside {root}")
    shutil.rmtree(folder, ignore_errors=True)
    for parent in folder.parents:
        if parent == root or root not in parent.parents:
            break
        try:
            parent.rmdir()  # only when empty: another step's files stay
        except OSError:
            break
    return {}


def _bench(req: dict) -> dict:
    from hyperloom_assets.core.config.targets import Workload
    from hyperloom_assets.resources.bench.runner import measure
    from hyperloom_assets.resources.hosts.cpu_pinning import pinned_thread

    with pinned_thread(req.get("client_cpus")):
        measurement = measure(req["base_url"], req["served_model"], Workload.model_validate(req["workload"]),
                              req["vocab_size"], repeats=req["repeats"], warmups=req["warmups"],
                              num_prompts=req["num_prompts"], records_dir=Path(req["records_dir"]),
                              max_model_len=req["max_model_len"], timeout_s=req.get("timeout_s"),
                              sock_read_timeout_s=req["stall_timeout_s"], progress=_print_progress,
                              **({"max_total_s": req["max_measurement_s"]} if req.get("max_measurement_s") else {}))
    return measurement.model_dump(mode="json")


def _post(req: dict) -> dict:
    return host_side.control_post(req["url"], req["timeout_s"])


def facts(req: dict) -> dict:
    """What `hyperloom hosts check` prints: engines, GPUs, a free port, the clock."""
    python = Path(req.get("python") or sys.executable)
    engines = {name: identity(spec, installed_in(spec, python)) for name, spec in known_engines().items()}
    try:
        reading = read_gpu_memory()
        gpus = [{"index": g.index, "name": g.name, "used_mib": g.used_mib, "total_mib": g.total_mib}
                for g in reading[1]] if reading else []
        gpu_tool, gpu_error = (reading[0] if reading else None), None
    except (ValueError, OSError) as error:
        gpus, gpu_tool, gpu_error = [], None, str(error)
    return {"hostname": socket.gethostname(), "platform": platform.platform(), "python": str(python),
            "engines": engines, "gpu_tool": gpu_tool, "gpus": gpus, "gpu_error": gpu_error,
            "free_port": allocate_port(), "cpus": os.cpu_count(), "time": time.time()}


def slot_facts(req: dict) -> dict:
    """What a slot is planned from (core/fleet/slots.py): the GPU tool, its topology matrix, the CPUs."""
    return host_side.slot_facts()


OPS: dict[str, Callable[[dict], dict]] = {"slot_facts": slot_facts, "prepare": _prepare, "start": _start, "wait_ready": _wait_ready,
                                          "stop": _stop, "reap": _reap, "bench": _bench, "facts": facts,
                                          "clean": _clean, "proposal_checks": proposal_checks, "post": _post}


def handle(op: str, request: dict) -> dict[str, Any]:
    try:
        return {"ok": OPS[op](request)}
    except ServerError as error:  # a round's failed requests (the client's RoundFailed) are one too, and say so
        return {"server_error": {"error_class": error.error_class, "message": error.message,
                                 "log_tail": error.log_tail, "argv": error.argv,
                                 "round_failed": type(error).__name__ == "RoundFailed"}}
    except BenchOvertime as error:  # the control node raises it again, so overtime reads the same on every host
        return {"overtime": {"elapsed_s": error.elapsed_s, "limit_s": error.limit_s, "why": error.why}}
    except Exception as error:  # noqa: BLE001 - it crosses back to the control node, which raises it
        return {"agent_error": {"type": type(error).__name__, "message": str(error)}}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hyperloom host-agent", description=__doc__.splitlines()[0].strip("`"),
                                epilog="It reads one JSON request on stdin and writes its JSON reply as the last line of stdout.")
    p.add_argument("op", choices=list(OPS), help="the lifecycle step to run")
    return p


def main(argv: list[str]) -> int:
    op = parser().parse_args(argv).op  # a bad op: usage on stderr, exit 2
    reply = handle(op, json.loads(sys.stdin.read() or "{}"))
    sys.stdout.write(REPLY_MARK + json.dumps(reply) + "\n")
    return 0
