"""Target files: one YAML file per target, validated with the project's own models.

Pure code. Every problem is reported as (file, field, what was expected), and a bad
file never hides the other targets of its folder.
"""

from __future__ import annotations

import importlib.util

import os
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, PositiveInt, ValidationError, field_validator, model_validator

from hyperloom_assets.core.engines import engine_for, engine_names
from hyperloom_assets.core.engines.registry import harness_flags_for
from hyperloom_assets.core.config.files import ConfigFileError, load_config_yaml
from hyperloom_assets.core.config.names import SAFE_NAME_RULE, is_safe_name
from hyperloom_assets.core.config.problems import TargetError, TargetProblem, at_most, problems_from_validation
from hyperloom_assets.core.config.search_space import SearchSpace
from hyperloom_assets.core.measurement.serving import env_problems
from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.patches.patch import PatchError, read_patch_file
from hyperloom_assets.core.planning.variants import setting_key
from hyperloom_assets.core.proposer.guard import IDENTITY_FLAGS
from hyperloom_assets.core.proposer.settings import ProposerField

if TYPE_CHECKING:  # host_names.py reads a Target; parse_target only calls a HostNames
    from hyperloom_assets.core.config.host_names import HostNames

DEFAULT_TARGETS_DIR = Path("targets")


def targets_dir() -> Path:
    """The targets folder: `HYPERLOOM_TARGETS_DIR`, else `targets/` under the cwd."""
    return Path(os.environ.get("HYPERLOOM_TARGETS_DIR", DEFAULT_TARGETS_DIR)).resolve()



# What the climb and the validation compare: output tok/s, or goodput (requests/s that meet the slo).
Objective = Literal["throughput", "goodput"]


class SloLimits(Strict):
    """Per-request latency limits, in the engine's own time (a sim's: its simulated GPU's)."""
    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)
    e2e_ms: float | None = Field(default=None, gt=0)


class Slo(SloLimits):
    """The limits a request must meet to count toward goodput (the client's copy of the target's slo)."""
    # How many times faster than its engine the measured server runs (a sim's time scale; 1 for a
    # real engine): the client reads each request's latency times this, in the engine's time the
    # limits are in (metrics.meets_slo). The measurement protocol sets it (resources/measure.py);
    # at 1 it is left out of dumps, so signatures and the target's identity read as before it existed.
    time_scale: float = Field(default=1.0, gt=0, exclude_if=lambda scale: scale == 1.0)


# The statistic an SLO's limits hold at: a percentile of a launch's requests, or their mean
# (core/measurement/slo_statistic.py bounds each).
SloStatistic = Literal[50, 90, 95, 99, "mean"]


class TargetSlo(SloLimits):
    """The operator's latency SLO: each set limit holds at `percentile` (or the mean) of a launch's requests."""
    percentile: SloStatistic = 99
    # Rounds per side (baseline, stack) the capacity search may spend; 0 skips it.
    capacity_probes: int = Field(default=6, ge=0, le=20)
    # How often a config at 80% of a limit must read as meeting it: what sizes a launch's requests
    # (core/measurement/slo_power.py). Less power is fewer requests, for a cheap screen; at its
    # default it is left out of dumps, so a target's identity reads as before the field existed.
    power: float = Field(default=0.9, ge=0.5, le=0.99, exclude_if=lambda power: power == 0.9)

    @model_validator(mode="after")
    def _some_limit(self) -> TargetSlo:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise ValueError("give at least one of ttft_ms, tpot_ms, e2e_ms")
        return self

    def goodput(self) -> Slo:
        return Slo(ttft_ms=self.ttft_ms, tpot_ms=self.tpot_ms, e2e_ms=self.e2e_ms)


