"""The recipe memory: what won before, for targets of the same class. Pure code.

A recipe is one keeper of a validated stack (its args, env and source patches, the gain
and interval its trial measured, and the run that kept it) or, where the stack holds
several, the whole stack as one change (its validated gain and interval): a climb that
took three trials to stack three keepers is then one trial away for the next target of
the class. Each is filed under the class of its target: the engine and its release, the model's class (dense or MoE, a size band, the
attention kind, the dtype), the hardware and its device count, and the workload's class
(kind, and bands of prompt length, output length and concurrency). A new target of that
class tries the recipes first, best first, as trials like any other: the critic, the
accuracy gate and the decision rule judge them on this target. One that does not win
here (REVERT, FAILED, KILLED_OVERTIME, REJECTED, NEEDS_REVIEW) is marked against this
class and not offered to it again. Bands are powers of two, so a workload of 1000 or 1100
prompt tokens shares a class, and one of 4000 does not.
"""

from __future__ import annotations

import math

from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.engines.spec import EngineSpec
from hyperloom_assets.core.hashing import sha256_text
from hyperloom_assets.core.models import Frozen, Strict
from hyperloom_assets.core.patches.patch import SourcePatch
from hyperloom_assets.core.planning.fingerprints import trial_fingerprint
from hyperloom_assets.core.planning.variants import RecipeOrigin, Variant, merge_changes
from hyperloom_assets.core.proposer.allowlist import Allowlist
from hyperloom_assets.core.proposer.guard import GuardInputs, guard
from hyperloom_assets.core.proposer.replies import EnvSetting, ProposedChange
from hyperloom_assets.core.roofline.model_shape import ModelShape
from hyperloom_assets.core.roofline.roofline import Hardware

# Outcomes that say a recipe does not carry over to a class; KEEP and KEEP_UNSTABLE do not.
NOT_CARRIED = frozenset({"REVERT", "FAILED", "KILLED_OVERTIME", "REJECTED", "NEEDS_REVIEW"})
RECIPE_SCORE = float("inf")  # a recipe of the class goes before every planned variant


class RecipeClass(Frozen):
    engine: str  # the engine and its release, as the baseline served it
    model: str  # e.g. "dense 3-10B gqa bfloat16"
    hardware: str  # e.g. "H100 x1"
    workload: str  # e.g. "random isl~256 osl~64 c~16"

    @property
    def key(self) -> str:
        return sha256_text(self.model_dump_json())[:16]

    def text(self) -> str:
        return f"{self.engine}; {self.model}; {self.hardware}; {self.workload}"


class Recipe(Strict):
    """One keeper as it is filed: enough to launch it again on another target of the class."""
    id: int | None = None  # the store's row, once filed
    klass: RecipeClass
    name: str
    add_args: list[str] = []
    remove_args: list[str] = []
    set_env: dict[str, str] = {}
    unset_env: list[str] = []
    patches: list[SourcePatch] = []
    accuracy_risky: bool = False
    gain_pct: float  # the keeper's trial gain over the running best it joined
    ci_low_pct: float | None
    ci_high_pct: float | None
    target: str
    run_id: str


def _band(value: float) -> str:
    """The power-of-two band a positive number falls in, by its nearest power."""
    return f"~{2 ** round(math.log2(value))}" if value > 0 else "0"


def _size_band(params: int) -> str:
    billions = params / 1e9
    for limit, band in ((1, "<1B"), (3, "1-3B"), (10, "3-10B"), (30, "10-30B"), (100, "30-100B")):
        if billions < limit:
            return band
    return ">100B"


def model_class(shape: ModelShape) -> str:
    kind = "moe" if shape.experts else "dense"
    attention = "mha" if shape.kv_heads == shape.heads else ("mqa" if shape.kv_heads == 1 else "gqa")
    return f"{kind} {_size_band(shape.total_params)} {attention} {shape.dtype}"


def workload_class(target: Target) -> str:
    w = target.workload
    parts = [w.kind, f"isl{_band(w.isl or 0)}", f"osl{_band(w.osl or 0)}", f"c{_band(w.concurrency or 0)}"]
    if w.request_rate:
        parts.append(f"rate{_band(w.request_rate)}")
    return " ".join(parts)


def class_of(target: Target, shape: ModelShape, hardware: Hardware, framework_version: str) -> RecipeClass:
    return RecipeClass(engine=f"{target.engine} {framework_version}", model=model_class(shape),
                       hardware=hardware.name, workload=workload_class(target))


