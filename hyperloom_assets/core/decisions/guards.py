"""Guards on a baseline, decided in one place (docs/design.md, invariants 6 and 7). Pure code.

An agentic (trace replay) baseline served with its prefix cache off would credit the
cache as a gain later, so it is refused, judged by the engine's own launch account:
each engine's module says how to read it (hyperloom_assets/core/engines/).

Invariant 7, as this project reads it: within a run, a failed baseline attempt is
retried on a fresh server (a crash or a startup timeout may be the launch's, not the
config's), and the third consecutive failure stops the run with `baseline_failed`; an
argv error stops it at once (`baseline_arg_error`), and so do a refusal by invariant 6 (docs/design.md)
and a host that fails its preflight (another launch on the same host would meet the
same). "A retried baseline must change something, or it is dropped as a duplicate" is
about a later run: a run whose config (args, env, engine) is identical to one that gave
up is dropped without a launch. A run that was cancelled between attempts did not give
up, so the same config may run again.
"""

from __future__ import annotations

from typing import Any

from hyperloom_assets.core.engines import engine_for, speaking
from hyperloom_assets.core.models import Strict

PREFIX_CACHE_OFF = "agentx_baseline_prefix_cache_off"
MAX_CONSECUTIVE_BASELINE_FAILURES = 3


class Refusal(Strict):
    code: str
    engine: str
    evidence: str

    def message(self) -> str:
        return f"{self.code}: the {self.engine} baseline was served with its prefix cache off ({self.evidence})"


def prefix_cache_refusal(engine: str, server_args: list[str], evidence: dict[str, Any] | None,
                         workload_kind: str, engine_identity: str | None = None) -> Refusal | None:
    """A refusal when an agentic baseline's own launch account says the cache was off.

    `engine_identity` is the serving env's `distribution version`, for an engine whose
    default changed between releases (ATOM's prefix cache).
    """
    if workload_kind != "agentic":
        return None
    spoken = speaking(engine, server_args)
    label = engine if spoken.name == engine else f"{engine} ({spoken.name} flavor)"
    words = (engine_identity or "").split()
    version = words[1] if len(words) >= 2 else None
    why = engine_for(engine).prefix_cache_off(server_args, evidence, version)
    return Refusal(code=PREFIX_CACHE_OFF, engine=label, evidence=why) if why else None


# Error classes after which another attempt is pointless: the argv, the guard or the host says no.
STOP_AT_ONCE = {"argv_invalid": "baseline_arg_error", "prefix_cache_off": "baseline_failed",
                "preflight": "baseline_failed", "environment_unavailable": "environment_unavailable"}


def consecutive_failures(outcomes: list[str]) -> int:
    """Failed baseline attempts since the last success, newest last in `outcomes`."""
    count = 0
    for outcome in reversed(outcomes):
        if outcome == "ok":
            break
        count += 1
    return count


def after_failure(error_class: str, failures: int) -> str | None:
    """After the `failures`-th consecutive failed attempt of a run: the stop reason, or None to retry."""
    if error_class in STOP_AT_ONCE:
        return STOP_AT_ONCE[error_class]
    return "baseline_failed" if failures >= MAX_CONSECUTIVE_BASELINE_FAILURES else None


def gave_up(outcomes: list[str]) -> bool:
    """Did a run whose attempts ended with these outcomes stop on its baseline?"""
    return bool(outcomes) and outcomes[-1] != "ok" and \
        after_failure(outcomes[-1], consecutive_failures(outcomes)) is not None
