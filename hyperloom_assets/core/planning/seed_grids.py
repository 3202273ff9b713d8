"""Seed grids per engine, kept as data (hyperloom_assets/core/engines/grids/*.yaml). Pure code.

A grid lists the knobs worth a first try for an engine, each with the scoring family
the planner uses for it (hyperloom_assets.core.planning.planner.RULES), the engine's defaults (so a
variant that only restates a default is not measured), which inherited flags are never
ablated and which ablations score as something better known than "drop a flag".
Loading validates with extra="forbid"; every problem names the file, the entry and the key.
Which entries are accuracy-risky follows the engine's own table (its module's
`accuracy_risks`), never the grid: a grid that says otherwise is refused.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import yaml
from pydantic import ValidationError, model_validator

from hyperloom_assets.core.engines import engine_for, known_engines
from hyperloom_assets.core.engines.spec import GRIDS_DIR, EngineSpec
from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.planning.variants import KNOWN_BOOLEAN_FLAGS, looks_like_flag, setting_key, split_args

ScoringFamily = Literal[
    "sequence_cap", "token_budget", "cuda_graphs", "prefix_cache", "fp8_kv", "kv_capacity",
    "block_size", "cpu_threads", "schedule_policy", "cuda_graph_bs", "stream_interval",
    "compilation_level", "parallelism", "speculative", "chunked_prefill",
    "search_space",  # a knob of a target's search_space that no grid knob matches (planning/search_space.py)
]



class When(Strict):
    """Conditions on the host, workload and model; an unset condition always holds."""
    host: Literal["gpu", "cpu"] | None = None
    shared_prefix: bool | None = None
    moe: bool | None = None
    has_mtp: bool | None = None
    fp8_model: bool | None = None


class Ladder(Strict):
    """Values of one numeric flag; relative steps follow the workload and the running base."""
    values: list[int] = []
    concurrency_multipliers: list[float] = []
    isl_multipliers: list[float] = []
    base_multipliers: list[float] = []  # multiples of the flag's current effective value
    minimum: int = 1
    # "pow2_list": each number N becomes "[1,2,4,...,P]" with P the power of two >= N
    # (ATOM's --cudagraph-capture-sizes takes a Python list string).
    format: Literal["int", "pow2_list"] = "int"

    def numbers(self, concurrency: int, isl: int | None, current: int | None) -> list[int]:
        found = list(self.values)
        found += [round(concurrency * m) for m in self.concurrency_multipliers]
        if isl:
            found += [round(isl * m) for m in self.isl_multipliers]
        if current:
            found += [round(current * m) for m in self.base_multipliers]
        return sorted({max(self.minimum, n) for n in found})

    def render(self, number: int) -> str:
        if self.format == "int":
            return str(number)
        top = 1 << max(0, math.ceil(math.log2(max(number, 1))))
        sizes, size = [], 1
        while size <= top:
            sizes.append(size)
            size *= 2
        return "[" + ",".join(str(s) for s in sizes) + "]"


class GridEntry(Strict):
    name: str
    rule: ScoringFamily
    doc: str = ""
    flag: str | None = None  # a valued flag, tried at each ladder step or choice
    ladder: Ladder | None = None
    choices: list[str] = []
    env_var: str | None = None  # an env knob, tried at each choice
    add_args: list[str] = []  # a fixed change
    set_env: dict[str, str] = {}
    when: When = When()
    accuracy_risky: bool | None = None  # derived from the engine's table; a grid may only agree with it
    from_search_space: bool = False  # set for a target's search_space knob (planning/search_space.py)

    @model_validator(mode="after")
    def _one_shape(self) -> GridEntry:
        swept = self.flag is not None or self.env_var is not None
        fixed = bool(self.add_args or self.set_env)
        if swept == fixed:
            raise ValueError("give either flag/env_var with a ladder or choices, or a fixed add_args/set_env")
        if self.flag is not None and self.env_var is not None:
            raise ValueError("give flag or env_var, not both")
        if self.flag is not None and not (self.ladder or self.choices):
            raise ValueError(f"flag {self.flag} needs a ladder or choices")
        if self.env_var is not None and not self.choices:
            raise ValueError(f"env_var {self.env_var} needs choices")
        if self.flag is not None and not looks_like_flag(self.flag):
            raise ValueError(f"flag must start with a dash, got {self.flag!r}")
        if self.add_args and not looks_like_flag(self.add_args[0]):
            raise ValueError(f"add_args must start with a flag, got {self.add_args!r}")
        return self


class HostDefaults(Strict):
    """The engine's defaults as argv fragments, for the knobs the grid sweeps."""
    any: list[str] = []
    gpu: list[str] = []
    cpu: list[str] = []


