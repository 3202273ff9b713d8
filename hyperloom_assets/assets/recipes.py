"""The recipe memory as the assets use it: a target's class, its recipes, filing and misses.

`candidates` and each re-plan of `trials` put the class's recipes first; `trials` marks a
recipe that did not win on this target; `optimization_stack` files the keepers of a stack
whose validated interval excludes zero. The store is the result store's database.
"""

from __future__ import annotations

from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.decisions.climb import TrialRecord
from hyperloom_assets.core.engines.registry import engine_for, harness_flags_for, speaking
from hyperloom_assets.core.planning.recipes import (
    NOT_CARRIED,
    Recipe,
    RecipeClass,
    class_of,
    guard_refusal,
    recipe_of,
    stack_recipe,
)
from hyperloom_assets.core.proposer.allowlist import target_allowlist
from hyperloom_assets.core.results import BaselineResult, RooflineResult, StackResult, TrialsResult
from hyperloom_assets.core.roofline.model_shape import load_shape
from hyperloom_assets.resources.store.recipes import RecipeBook


def target_class(target: Target, baseline: BaselineResult, roofline: RooflineResult) -> RecipeClass:
    return class_of(target, load_shape(target.model), roofline.hardware, baseline.framework_version)


def class_recipes(store, klass: RecipeClass, target: Target, log=None) -> list[Recipe]:
    """The class's recipes that pass the proposer's guard for this target (a refusal is logged);
    none for a target that searches its own space only."""
    if target.searches_only_its_space():
        return []
    spec = engine_for(target.engine)
    harness, prefixes = harness_flags_for(spec.name), speaking(spec.name, target.server_args).env_prefixes
    allowed = target_allowlist(target.engine, target.server_args, target.search_space)
    passed = []
    for recipe in RecipeBook(store).offered(klass.key):
        refusal = guard_refusal(recipe, spec, harness, prefixes, allowed)
        if refusal is None:
            passed.append(recipe)
        elif log is not None:
            log.warning("recipe %s of run %s refused by the guard: %s", recipe.name, recipe.run_id, refusal)
    return passed


def mark_if_missed(store, record: TrialRecord, target: str, run_id: str) -> None:
    """A recipe that did not win here is not offered to this class again."""
    origin = record.variant.recipe
    if origin is not None and record.outcome in NOT_CARRIED and not record.replayed:
        RecipeBook(store).mark_missed(origin.recipe_id, origin.class_key, target, run_id, record.outcome)


def file_keepers(store, trials: TrialsResult, stack: StackResult, target: str, run_id: str) -> list[Recipe]:
    """The stack's keepers (and the stack itself, of several) as recipes of the class, when its
    validated interval excludes zero."""
    if trials.recipe_class is None or not stack.validated or stack.validated_gain_ci_low <= 0:
        return []
    kept = {t.name: t for t in trials.climb.trials if t.outcome == "KEEP"}
    recipes = [recipe_of(trials.recipe_class, keeper, kept[keeper.name].decision.gain_pct or 0.0,
                         (kept[keeper.name].decision.ci_low_pct, kept[keeper.name].decision.ci_high_pct),
                         target, stack.validated_in_run or run_id)
               for keeper in stack.keepers if keeper.name in kept]
    if len(stack.keepers) > 1:
        recipes.append(stack_recipe(trials.recipe_class, stack.keepers, stack.validated_gain_pct,
                                    (stack.validated_gain_ci_low, stack.validated_gain_ci_high), target,
                                    stack.validated_in_run or run_id))
    RecipeBook(store).file(recipes)
    return recipes