def recipe_of(klass: RecipeClass, keeper: Variant, gain_pct: float, ci: tuple[float | None, float | None],
              target: str, run_id: str) -> Recipe:
    return Recipe(klass=klass, name=keeper.name, add_args=keeper.add_args, remove_args=keeper.remove_args,
                  set_env=keeper.set_env, unset_env=keeper.unset_env, patches=keeper.patches,
                  accuracy_risky=keeper.accuracy_risky, gain_pct=gain_pct, ci_low_pct=ci[0], ci_high_pct=ci[1],
                  target=target, run_id=run_id)


def stack_recipe(klass: RecipeClass, keepers: list[Variant], gain_pct: float,
                 ci: tuple[float | None, float | None], target: str, run_id: str) -> Recipe:
    """A stack of several keepers as one recipe, later keepers winning where they set the same knob."""
    merged = merge_changes(keepers, name=f"stack of {target} ({len(keepers)} keepers)")
    merged = merged.model_copy(update={"accuracy_risky": any(k.accuracy_risky for k in keepers)})
    return recipe_of(klass, merged, gain_pct, ci, target, run_id)


def recipe_variant(recipe: Recipe) -> Variant:
    said = (f"[recipe of run {recipe.run_id}, target {recipe.target}] kept there at {recipe.gain_pct:+.1f}%"
            + (f" [{recipe.ci_low_pct:+.1f}%, {recipe.ci_high_pct:+.1f}%]" if recipe.ci_low_pct is not None else "")
            + f" on the same class ({recipe.klass.text()})")
    origin = RecipeOrigin(recipe_id=recipe.id or 0, run_id=recipe.run_id, target=recipe.target,
                          gain_pct=recipe.gain_pct, class_key=recipe.klass.key)
    return Variant(name=f"recipe: {recipe.name}", add_args=recipe.add_args, remove_args=recipe.remove_args,
                   set_env=recipe.set_env, unset_env=recipe.unset_env, patches=recipe.patches, provenance="recipe",
                   reason=said, accuracy_risky=recipe.accuracy_risky, expected_value=RECIPE_SCORE, recipe=origin)


def offered_recipes(recipes: list[Recipe], keepers: list[Variant], tried: set[str], has_tree: bool) -> list[Variant]:
    """The class's recipes as candidates, best first: none already tried in this context, none whose
    change a keeper already makes, none with a patch where the target has no tree to apply it to."""
    kept = {(tuple(k.add_args), tuple(sorted(k.set_env.items())), tuple(p.sha256 for p in k.patches)) for k in keepers}
    variants = []
    for recipe in sorted(recipes, key=lambda r: -r.gain_pct):
        change = (tuple(recipe.add_args), tuple(sorted(recipe.set_env.items())), tuple(p.sha256 for p in recipe.patches))
        if change in kept or (recipe.patches and not has_tree):
            continue
        variant = recipe_variant(recipe)
        if trial_fingerprint(keepers, variant) not in tried:
            variants.append(variant)
    return variants


def guard_refusal(recipe: Recipe, spec: EngineSpec, harness: frozenset[str], env_prefixes: tuple[str, ...],
                  allowed: Allowlist) -> str | None:
    """The proposer's guard over a recipe, as over a model's proposal: its first refusal, or None.

    `allowed` is this target's allowlist: a recipe filed by another target (or by a release of
    the guard before the allowlist) carries only what this target's grid and search_space allow.

    The checks that need the serving host (the engine's parser, `git apply --check`) are the
    trial's: a recipe is launched only as a trial, and its patches meet the critic and git there.
    """
    change = ProposedChange(name=recipe.name, server_args=recipe.add_args,
                            env=[EnvSetting(name=k, value=v) for k, v in recipe.set_env.items()],
                            patch="".join(p.text for p in recipe.patches) or None, rationale="")
    prefix = f"{spec.source_import_root}/{spec.package}".removeprefix("./")
    verdict = guard(change, spec, harness, GuardInputs(package_prefix=prefix, env_prefixes=env_prefixes,
                                                       allowed=allowed))
    refusals = [r for r in verdict.refusals if not (r.rule == "empty_proposal" and recipe.remove_args)]
    return f"{refusals[0].rule}: {refusals[0].detail}" if refusals else None


def evidence_rows(recipes: list[Recipe]) -> list[dict]:
    """The recipes as the proposer sees them: what won on this class before, and where."""
    return [{"recipe": r.name, "add_args": r.add_args, "set_env": r.set_env, "patches": [p.name for p in r.patches],
             "gain_pct": round(r.gain_pct, 2), "interval_pct": [r.ci_low_pct, r.ci_high_pct], "run": r.run_id,
             "target": r.target} for r in sorted(recipes, key=lambda r: -r.gain_pct)]
