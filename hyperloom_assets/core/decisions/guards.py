"""Guards on a baseline, decided in one place (DESIGN.md invariants 6 and 7). Pure code.

An agentic (trace replay) baseline served with its prefix cache off would credit the
cache as a gain later, so it is refused, judged by the engine's own launch account.
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


def consecutive_failures(outcomes: list[str]) -> int:
    """Failed baseline attempts since the last success, newest last in `outcomes`."""
    count = 0
    for outcome in reversed(outcomes):
        if outcome == "ok":
            break
        count += 1
    return count
