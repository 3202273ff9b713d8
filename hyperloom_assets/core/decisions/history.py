"""Launch noise from earlier runs: what a first look may lean on. Pure code.

Launch-to-launch noise is a property of the host, the engine and the model more than of
one config, so every run keeps the launch means of each config it launched more than
once, keyed by those three (`launch_noise_key`), and a later run pools them
(stats.pooled_launch_noise) into the prior its decisions start from, when the history
is recent (HISTORY_MAX_AGE) and large enough (HISTORY_MIN_DOF). Without it the first
look of the first trial has no launch-level interval and cannot decide.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from datetime import timedelta

from hyperloom_assets.core.hashing import canonical_hash
from hyperloom_assets.core.measurement.stats import Launches, LaunchNoise, pooled_launch_noise

HISTORY_MAX_AGE = timedelta(days=14)  # older launches may predate a driver, firmware or load change
HISTORY_MIN_DOF = 6  # fewer pooled degrees of freedom than this is no prior at all


def launch_noise_key(host: str, engine: str, engine_identity: str, model: str) -> str:
    """What launch noise is pooled over: the host, the engine and its release or tree, the model."""
    return canonical_hash({"host": host, "engine": engine, "identity": engine_identity, "model": model})


def launch_means(evidence: dict[str, Launches]) -> dict[str, list[float]]:
    """Each config's launch means, for configs launched at least twice."""
    return {key: [statistics.fmean(launch) for launch in launches]
            for key, launches in evidence.items() if len(launches) >= 2}


def prior_from(groups: Sequence[Sequence[float]]) -> LaunchNoise | None:
    """The pooled prior of earlier runs, or None when they are too few to lean on."""
    pooled = pooled_launch_noise(groups)
    return pooled if pooled is not None and pooled.dof >= HISTORY_MIN_DOF else None
