"""Guards on a baseline, decided in one place (DESIGN.md invariants 6 and 7). Pure code.

An agentic (trace replay) baseline served with its prefix cache off would credit the
cache as a gain later, so it is refused, judged by the engine's own launch account:
each engine's module says how to read it (hyperloom_assets/core/engines/).
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


def consecutive_failures(outcomes: list[str]) -> int:
    """Failed baseline attempts since the last success, newest last in `outcomes`."""
    count = 0
    for outcome in reversed(outcomes):
        if outcome == "ok":
            break
        count += 1
    return count
