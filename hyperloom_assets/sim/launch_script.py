"""A test hook: what each sim launch does, scripted one line per launch.

Real engines' launches differ from one another (two vLLM CPU launches of one config
differed by 25% on a 2-core host); the sim's do not, so a test that needs a launch to be
lucky, or to crash at startup, scripts it. HYPERLOOM_SIM_LAUNCH_SCRIPT names a file with
one entry per line; each `sim-serve` start takes the first line (under a lock) and
removes it:

- `+8`, `-5`: this launch runs 8% faster (5% slower) than the performance model says,
  all the way through: every step takes 1/1.08 of its modelled time (as if the launch
  had landed on a better-behaved GPU), whatever the time scale.
- `crash`: this launch exits at startup with a fatal error, as an engine that dies does.
- `startup:3`: this launch takes 3 s more to start (before it binds its port), as an
  engine that loads or compiles slowly does.
- `exit@10`, `stall@10`, ...: this launch misbehaves from its 11th request on, as the
  `--fault KIND --fault-after-requests 10` flags say (sim/faults.py), so a test can give
  one trial's server a fault that the target's other launches do not have.

A missing or empty file, or no variable, means a plain launch. It is a harness hook, not
an engine arg: it is never in the argv, so it never becomes a candidate.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from hyperloom_assets.core.models import Frozen
from hyperloom_assets.sim.engine_args import FAULTS

SCRIPT_ENV = "HYPERLOOM_SIM_LAUNCH_SCRIPT"


class LaunchEntry(Frozen):
    speed: float = 1.0  # modelled step time per actual step time: 1.08 is an 8% luckier launch
    crash: bool = False
    startup_delay_s: float = 0.0
    fault: str | None = None  # one of engine_args.FAULTS
    fault_after_requests: int = 0


class LaunchOffset:
    """The engine's step noise with this launch's offset on top: a factor on every step time."""

    def __init__(self, noise, speed: float):  # noqa: ANN001 - scheduler.StepNoise, imported lazily by the server
        self.noise, self.scale = noise, 1.0 / speed

    def factor(self, now: float) -> float:
        return self.noise.factor(now) * self.scale


def parse_entry(line: str) -> LaunchEntry:
    text = line.strip()
    if not text:
        return LaunchEntry()
    if text == "crash":
        return LaunchEntry(crash=True)
    if text.startswith("startup:"):
        try:
            return LaunchEntry(startup_delay_s=float(text.removeprefix("startup:")))
        except ValueError as exc:
            raise ValueError(f"{SCRIPT_ENV}: expected startup:SECONDS, got {text!r}") from exc
    if "@" in text:
        kind, _, after = text.partition("@")
        if kind not in FAULTS or not after.isdigit():
            raise ValueError(f"{SCRIPT_ENV}: expected a fault as KIND@N with KIND one of {FAULTS}, got {text!r}")
        return LaunchEntry(fault=kind, fault_after_requests=int(after))
    try:
        pct = float(text)
    except ValueError as exc:
        raise ValueError(f"{SCRIPT_ENV}: expected a percentage such as +8 or 'crash', got {text!r}") from exc
    if pct <= -100:
        raise ValueError(f"{SCRIPT_ENV}: a launch cannot be {pct}% faster")
    return LaunchEntry(speed=1 + pct / 100)


def take_entry(environ: dict[str, str] | None = None) -> LaunchEntry:
    """This launch's entry: the script's first line, removed from the file."""
    name = (os.environ if environ is None else environ).get(SCRIPT_ENV)
    if not name or not Path(name).is_file():
        return LaunchEntry()
    with open(name, "r+") as script:
        fcntl.flock(script, fcntl.LOCK_EX)
        lines = script.read().splitlines()
        script.seek(0)
        script.truncate()
        script.write("".join(f"{line}\n" for line in lines[1:]))
    return parse_entry(lines[0]) if lines else LaunchEntry()