class SeedGrid(Strict):
    engine: str
    sequence_cap_flag: str
    token_budget_flag: str | None = None
    defaults: HostDefaults = HostDefaults()
    keep_flags: list[str] = []  # inherited flags never ablated: they change what is served
    ablation_rules: dict[str, ScoringFamily] = {}  # inherited flag or env -> the family scoring its removal
    ablate: bool = True  # False: the operator's own flags and env are not ablated (a search_space with only: true)
    entries: list[GridEntry]

    @model_validator(mode="after")
    def _engine_and_risks(self) -> SeedGrid:
        with_grids = [name for name, spec in known_engines().items() if spec.grid]
        if self.engine not in with_grids:
            raise ValueError(f"engine must be one of {', '.join(with_grids)}, got {self.engine!r}")
        spec = engine_for(self.engine)
        for entry in self.entries:
            risks = entry_risks(spec, entry)
            if entry.accuracy_risky is not None and entry.accuracy_risky != bool(risks):
                said = "accuracy-risky" if entry.accuracy_risky else "not accuracy-risky"
                found = "; ".join(risks) or "none of its knobs is in the engine's table"
                raise ValueError(f"entry {entry.name!r}: the grid says {said}, the {self.engine} module's "
                                 f"accuracy_risks say otherwise ({found})")
            entry.accuracy_risky = bool(risks)
        return self

    def boolean_flag_set(self) -> frozenset[str]:
        return KNOWN_BOOLEAN_FLAGS

    def default_args(self, host: str) -> list[str]:
        return list(self.defaults.any) + list(self.defaults.cpu if host == "cpu" else self.defaults.gpu)

    def default_value(self, flag: str, host: str) -> str | None:
        for setting in split_args(self.default_args(host), self.boolean_flag_set()):
            if setting.flag and setting_key(setting.flag) == setting_key(flag):
                return setting.value
        return None


class GridError(ValueError):
    """A grid file that cannot be used; the message names the file, entry and key."""


def _describe(file: str, raw: dict, error: dict) -> str:
    loc = list(error["loc"])
    where = ".".join(str(p) for p in loc) or "(file)"
    if len(loc) >= 2 and loc[0] == "entries" and isinstance(loc[1], int):
        entries = raw.get("entries") or []
        entry = entries[loc[1]] if loc[1] < len(entries) else {}
        name = entry.get("name", f"#{loc[1]}") if isinstance(entry, dict) else f"#{loc[1]}"
        key = ".".join(str(p) for p in loc[2:]) or "(entry)"
        where = f"entry {name!r}: key {key!r}"
    if error["type"] == "extra_forbidden":
        return f"{file}: {where}: unknown key"
    return f"{file}: {where}: {error['msg']}"


def load_grid_file(path: Path) -> SeedGrid:
    file = str(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise GridError(f"{file}: not a readable YAML file ({type(exc).__name__})") from exc
    if not isinstance(raw, dict):
        raise GridError(f"{file}: expected a mapping, got {type(raw).__name__}")
    try:
        return SeedGrid.model_validate(raw)
    except ValidationError as exc:
        raise GridError("; ".join(_describe(file, raw, e) for e in exc.errors())) from exc


def load_grids(folder: Path = GRIDS_DIR) -> dict[str, SeedGrid]:
    """Every engine's grid (each engine module names its file); a missing or bad file is an error naming it."""
    grids = {}
    for engine, spec in known_engines().items():
        path = spec.grid_path(folder)
        if path is None:
            continue  # a stand-in plans with its flavor's grid
        grid = load_grid_file(path)
        if grid.engine != engine:
            raise GridError(f"{path}: engine is {grid.engine!r}, expected {engine!r}")
        grids[engine] = grid
    return grids


def accuracy_risk(spec: EngineSpec, add_args: list[str], set_env: dict[str, str]) -> str | None:
    """Why a change is an accuracy risk by the engine's table, or None when it is not."""
    changes = [(setting_key(s.flag), s.value) for s in split_args(add_args) if s.flag]
    changes += list(set_env.items())
    for risk in spec.accuracy_risks:
        knob = setting_key(risk.knob) if looks_like_flag(risk.knob) else risk.knob
        for key, value in changes:
            if key == knob and (value is None or value not in risk.safe_values):
                return f"{risk.knob} {value or ''}".strip() + f": {risk.why}"
    return None


def entry_risks(spec: EngineSpec, entry: GridEntry) -> list[str]:
    """Every value the entry can set that is an accuracy risk, with why."""
    if entry.flag is not None:
        values = entry.choices or ["1"]  # a ladder sets numbers; a number is never a safe dtype
        found = [accuracy_risk(spec, [entry.flag, value], {}) for value in values]
    elif entry.env_var is not None:
        found = [accuracy_risk(spec, [], {entry.env_var: value}) for value in entry.choices]
    else:
        found = [accuracy_risk(spec, entry.add_args, entry.set_env)]
    return [why for why in found if why]