class Workload(Strict):
    kind: Literal["random", "shared_prefix", "agentic"]
    isl: PositiveInt | None = None
    osl: PositiveInt | None = None
    prefix_len: int = Field(default=0, ge=0)
    trace: Path | None = None
    concurrency: PositiveInt
    num_prompts: PositiveInt | None = None
    request_rate: float | None = Field(default=None, gt=0)  # Poisson arrivals, req/s
    slo: Slo | None = None  # set from the target's top-level slo; a target file may not set it here
    seed: int = 0
    # Where a request's TTFT and E2E are timed from: its send, after the client's concurrency slot
    # is free (as `vllm bench serve --max-concurrency` times it), or its scheduled arrival in a
    # rate round, so that waiting for a slot counts (a capacity probe's rounds: assets/capacity.py).
    # Set by the capacity search only, never by a target file; "send" is left out of dumps.
    latency_from: Literal["send", "arrival"] = Field(default="send", exclude_if=lambda value: value == "send")

    def missing_fields(self) -> list[tuple[str, str]]:
        """Fields a kind needs but the file left out, as (field, expected)."""
        problems: list[tuple[str, str]] = []
        if self.kind in ("random", "shared_prefix"):
            for name in ("isl", "osl"):
                if getattr(self, name) is None:
                    problems.append((f"workload.{name}", f"a positive integer for kind {self.kind}"))
        if self.kind == "shared_prefix" and self.isl is not None and self.prefix_len >= self.isl:
            problems.append(("workload.prefix_len", f"fewer tokens than isl ({self.isl})"))
        if self.kind == "agentic" and self.trace is None:
            problems.append(("workload.trace", "a JSONL trace file for kind agentic"))
        return problems


class AgreementCheck(Strict):
    """The default gate: greedy tokens with top-k logprobs against the running best's."""
    kind: Literal["agreement"] = "agreement"
    prompts: PositiveInt = 32
    max_tokens: PositiveInt = 16
    top_k: PositiveInt = 8


class LmEvalCheck(Strict):
    """An lm-eval task run against the server (`lm_eval --model local-completions`): GPU hosts, real models."""
    kind: Literal["lm_eval"]
    task: str = Field(min_length=1)
    tolerance: float = Field(ge=0, le=1)  # the largest drop of the task's score that still passes
    limit: PositiveInt | None = None  # examples per task; None: all of them
    num_fewshot: int | None = Field(default=None, ge=0)


class Target(Strict):
    engine: str  # a module of hyperloom_assets/core/engines/
    model: Path
    host: str = "local"
    framework_tree: Path | None = None
    server_args: list[str] = []
    env: dict[str, str] = {}
    workload: Workload
    target_gain_pct: float = Field(default=10, gt=0)
    max_trials: PositiveInt = 12
    time_budget_min: float | None = Field(default=None, gt=0)
    # Slots measured at once (core/decisions/parallel.py), or "auto": every slot free at the run's start.
    parallel_trials: PositiveInt | Literal["auto"] = 1
    repeats: PositiveInt = 3
    sweep_concurrencies: list[PositiveInt] | None = None
    proposer: ProposerField | None = None  # {provider: rules|anthropic|openai, model, max_proposals, max_rounds}
    patches: list[Path] = []  # operator source patches: unified diffs against framework_tree
    accuracy: AgreementCheck | LmEvalCheck | None = Field(default=None, discriminator="kind")  # None: AgreementCheck()
    # False: no profile, and so no profile launch; the plan is made without where-the-time-goes evidence.
    profile: bool = True
    search_space: SearchSpace | None = None  # the operator's own knobs, searched with (or instead of) the seed grid
    slo: TargetSlo | None = None  # {ttft_ms, tpot_ms, e2e_ms, percentile}: verdicts per launch, goodput per request
    objective: Objective = "throughput"
    # Past the rule plan, with budget left: a model-based sampler over the plan's knobs (planning/continuation.py).
    continuation: Literal["off", "tpe", "gp"] = "off"

    def searches_only_its_space(self) -> bool:
        """`search_space.only`: the space's knobs and the target's own patches, no grid, ablation, recipe or library patch."""
        return self.search_space is not None and self.search_space.only

    def accuracy_check(self) -> AgreementCheck | LmEvalCheck:
        return self.accuracy or AgreementCheck()

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        if value not in engine_names():
            raise ValueError(f"one of {', '.join(engine_names())}, got {value!r}")
        return value

    @field_validator("continuation", mode="before")
    @classmethod
    def _off_as_yaml_reads_it(cls, value: object) -> object:
        return "off" if value is False else value  # YAML reads a bare `off` as false

    @field_validator("continuation")
    @classmethod
    def _gp_has_torch(cls, value: str) -> str:
        # Optuna's GPSampler fits its GP with torch, which only the cpu extra installs: say so before any launch.
        if value == "gp" and importlib.util.find_spec("torch") is None:
            raise ValueError("continuation: gp needs torch (install the cpu extra), or use continuation: tpe")
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env_values_are_strings(cls, value: object) -> object:
        # YAML turns `2` into an int; an env value is text, so say so instead of coercing.
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(item, str):
                    raise ValueError(f"env {key!r} must be a string (quote it in YAML)")
        return value

    @field_validator("env")
    @classmethod
    def _env_launchable(cls, env: dict[str, str]) -> dict[str, str]:
        problems = env_problems(env)  # else every launch of the target fails: no process takes such an env
        if problems:
            raise ValueError("; ".join(problems))
        return env

    def sweep_ladder(self) -> list[int]:
        """The concurrency ladder: given, else powers of two up to 4x the workload's."""
        if self.sweep_concurrencies:
            return sorted(set(self.sweep_concurrencies))
        ladder, rung = [], 1
        while rung <= 4 * self.workload.concurrency:
            ladder.append(rung)
            rung *= 2
        return ladder


