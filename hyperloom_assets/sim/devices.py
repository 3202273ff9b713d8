"""The sim's emulated GPUs: a server holds the devices it is given, as a real engine's CUDA
context holds a GPU's memory, so two servers on one device fail the way real ones would.

A launch given `CUDA_VISIBLE_DEVICES` (a slot of a host that declares its GPUs: core/fleet/
slots.py) takes its first `--tp` devices, as tensor-parallel ranks take the visible devices
in order, and holds each for its life with an exclusive lock on a file of the host's device
folder (`HYPERLOOM_SIM_DEVICES_DIR`, default a folder of this user under the system's temp
folder). The lock goes with the process, however it ends. A device another server holds
fails the launch with torch's out-of-memory words, which the engine's fatal markers read;
too few visible devices fail it as a real engine refuses a world size over its GPUs. Every
claim is a line of the folder's `claims.jsonl`: which server held which device, from when.
Without `CUDA_VISIBLE_DEVICES` the sim stands for a whole host and claims nothing.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

DEVICES_DIR_ENV = "HYPERLOOM_SIM_DEVICES_DIR"
VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


class DeviceClaimError(RuntimeError):
    """The launch cannot have its devices; the message is what the server prints before it exits."""


def devices_dir(environ: Mapping[str, str]) -> Path:
    named = environ.get(DEVICES_DIR_ENV)
    return Path(named) if named else Path(tempfile.gettempdir()) / f"hyperloom-sim-devices-{os.getuid()}"


def visible_devices(environ: Mapping[str, str]) -> list[int] | None:
    text = environ.get(VISIBLE_ENV)
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise DeviceClaimError(f"ValueError: {VISIBLE_ENV}={text!r}: expected device ids like 0,1") from None


def claim_devices(tp: int, environ: Mapping[str, str] = os.environ) -> tuple[list[int], list[IO[str]]]:
    """(the devices this server holds, the open lock files that hold them: keep them open)."""
    visible = visible_devices(environ)
    if visible is None:
        return [], []
    if tp > len(visible):
        raise DeviceClaimError(f"ValueError: tensor parallel size {tp} is larger than the number of available GPUs "
                               f"({len(visible)}: {VISIBLE_ENV}={environ[VISIBLE_ENV]})")
    folder = devices_dir(environ)
    folder.mkdir(parents=True, exist_ok=True)
    held: list[IO[str]] = []
    for device in visible[:tp]:
        lock = open(folder / f"gpu{device}.lock", "a+")  # noqa: SIM115 - held open for the server's life
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another server"
            lock.close()
            for other in held:
                other.close()
            raise DeviceClaimError(f"torch.OutOfMemoryError: CUDA out of memory on device {device}: it is held by "
                                   f"{holder} (sim: an emulated GPU serves one server)") from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()}")
        lock.flush()
        held.append(lock)
    _log(folder, "held", visible[:tp])
    return visible[:tp], held


def free_devices(devices: list[int], held: list[IO[str]], environ: Mapping[str, str] = os.environ) -> None:
    """The server is done with its devices (a killed one frees them with its process, unlogged)."""
    for lock in held:
        lock.close()
    if devices:
        _log(devices_dir(environ), "freed", devices)


def _log(folder: Path, event: str, devices: list[int]) -> None:
    with open(folder / "claims.jsonl", "a") as log:
        log.write(json.dumps({"event": event, "pid": os.getpid(), "devices": devices, "at": time.time()}) + "\n")


def read_claims(folder: Path) -> list[dict]:
    path = folder / "claims.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
