"""The sequence cap the SLO allows, read from the trials so far. Pure code.

A larger batch streams each request's tokens more slowly: TPOT, and so E2E latency, grow
with the number of sequences decoded together. Once a trial that set the sequence cap to
N was shown breaking the SLO's TPOT or E2E limit (a lower bound over it), every cap of N or
more would break it too (on this workload, whatever else the stack holds), so the planner
stops proposing them instead of spending a launch on each.
"""

from __future__ import annotations

from collections.abc import Sequence

from hyperloom_assets.core.config.targets import TargetSlo
from hyperloom_assets.core.measurement.slo_verdict import SloVerdict
from hyperloom_assets.core.planning.seed_grids import SeedGrid
from hyperloom_assets.core.planning.variants import Variant, setting_key, split_args


def broke_batch_latency(slo: TargetSlo | None, verdict: SloVerdict | None) -> bool:
    """The verdict was shown breaking a limit that the batch size drives (TPOT or E2E): its lower bound is
    over it. A bound merely over the limit rules nothing out: the cap may well meet it (slo_verdict.py).
    A verdict without a lower bound (recorded before they were kept, or too few requests) reads its upper."""
    if slo is None or verdict is None or verdict.met:
        return False
    return any(limit is not None and (lower if lower is not None else upper or 0.0) > limit
               for limit, lower, upper in ((slo.tpot_ms, verdict.tpot_lower_ms, verdict.tpot_upper_ms),
                                           (slo.e2e_ms, verdict.e2e_lower_ms, verdict.e2e_upper_ms)))


def cap_set_by(variant: Variant, cap_flag: str, booleans: frozenset[str]) -> int | None:
    """The sequence cap a variant sets (the last value it adds), or None when it sets none."""
    found = None
    for setting in split_args(variant.add_args, booleans):
        if setting.flag and setting_key(setting.flag) == setting_key(cap_flag) and setting.value is not None:
            try:
                found = int(setting.value)
            except ValueError:
                return None
    return found


def cap_ceiling(broke: Sequence[Variant], cap_flag: str, booleans: frozenset[str]) -> int | None:
    """The smallest cap set by a trial that broke TPOT or E2E (`broke`): caps from it on are not proposed."""
    caps = [cap for variant in broke if (cap := cap_set_by(variant, cap_flag, booleans)) is not None]
    return min(caps) if caps else None


def over_ceiling(variant: Variant, ceiling: int | None, grid: SeedGrid, host: str) -> bool:
    """The variant sets the cap at or over the ceiling, or drops it for an engine default that is."""
    if ceiling is None:
        return False
    flag = grid.sequence_cap_flag
    cap = cap_set_by(variant, flag, grid.boolean_flag_set())
    if cap is None and any(setting_key(removed) == setting_key(flag) for removed in variant.remove_args):
        default = grid.default_value(flag, host)
        cap = int(default) if default is not None and default.isdigit() else None
    return cap is not None and cap >= ceiling