def _harness_in_space(target: Target, file: str) -> list[TargetProblem]:
    """A search_space flag the harness sets itself (the port, the model, what the served model is
    named and tokenized by) is not the operator's to search: a model may propose every knob of it."""
    if target.search_space is None:
        return []
    harness = {setting_key(flag) for flag in harness_flags_for(target.engine) | IDENTITY_FLAGS}
    return [TargetProblem(file=file, field=f"search_space.args.{flag}",
                          expected=f"an engine flag to search, not one the harness sets ({', '.join(sorted(harness))})")
            for flag in target.search_space.args if setting_key(flag) in harness]


def _resolve(path: Path, root: Path) -> Path:
    return path if path.is_absolute() else (root / path).resolve()


def _path_problems(target: Target, file: str) -> list[TargetProblem]:
    problems = []
    if not target.model.is_dir():
        problems.append(TargetProblem(file=file, field="model", expected=f"an existing model folder, {target.model} does not exist"))
    elif not (target.model / "config.json").is_file():
        problems.append(TargetProblem(file=file, field="model", expected=f"a folder holding config.json, none in {target.model}"))
    trace = target.workload.trace
    if trace is not None and not trace.is_file():
        problems.append(TargetProblem(file=file, field="workload.trace", expected=f"an existing JSONL file, {trace} does not exist"))
    problems += _tree_problems(target, file)
    return problems


def _tree_problems(target: Target, file: str) -> list[TargetProblem]:
    tree = target.framework_tree
    if tree is not None and not tree.is_dir():
        return [TargetProblem(file=file, field="framework_tree", expected=f"an existing folder, {tree} does not exist")]
    if tree is not None and not (tree / ".git").exists():
        return [TargetProblem(file=file, field="framework_tree",
                              expected=f"a git repository (`git init` it, or `hyperloom framework-tree init --engine "
                                       f"{target.engine} DIR`); {tree} has no .git")]
    if target.patches and tree is None:
        return [TargetProblem(file=file, field="patches", expected="a framework_tree to apply them to")]
    problems = []
    for index, path in enumerate(target.patches):
        try:
            read_patch_file(path, "operator", engine_for(target.engine))
        except PatchError as exc:
            problems.append(TargetProblem(file=file, field=f"patches.{index}", expected=str(exc)))
    return problems


