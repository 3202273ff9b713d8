"""Variants of a serving config, applied on top of a base and composed into a stack.

Pure code. A variant is a change (flags to add, the operator's flags to drop, env to
set or unset), never a whole config, so the same change can be re-expressed on top of
any running base and fingerprinted the same way (hyperloom_assets.core.planning.fingerprints).

An argv is read as a list of settings: a flag, its value (None for a boolean) and the
tokens it was written as. A setting's key ignores `--x=v` versus `--x v`, `_` versus
`-` and `--no-x` versus `--x`, so a later setting of the same knob replaces the earlier
one in place instead of leaving two contradictory flags on the command line.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from pydantic import Field, model_validator

from hyperloom_assets.core.engines.registry import all_boolean_flags, all_multi_value_flags
from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.patches.patch import SourcePatch

# Flags that never take a value, across every engine (each engine's module lists its
# own). A flag not listed is read as valued when the next token is not itself a flag,
# which covers the rest; argparse's BooleanOptionalAction also gives --no-x.
KNOWN_BOOLEAN_FLAGS: frozenset[str] = all_boolean_flags()

# Flags that take several values (argparse nargs="+"): every following non-flag token.
KNOWN_MULTI_VALUE_FLAGS: frozenset[str] = all_multi_value_flags()



class ArgSetting(NamedTuple):
    flag: str  # as written, without an `=value`; "" for a stray positional token
    value: str | None  # None for a boolean; several values are joined by spaces
    tokens: tuple[str, ...]  # exactly what the argv held, so unchanged settings launch as given


def looks_like_flag(token: str) -> bool:
    """A flag starts with a dash; a negative number is a value, not a flag."""
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def canonical_flag(flag: str) -> str:
    """One spelling per flag: `--max_num_seqs` and `--max-num-seqs` are the same flag."""
    dashes = len(flag) - len(flag.lstrip("-"))
    return flag[:dashes] + flag[dashes:].replace("_", "-")


def setting_key(flag: str) -> str:
    """The knob a flag sets: `--no-x` and `--x` set the same boolean knob."""
    canonical = canonical_flag(flag)
    if canonical.startswith("--no-"):
        return "--" + canonical[len("--no-"):]
    return canonical


def _is_boolean(flag: str, known_booleans: set[str]) -> bool:
    canonical = canonical_flag(flag)
    return canonical in known_booleans or canonical.startswith("--no-")


def split_args(argv: list[str], boolean_flags: frozenset[str] = KNOWN_BOOLEAN_FLAGS) -> list[ArgSetting]:
    """Read an argv list as settings, in order."""
    settings: list[ArgSetting] = []
    multi = {canonical_flag(f) for f in KNOWN_MULTI_VALUE_FLAGS}
    booleans = {canonical_flag(f) for f in boolean_flags}
    index = 0
    while index < len(argv):
        token = argv[index]
        if not looks_like_flag(token):
            settings.append(ArgSetting("", token, (token,)))
            index += 1
        elif "=" in token:
            flag, value = token.split("=", 1)
            settings.append(ArgSetting(flag, value, (token,)))
            index += 1
        elif _is_boolean(token, booleans):
            settings.append(ArgSetting(token, None, (token,)))
            index += 1
        else:
            end = index + 1
            limit = len(argv) if canonical_flag(token) in multi else index + 2
            while end < min(limit, len(argv)) and not looks_like_flag(argv[end]):
                end += 1
            values = argv[index + 1:end]
            settings.append(ArgSetting(token, " ".join(values) if values else None, tuple(argv[index:end])))
            index = end
    return settings


def parse_args(argv: list[str], boolean_flags: frozenset[str] = KNOWN_BOOLEAN_FLAGS) -> dict[str, str | None]:
    """Flag -> value (None for a boolean); a later occurrence of a flag wins."""
    return {s.flag: s.value for s in split_args(argv, boolean_flags) if s.flag}


def effective_settings(argv: list[str], boolean_flags: frozenset[str] = KNOWN_BOOLEAN_FLAGS) -> dict[str, tuple[str, str | None]]:
    """Knob -> (canonical flag, value): what an argv asks for, spelling aside."""
    result: dict[str, tuple[str, str | None]] = {}
    for setting in split_args(argv, boolean_flags):
        if setting.flag:
            result[setting_key(setting.flag)] = (canonical_flag(setting.flag), setting.value)
    return result


class LlmOrigin(Strict):
    """Where a model-proposed variant came from: the trial's provenance and the critic's word."""
    provider: str
    model: str
    round: int
    rationale: str  # the model's, with its claimed gains cut out
    verdict: Literal["approve", "reject"]
    critic: str = ""  # who approved it: `rules` or `llm:<provider>/<model>`
    critic_reasons: list[str] = []
    critic_fallback: str | None = None  # the model critic's failure, when the rules decided instead
    patch: str | None = None  # a unified diff the model proposed (guarded: it applies, inside the package)


class RecipeOrigin(Strict):
    """Where a recipe came from: the earlier run of the same class that kept it, and what it won there."""
    recipe_id: int
    run_id: str
    target: str
    gain_pct: float
    class_key: str


class Variant(Strict):
    name: str
    add_args: list[str] = []
    remove_args: list[str] = []
    set_env: dict[str, str] = {}
    unset_env: list[str] = []
    provenance: Literal["seed_grid", "search_space", "ablation", "combined", "llm", "patch", "recipe", "continuation"]
    reason: str
    accuracy_risky: bool = False
    expected_value: float = 0
    rule: str | None = None  # the planner's rule that scored it (planning/rules.yaml)
    diagnosis: str | None = None  # the bottleneck the planner diagnosed when it proposed it
    patches: list[SourcePatch] = []  # source patches on top of the running best's tree, in order
    llm: LlmOrigin | None = None  # set when a model proposed it and the critic approved it
    recipe: RecipeOrigin | None = None  # set when it is a recipe of the target's class (planning/recipes.py)
    sampler: str | None = None  # the continuation's model that proposed it (planning/continuation.py): tpe, gp

    def trial_provenance(self) -> str:
        """Who proposed it: `rules` (seed grid, ablation), `operator` (the target's patches), `library` (the
        patch library's), `search_space` (the target's own knobs), `llm:<provider>/<model>`, `recipe:<run>` (a
        keeper of an earlier run of the class) or `continuation:<sampler>` (the model past the rule plan)."""
        if self.sampler is not None:
            return f"continuation:{self.sampler}"
        if self.llm is not None:
            return f"llm:{self.llm.provider}/{self.llm.model}"
        if self.recipe is not None:
            return f"recipe:{self.recipe.run_id}"
        if self.patches:
            return "library" if any(p.source == "library" for p in self.patches) else "operator"
        return "search_space" if self.provenance == "search_space" else "rules"

    @model_validator(mode="after")
    def _consistent(self) -> Variant:
        # A change that both drops and sets the same knob has no single meaning.
        for flag in self.remove_args:
            if not looks_like_flag(flag):
                raise ValueError(f"remove_args holds flags only (their values go with them), got {flag!r}")
        added = {setting_key(s.flag) for s in split_args(self.add_args) if s.flag}
        if any(not s.flag for s in split_args(self.add_args)):
            raise ValueError(f"add_args must start with a flag, got {self.add_args!r}")
        both = added & {setting_key(f) for f in self.remove_args}
        if both:
            raise ValueError(f"a variant cannot both add and remove {sorted(both)}")
        both_env = set(self.set_env) & set(self.unset_env)
        if both_env:
            raise ValueError(f"a variant cannot both set and unset {sorted(both_env)}")
        return self


class EffectiveConfig(Strict):
    argv: list[str]
    env: dict[str, str]  # variables set on top of the inherited environment
    unset_env: list[str] = []  # inherited variables the launcher must drop

    def same_as(self, other: EffectiveConfig, boolean_flags: frozenset[str] = KNOWN_BOOLEAN_FLAGS) -> bool:
        """Same knobs, values, env and removals, whatever the spelling or order."""
        return (effective_settings(self.argv, boolean_flags) == effective_settings(other.argv, boolean_flags)
                and self.env == other.env and sorted(self.unset_env) == sorted(other.unset_env))


def _remove(settings: list[ArgSetting], flags: list[str]) -> list[ArgSetting]:
    drop = {setting_key(f) for f in flags}
    return [s for s in settings if not (s.flag and setting_key(s.flag) in drop)]


def _set(settings: list[ArgSetting], additions: list[ArgSetting]) -> list[ArgSetting]:
    # A knob already present is replaced where it stands, so the argv keeps the
    # operator's order; a new knob goes at the end.
    result = list(settings)
    for added in additions:
        key = setting_key(added.flag)
        positions = [i for i, s in enumerate(result) if s.flag and setting_key(s.flag) == key]
        if positions:
            result[positions[0]] = added
            result = [s for i, s in enumerate(result) if i not in positions[1:]]
        else:
            result.append(added)
    return result


def _join(settings: list[ArgSetting]) -> list[str]:
    return [token for s in settings for token in s.tokens]


def apply_variant(base_args: list[str], base_env: dict[str, str], variant: Variant,
                  boolean_flags: frozenset[str] = KNOWN_BOOLEAN_FLAGS,
                  base_unset: list[str] | None = None) -> EffectiveConfig:
    """The argv and env a variant gives on top of a base."""
    settings = _remove(split_args(base_args, boolean_flags), variant.remove_args)
    settings = _set(settings, split_args(variant.add_args, boolean_flags))
    env = {k: v for k, v in base_env.items() if k not in variant.unset_env}
    env.update(variant.set_env)
    unset = [k for k in (base_unset or []) if k not in variant.set_env]
    unset += [k for k in variant.unset_env if k not in unset]
    return EffectiveConfig(argv=_join(settings), env=env, unset_env=unset)


class Conflict(Strict):
    kind: Literal["arg", "env"]
    name: str  # the knob (canonical flag) or the env variable
    earlier: str  # keeper names
    later: str
    earlier_value: str | None  # None: a boolean flag, or a removal / unset
    later_value: str | None
    later_removes: bool = False

    def describe(self) -> str:
        what = "removes it" if self.later_removes else f"sets {self.later_value!r}"
        return f"{self.name}: {self.earlier} set {self.earlier_value!r}, later keeper {self.later} {what} and wins"


class Composition(Strict):
    keepers: list[Variant]
    argv: list[str]  # what is launched (harness flags of the base included, so a sim still starts)
    engine_argv: list[str]  # the same without harness flags: the stack's final argv
    env: dict[str, str]
    unset_env: list[str] = []
    conflicts: list[Conflict] = []
    change: Variant = Field(description="the whole stack as one change relative to the base")


def _arg_conflicts(owners: dict[str, tuple[str, str | None]], keeper: Variant) -> list[Conflict]:
    conflicts = []
    for setting in split_args(keeper.add_args):
        key = setting_key(setting.flag)
        if key in owners:
            earlier, value = owners[key]
            conflicts.append(Conflict(kind="arg", name=key, earlier=earlier, later=keeper.name,
                                      earlier_value=value, later_value=setting.value))
        owners[key] = (keeper.name, setting.value)
    for flag in keeper.remove_args:
        key = setting_key(flag)
        if key in owners:
            earlier, value = owners.pop(key)
            conflicts.append(Conflict(kind="arg", name=key, earlier=earlier, later=keeper.name,
                                      earlier_value=value, later_value=None, later_removes=True))
    return conflicts


def _env_conflicts(owners: dict[str, tuple[str, str | None]], keeper: Variant) -> list[Conflict]:
    conflicts = []
    for name, value in keeper.set_env.items():
        if name in owners:
            earlier, old = owners[name]
            conflicts.append(Conflict(kind="env", name=name, earlier=earlier, later=keeper.name,
                                      earlier_value=old, later_value=value))
        owners[name] = (keeper.name, value)
    for name in keeper.unset_env:
        if name in owners:
            earlier, old = owners.pop(name)
            conflicts.append(Conflict(kind="env", name=name, earlier=earlier, later=keeper.name,
                                      earlier_value=old, later_value=None, later_removes=True))
    return conflicts


def knob_of(variant: Variant) -> frozenset[str]:
    """The settings a variant touches (flags by knob, env vars): every value of a ladder is one knob."""
    flags = {setting_key(s.flag) for s in split_args(variant.add_args) if s.flag}
    return frozenset(flags | {setting_key(f) for f in variant.remove_args} | set(variant.set_env) | set(variant.unset_env))


def merge_changes(keepers: list[Variant], name: str = "stack") -> Variant:
    """The keepers as one change relative to the base, later keepers winning."""
    settings: list[ArgSetting] = []
    removed: dict[str, str] = {}
    env: dict[str, str] = {}
    unset: list[str] = []
    for keeper in keepers:
        for flag in keeper.remove_args:
            settings = _remove(settings, [flag])
            removed[setting_key(flag)] = flag
        for added in split_args(keeper.add_args):
            removed.pop(setting_key(added.flag), None)
        settings = _set(settings, split_args(keeper.add_args))
        for var in keeper.unset_env:
            env.pop(var, None)
            if var not in unset:
                unset.append(var)
        for var, value in keeper.set_env.items():
            env[var] = value
            if var in unset:
                unset.remove(var)
    return Variant(name=name, add_args=_join(settings), remove_args=list(removed.values()), set_env=env,
                   unset_env=unset, provenance="seed_grid", reason="composition of " + ", ".join(k.name for k in keepers),
                   patches=[patch for keeper in keepers for patch in keeper.patches])


def strip_flags(argv: list[str], flags: frozenset[str], boolean_flags: frozenset[str] = KNOWN_BOOLEAN_FLAGS) -> list[str]:
    """The argv without the given flags and their values."""
    return _join(_remove(split_args(argv, boolean_flags), list(flags)))


def compose(base_args: list[str], base_env: dict[str, str], keepers: list[Variant],
            harness_flags: frozenset[str] = frozenset(),
            boolean_flags: frozenset[str] = KNOWN_BOOLEAN_FLAGS) -> Composition:
    """The stack: the keepers applied in order on the base, later keepers winning.

    A keeper that would add or drop a harness flag is refused (docs/design.md, invariant 3).
    """
    harness_keys = {setting_key(f) for f in harness_flags}
    arg_owners: dict[str, tuple[str, str | None]] = {}
    env_owners: dict[str, tuple[str, str | None]] = {}
    conflicts: list[Conflict] = []
    config = EffectiveConfig(argv=list(base_args), env=dict(base_env))
    for keeper in keepers:
        touched = {setting_key(s.flag) for s in split_args(keeper.add_args, boolean_flags)} | {setting_key(f) for f in keeper.remove_args}
        if touched & harness_keys:
            raise ValueError(f"keeper {keeper.name!r} touches harness flags {sorted(touched & harness_keys)}; they never enter the stack")
        conflicts += _arg_conflicts(arg_owners, keeper) + _env_conflicts(env_owners, keeper)
        config = apply_variant(config.argv, config.env, keeper, boolean_flags, config.unset_env)
    return Composition(keepers=list(keepers), argv=config.argv, engine_argv=strip_flags(config.argv, harness_flags, boolean_flags),
                       env=config.env, unset_env=config.unset_env, conflicts=conflicts, change=merge_changes(keepers))
