"""Guards on a baseline, decided in one place (DESIGN.md invariants 6 and 7). Pure code.

An agentic (trace replay) baseline served with its prefix cache off would credit the
cache as a gain later, so it is refused, judged by the engine's own launch account.

Invariant 7, as this project reads it: within a run, a failed baseline attempt is
retried on a fresh server (a crash or a startup timeout may be the launch's, not the
config's), and the third consecutive failure stops the run with `baseline_failed`; an
argv error stops it at once (`baseline_arg_error`), and so do a refusal by invariant 6
and a host that fails its preflight (another launch on the same host would meet the
same). "A retried baseline must change something, or it is dropped as a duplicate" is
about a later run: a run whose config (args, env, engine) is identical to one that gave
up is dropped without a launch. A run that was cancelled between attempts did not give
up, so the same config may run again.
"""

from __future__ import annotations

from typing import Any

from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.planning.seed_grids import flavor_of

PREFIX_CACHE_OFF = "agentx_baseline_prefix_cache_off"
ARGV_ERROR_MARKERS = ("unrecognized arguments", "invalid choice")
MAX_CONSECUTIVE_BASELINE_FAILURES = 3


class Refusal(Strict):
    code: str
    engine: str
    evidence: str

    def message(self) -> str:
        return f"{self.code}: the {self.engine} baseline was served with its prefix cache off ({self.evidence})"


def prefix_cache_refusal(engine: str, server_args: list[str], evidence: dict[str, Any] | None,
                         workload_kind: str) -> Refusal | None:
    """A refusal when an agentic baseline's own launch account says the cache was off."""
    if workload_kind != "agentic":
        return None
    flavor = flavor_of(engine, server_args)
    label = engine if engine == flavor else f"{engine} ({flavor} flavor)"
    if flavor == "atom":
        wanted = {"--enable_prefix_caching", "--enable-prefix-caching"}
        if not wanted & set(server_args):
            return Refusal(code=PREFIX_CACHE_OFF, engine=label,
                           evidence="ATOM keeps the prefix cache off by default and the args lack --enable-prefix-caching")
        return None
    if evidence is None:
        return None  # an unreadable launch account is left alone, never guessed
    if flavor == "vllm" and evidence.get("enable_prefix_caching") is False:
        return Refusal(code=PREFIX_CACHE_OFF, engine=label, evidence="non-default args: enable_prefix_caching: False")
    if flavor == "sglang" and evidence.get("disable_radix_cache") is True:
        return Refusal(code=PREFIX_CACHE_OFF, engine=label, evidence="server_args=ServerArgs(disable_radix_cache=True)")
    return None


def is_argv_error(log_text: str) -> bool:
    return any(marker in log_text for marker in ARGV_ERROR_MARKERS)


# Error classes after which another attempt is pointless: the argv, the guard or the host says no.
STOP_AT_ONCE = {"argv_invalid": "baseline_arg_error", "prefix_cache_off": "baseline_failed",
                "preflight": "baseline_failed"}


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