def parse_target(path: Path, check_paths: bool = True, hosts: HostNames | None = None,
                 text: str | None = None) -> tuple[Target | None, list[TargetProblem]]:
    """Read and validate one target file; paths resolve against the folder's parent.

    With `hosts`, a target naming a host that is not among them is a problem too. With
    `text`, that is the file's content (a run's snapshot of it), and the file is not read.
    """
    file = str(path)
    if not is_safe_name(target_name(path)):
        # The name is a folder under the state folder, a branch and a partition: `...yaml` would be `..`.
        return None, [TargetProblem(file=file, field="(file name)", expected=(
            f"a file name of {SAFE_NAME_RULE}, then .yaml (the name is a folder, a branch and a "
            f"partition), got {path.name!r}"))]
    try:
        raw = load_config_yaml(path, text)
    except ConfigFileError as exc:
        return None, [TargetProblem(file=file, field="(file)", expected=str(exc))]
    if not isinstance(raw, dict):
        return None, [TargetProblem(file=file, field="(file)", expected=f"a YAML mapping of fields, got {type(raw).__name__}")]
    try:
        target = Target.model_validate(raw)
    except ValidationError as exc:
        return None, problems_from_validation(file, exc)
    if target.workload.slo is not None:
        return None, [TargetProblem(file=file, field="workload.slo", expected=(
            "the top-level slo: {ttft_ms, tpot_ms, e2e_ms, percentile} (workload.slo moved there)"))]
    if target.workload.latency_from != "send":
        return None, [TargetProblem(file=file, field="workload.latency_from", expected=(
            "no value: the capacity search sets it for its own probes"))]
    problems = [TargetProblem(file=file, field=f, expected=e) for f, e in target.workload.missing_fields()]
    problems += _harness_in_space(target, file)
    problems += [TargetProblem(file=file, field="server_args", expected=problem)
                 for problem in engine_for(target.engine).harness_problems(target.server_args)]
    if target.objective == "goodput" and target.slo is None:
        problems.append(TargetProblem(file=file, field="objective", expected=(
            "an slo to count goodput against (goodput is the requests per second that meet the slo), or "
            "objective: throughput")))
    unknown_host = hosts.problem(file, target.host) if hosts is not None else None
    if unknown_host is not None:
        problems.append(unknown_host)
    slots = hosts.slot_problem(file, target) if hosts is not None else None
    if slots is not None:
        problems.append(slots)
    root = path.resolve().parent.parent
    target = _with_resolved_paths(target, root)
    if check_paths:
        try:
            problems += _path_problems(target, file)
        except OSError as exc:  # a path the system cannot even look up (too long, a folder it may not read)
            problems.append(TargetProblem(file=file, field="(paths)", expected=(
                f"paths this machine can look up, one of them gives: {exc.strerror or type(exc).__name__}")))
    return (None if problems else target), at_most(problems, file)


def _with_resolved_paths(target: Target, root: Path) -> Target:
    workload = target.workload
    if workload.trace is not None:
        workload = workload.model_copy(update={"trace": _resolve(workload.trace, root)})
    tree = _resolve(target.framework_tree, root) if target.framework_tree else None
    patches = [_resolve(path, root) for path in target.patches]
    return target.model_copy(update={"model": _resolve(target.model, root), "framework_tree": tree,
                                     "workload": workload, "patches": patches})


def target_files(folder: Path) -> list[Path]:
    """The target files of a folder, by name; an unreadable folder has none."""
    try:
        return sorted(p for p in folder.iterdir() if p.suffix == ".yaml" and p.is_file())
    except OSError:
        return []


def target_name(path: Path) -> str:
    return path.stem


def load_targets(folder: Path, check_paths: bool = True,
                 hosts: HostNames | None = None) -> tuple[dict[str, Target], list[TargetProblem]]:
    """Every good target of a folder by name, and every problem of the bad ones."""
    good: dict[str, Target] = {}
    problems: list[TargetProblem] = []
    if not folder.is_dir():
        return good, [TargetProblem(file=str(folder), field="(folder)", expected="an existing folder of target YAML files")]
    for path in target_files(folder):
        target, found = parse_target(path, check_paths, hosts)
        problems += found
        if target is not None:
            good[target_name(path)] = target
    return good, problems


def load_target(folder: Path, name: str, hosts: HostNames | None = None, text: str | None = None) -> Target:
    """One target by name (from `text`, its content, when given); raises TargetError naming the file and field."""
    path = folder / f"{name}.yaml"
    if not is_safe_name(name):
        raise TargetError([TargetProblem(file=str(folder), field="(target name)", expected=(
            f"a target name of {SAFE_NAME_RULE}, got {name!r}"))])
    if text is None and not path.is_file():
        raise TargetError([TargetProblem(file=str(path), field="(file)", expected=f"a target file named {name}.yaml")])
    target, problems = parse_target(path, hosts=hosts, text=text)
    if target is None:
        raise TargetError(problems)
    return target
