"""The search benchmarks on the calibrated sim: each scenario timed by the packaged calibration
profile of its GPU and flavor where there is one, and how that moves the ranking of its space.

Only a scenario whose GPU and flavor have a packaged profile (hyperloom_assets/sim/profiles/)
is run again (search_quality.py --calibration auto). The ranking compares the space's points
under both truths: Spearman's rank correlation of their noise-free throughputs, each truth's
best point, and what the uncalibrated best is worth under the calibrated truth (as a share
of the calibrated attainable gain, the measure the searchers are scored by).
"""

from __future__ import annotations

from scipy.stats import spearmanr

from benchmarks.support.offline_climb import SimScenario
from benchmarks.support.quality_scenarios import cached_space
from benchmarks.support.search_space import Space
from hyperloom_assets.core.roofline.gpus import gpu_spec
from hyperloom_assets.sim.calibration import find_profile, load_profile

def calibrated(scenario: SimScenario) -> SimScenario:
    """The scenario on its GPU's packaged profile for its flavor; unchanged where there is none."""
    path = find_profile("auto", gpu_spec(scenario.gpu).name, scenario.flavor)
    if path is None:
        return scenario
    return scenario.model_copy(update={"calibration": load_profile(path).parameters,
                                       "calibration_profile": path.name})


def uncalibrated(scenario: SimScenario) -> SimScenario:
    return scenario.model_copy(update={"calibration": None, "calibration_profile": None})


def _best(space: Space) -> str:
    return max((key for key in space.truth if space.feasible(key)), key=lambda key: space.truth[key].output_throughput)


def ranking_change(after: Space, before: Space) -> dict:
    """How the calibrated truth (`after`) ranks the space's points against the uncalibrated (`before`)."""
    common = [key for key in after.keys if after.truth.get(key) is not None and before.truth.get(key) is not None]
    rho = spearmanr([before.truth[k].output_throughput for k in common],
                    [after.truth[k].output_throughput for k in common]).statistic
    best_before, best_after = _best(before), _best(after)
    argv_of = dict(zip(after.keys, after.points))  # one scenario's grid: both spaces share its keys
    return {"points": len(common), "spearman_rho": round(float(rho), 3),
            "best_uncalibrated": " ".join(argv_of[best_before]), "best_calibrated": " ".join(argv_of[best_after]),
            "best_changed": best_before != best_after,
            "uncalibrated_best_share_calibrated": round(after.share(argv_of[best_before]), 3)}


def calibration_fields(scenario: SimScenario, workers: int) -> dict:
    """A calibrated scenario's row additions: the profile, and the ranking against the uncalibrated space."""
    return {"calibration_profile": scenario.calibration_profile,
            "ranking_vs_uncalibrated": ranking_change(cached_space(scenario, workers),
                                                      cached_space(uncalibrated(scenario), workers))}
