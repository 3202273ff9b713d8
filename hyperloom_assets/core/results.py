"""The values assets hand each other (stored by Dagster's IO manager). Pure models."""

from __future__ import annotations

from hyperloom_assets.core.decisions.climb import ClimbResult
from hyperloom_assets.core.measurement.contract import WorkloadContract
from hyperloom_assets.core.measurement.measurement import Measurement
from hyperloom_assets.core.measurement.serving import LaunchRecord, ServerSpec
from hyperloom_assets.core.measurement.stats import Launches
from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.releases.run import ReleaseCheck, ReleaseRun
from hyperloom_assets.core.roofline.roofline import Achieved, Hardware, Roofline


class BaselineResult(Strict):
    """The anchor of every later gain (invariant 5) and the workload contract (invariant 4)."""

    target: str
    spec: ServerSpec
    measurement: Measurement
    launch: LaunchRecord
    contract: WorkloadContract
    measurement_id: int
    measuring_s: float
    framework_version: str
    config_version: str
    context_key: str
    run_id: str
    release: ReleaseRun | None = None  # set on a release-triggered run


class RooflineResult(Strict):
    roofline: Roofline
    hardware: Hardware  # what the ceiling was computed for: other concurrencies' ceilings need it
    achieved: Achieved
    warnings: list[str] = []


class TrialsResult(Strict):
    climb: ClimbResult
    baseline_mean: float
    context_key: str
    launch_noise_dof: int = 0  # degrees of freedom of the launch noise pooled from earlier runs (0: none)


class StackResult(Strict):
    keepers: list[Variant]
    conflicts: list[str]
    final_argv: list[str]  # the full engine command, harness flags left out (invariant 3)
    launch_argv: list[str]  # what was launched, harness flags included: the command to reproduce
    final_env: dict[str, str]
    validated: bool
    base_launches: Launches  # the validation's, launch by launch
    stack_launches: Launches
    final_output_throughput: float
    validated_gain_pct: float
    validated_gain_ci_low: float
    validated_gain_ci_high: float
    stop_reason: str
    release_check: ReleaseCheck | None = None  # on a release run: the earlier stack on the new release


class SweepResult(Strict):
    rows: list[dict]
    plots: list[str]
