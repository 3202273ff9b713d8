"""The values assets hand each other (stored by Dagster's IO manager). Pure models."""

from __future__ import annotations

from hyperloom_assets.core.accuracy.agreement import PromptOutput
from hyperloom_assets.core.config.targets import Objective
from hyperloom_assets.core.decisions.climb import ClimbResult
from hyperloom_assets.core.engines.spec import ProfileSource
from hyperloom_assets.core.measurement.contract import WorkloadContract
from hyperloom_assets.core.measurement.capacity import CapacityAtSlo
from hyperloom_assets.core.measurement.latency import Latency
from hyperloom_assets.core.measurement.measurement import Measurement
from hyperloom_assets.core.measurement.serving import LaunchRecord, ServerSpec
from hyperloom_assets.core.measurement.slo_verdict import SloVerdict
from hyperloom_assets.core.measurement.stats import Launches
from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.patches.run_tree import RunTree
from hyperloom_assets.core.planning.recipes import RecipeClass
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.profile.trace import ProfileSummary
from hyperloom_assets.core.releases.run import ReleaseCheck, ReleaseRun
from hyperloom_assets.core.roofline.roofline import Achieved, Hardware, Roofline


class ProfileResult(Strict):
    """Where the time goes in the running configuration, from the engine's own profiler.

    `taken` False with its `reason` when no profile could be taken (never a failure).
    `profiled_tok_s` is the profiled round's throughput in the engine's time, profiler
    overhead included: a sanity number, never evidence for a decision.
    """
    engine: str
    taken: bool
    reason: str | None = None
    summary: ProfileSummary | None = None
    trace_path: str | None = None  # the reduced trace, in the run folder
    argv: list[str] = []
    profiled_tok_s: float | None = None
    source: ProfileSource = ProfileSource()  # what took it, in which time unit (the engine's Profiler)

    def evidence(self) -> dict | None:
        """What the proposer is shown: the shares and the top ops, rounded."""
        if self.summary is None:
            return None
        s = self.summary
        return {"source": self.source.evidence.format(engine=self.engine),
                "of": "the baseline's configuration, one short round",
                "time_base": s.time_base, "window_ms": round(s.window_ms, 1),
                "shares_pct": {k: round(v, 2) for k, v in s.shares_pct.items()},
                "top_ops": [{"op": o.name, "category": o.category, "calls": o.calls, "self_ms": round(o.self_ms, 2),
                             "share_pct": round(o.share_pct, 2)} for o in s.top_ops]}


class BaselineResult(Strict):
    """The anchor of every later gain and the workload contract (docs/design.md, invariants 5 and 4)."""

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
    profile: ProfileResult | None = None  # taken on the baseline's server after its measured rounds
    # The accuracy gate's prompts asked of the baseline's server after its measured rounds, in a
    # run that climbs (agreement check): the reference a first risky keeper is judged against.
    gate_answers: list[PromptOutput] | None = None


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
    recipe_class: RecipeClass | None = None  # the target's class in the recipe memory (planning/recipes.py)


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
    final_argv: list[str]  # the full engine command, harness flags left out (docs/design.md, invariant 3)
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
    run_id: str | None = None  # the run that materialized it
    validated_in_run: str | None = None  # the run whose launches validated it (an earlier one when replayed)
    # The concurrency sweep, measured on the validation's last base/stack pair after their
    # rounds: the ladder and its rows (None when nothing was validated or the sweep failed).
    sweep_ladder: list[int] | None = None
    sweep_rows: list[dict] | None = None
    stack_latency: list[Latency | None] = []  # the final config's launches' request latency (validation's, or the baseline's)
    slo: SloVerdict | None = None  # the target's SLO over those launches, when it sets one
    capacity_at_slo: CapacityAtSlo | None = None  # each side's highest load within the SLO, when it sets one
    objective: Objective = "throughput"  # what validated_gain_* compare
    # The validation's goodputs (objective.decision_goodput) launch by launch, where its rounds
    # counted them (a target with an slo), and the final config's mean.
    base_goodputs: Launches = []
    stack_goodputs: Launches = []
    final_goodput: float | None = None


class SweepResult(Strict):
    rows: list[dict]
    plots: list[str]
