"""What a model may propose for a target: the flags and env names its engine's seed grid and
rule table act on, and those of the target's own search_space. Pure code.

A deny-list of spellings is walked past: argparse takes any unique prefix of a flag, so
`--hos 0.0.0.0` is `--host` and `--served-model x` renames the model. An allowlist is
not. A proposed flag is read as the project reads flags (underscores as dashes, `--no-x`
as the knob `--x`), an engine's alias as the flag it stands for (the engine module's
DeviceFlags: `-tp` is `--tensor-parallel-size`), and must then be one of the allowlist's
exactly: a prefix of one, or a longer flag one is a prefix of, is another flag. Where the
engine's own parser is known (its flag list from the serving interpreter), the flag must
also be one it registers as written, so argparse never reads it as an abbreviation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from hyperloom_assets.core.config.search_space import SearchSpace
from hyperloom_assets.core.engines.registry import grid_engine, speaking
from hyperloom_assets.core.engines.spec import EngineSpec
from hyperloom_assets.core.models import Frozen
from hyperloom_assets.core.planning.seed_grids import SeedGrid, load_grids
from hyperloom_assets.core.planning.variants import canonical_flag, setting_key, split_args

# argparse reads a token starting with a dash as an option unless it is a plain negative
# number (its own _negative_number_matcher): `-inf` or `-1e5` are options to it.
_NEGATIVE_NUMBER = re.compile(r"-\d+|-\d*\.\d+")


def reads_as_option(token: str) -> bool:
    """Whether argparse takes the token for an option string (so it must be allowed as a flag)."""
    return token.startswith("-") and token != "-" and not _NEGATIVE_NUMBER.fullmatch(token)


class Allowlist(Frozen):
    """The knobs a model may set: flags by knob (`setting_key`), env names exactly."""
    flags: frozenset[str] = frozenset()
    env: frozenset[str] = frozenset()
    aliases: tuple[tuple[str, str], ...] = ()  # (alias, the flag it stands for), both canonical
    registered: frozenset[str] | None = None  # the long flags the engine's parser registers; None: unknown

    def resolve(self, flag: str) -> str:
        """The flag a spelling stands for: canonical, an engine alias replaced by its flag."""
        canonical = canonical_flag(flag)
        return dict(self.aliases).get(canonical, canonical)

    def flag_refusal(self, flag: str) -> str | None:
        """Why a proposed flag (as written, without `=value`) is not allowed; None when it is."""
        resolved = self.resolve(flag)
        if setting_key(resolved) not in self.flags:
            alias = f" (an alias of {resolved})" if resolved != canonical_flag(flag) else ""
            return (f"{flag}{alias} is not a knob of the engine's grid, its rules or the target's search_space; "
                    "flags are spelled out in full (an abbreviation is another flag)")
        if self.registered is not None and flag.startswith("--") and flag not in self.registered:
            return (f"{flag} is not an option the engine's parser registers as written: spell it as the parser "
                    "does (argparse would read another spelling as an abbreviation, or refuse it)")
        return None

    def env_refusal(self, name: str) -> str | None:
        if name in self.env:
            return None
        return f"{name} is not an env knob of the engine's grid or the target's search_space"

    def shown(self) -> dict[str, list[str]]:
        """As the model is shown it: each flag knob (its `--no-` form is the same knob) and env name."""
        return {"flags": sorted(self.flags), "env": sorted(self.env)}

    def with_parser(self, long_flags: Iterable[str]) -> Allowlist:
        """The same, checked also against the flags the engine's own parser registers (none given: unknown)."""
        flags = frozenset(long_flags)
        return self.model_copy(update={"registered": flags or None})


def _grid_knobs(grid: SeedGrid) -> tuple[set[str], set[str]]:
    """The flags (as written) and env names a grid's entries, defaults and ablation rules act on."""
    argvs = [grid.defaults.any, grid.defaults.gpu, grid.defaults.cpu]
    flags = {grid.sequence_cap_flag, *([grid.token_budget_flag] if grid.token_budget_flag else [])}
    env: set[str] = set()
    for entry in grid.entries:
        flags |= {entry.flag} if entry.flag else set()
        argvs.append(entry.add_args)
        env |= ({entry.env_var} if entry.env_var else set()) | set(entry.set_env)
    for knob in grid.ablation_rules:
        (flags if knob.startswith("-") else env).add(knob)
    flags |= {s.flag for argv in argvs for s in split_args(argv) if s.flag}
    return flags, env


def engine_aliases(spec: EngineSpec) -> dict[str, str]:
    """Each alias the engine module knows, to the canonical flag it stands for (the first spelling)."""
    devices = spec.devices
    return {canonical_flag(alias): canonical_flag(names[0])
            for names in (devices.tensor, devices.pipeline, devices.data) for alias in names[1:]}


def allowlist_of(spec: EngineSpec, grid: SeedGrid | None, space: SearchSpace | None) -> Allowlist:
    """The allowlist of an engine (the one a target speaks), its grid and a target's search_space."""
    flags, env = _grid_knobs(grid) if grid is not None else (set(), set())
    if space is not None:
        flags |= set(space.args)
        env |= set(space.env)
    aliases = engine_aliases(spec)
    return Allowlist(flags=frozenset(setting_key(aliases.get(canonical_flag(f), canonical_flag(f))) for f in flags),
                     env=frozenset(env), aliases=tuple(sorted(aliases.items())))


def target_allowlist(engine: str, server_args: list[str], space: SearchSpace | None,
                     grids: Mapping[str, SeedGrid] | None = None) -> Allowlist:
    """A target's allowlist: the grid that plans for it (a stand-in's flavor's) and its search_space."""
    spec = speaking(engine, server_args)
    grid = (grids if grids is not None else load_grids()).get(grid_engine(engine, spec.name))
    return allowlist_of(spec, grid, space)


def parser_long_flags(probe: Mapping) -> list[str]:
    """The long flags in the parser probe's flag list (resources/hosts/parser_probe.py), none when it has none."""
    return [flag for row in probe.get("flags") or [] for flag in row.get("flags", [])]
