"""The values assets hand each other (stored by Dagster's IO manager). Pure models."""

from __future__ import annotations

from hyperloom_assets.core.decisions.climb import ClimbResult
from hyperloom_assets.core.measurement.contract import WorkloadContract
from hyperloom_assets.core.measurement.measurement import Measurement
from hyperloom_assets.core.measurement.serving import LaunchRecord, ServerSpec
from hyperloom_assets.core.measurement.stats import Launches
from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.patches.run_tree import RunTree
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
    run_tree: RunTree | None = None  # a tree target: the run's worktree, served at its base commit


class RooflineResult(Strict):
    roofline: Roofline
    hardware: Hardware  # what the ceiling was computed for: other concurrencies' ceilings need it
    achieved: Achieved
    warnings: list[str] = []


class TrialsResult(Strict):
    climb: ClimbResult
    baseline_mean: float
    context_key: str
    tree_commit: str | None = None  # the run branch's head after the climb: the running best's tree
    patch_commits: dict[str, str] = {}  # fingerprint of a kept patch trial -> its commit on the branch
    launch_noise_dof: int = 0  # degrees of freedom of the launch noise pooled from earlier runs (0: none)


class PatchRecord(Strict):
    """One kept source patch, as accepted_patches reports it."""
    name: str
    source: str
    sha256: str
    files: list[str]
    commit: str
    trial: str  # the trial's name
    fingerprint: str
    gain_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None


class AcceptedPatches(Strict):
    """The kept source patches in the order they joined; the stack launches from tree_commit."""
    patches: list[PatchRecord] = []
    branch: str | None = None
    tree_commit: str | None = None  # None: the target has no framework_tree
    base_commit: str | None = None
    keepers: list[Variant] = []  # every keeper (flags, env and patches), in order


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
    tree_commit: str | None = None  # a tree target: the commit the stack was validated from
    patches: list[str] = []  # the kept source patches' names, in order


class SweepResult(Strict):
    rows: list[dict]
    plots: list[str]
