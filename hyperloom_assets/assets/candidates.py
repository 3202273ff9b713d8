"""The `candidates` asset: the first plan of variants, best first, each with its reason.

The recipes of the target's class (earlier runs' validated keepers, planning/recipes.py)
come first, best first. With a model configured (the target's `proposer`, or
HYPERLOOM_PROPOSER), the model's approved proposals follow, in the order it gave them,
shown the recipes as evidence; the rule planner's come last.
"""

import dagster as dg
from dagster import AssetExecutionContext

from hyperloom_assets.assets.metadata import run_secrets, table_value
from hyperloom_assets.assets.proposer_round import RoundInputs, propose, settings_for
from hyperloom_assets.assets.recipes import class_recipes, target_class
from hyperloom_assets.core.planning.recipes import offered_recipes
from hyperloom_assets.core.planning.fingerprints import variant_fingerprint
from hyperloom_assets.core.planning.plan_evidence import plan_for_target
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.report.tables import plan_table
from hyperloom_assets.core.results import BaselineResult, ProfileResult, RooflineResult
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.fleet import HostFleet
from hyperloom_assets.resources.proposer.providers import LlmProviders
from hyperloom_assets.resources.store.results import ResultStore


def build_candidates_asset(partitions: dg.PartitionsDefinition):
    @dg.asset(partitions_def=partitions, group_name="explore",
              description="The first plan: variants with fingerprint, provenance and reason, best first.")
    def candidates(context: AssetExecutionContext, catalog: TargetCatalog, store: ResultStore, hosts: HostFleet,
                   llm: LlmProviders, baseline: BaselineResult, roofline: RooflineResult,
                   profile: ProfileResult) -> dg.Output[list[Variant]]:
        target = catalog.run_target(context.partition_key, context.run.run_id, store)
        variants = plan_for_target(target, baseline, roofline.roofline, roofline.achieved, keepers=[], tried=set())
        settings = settings_for(target)
        klass = target_class(target, baseline, roofline)
        recipes = class_recipes(store, klass, target, context.log)
        if settings.asks_a_model:
            inputs = RoundInputs.for_asset(context, target, hosts.for_target(target), llm, store, baseline,
                                           roofline, settings, profile.evidence(), recipes)
            variants = propose(inputs, 1, trials=[], keepers=[], tried=set()) + variants
        # Variants already in this context's ledger stay in the plan: the climb replays
        # their recorded outcome instead of measuring them again.
        recorded = {row["fingerprint"] for row in store.trials(baseline.context_key)}
        # The class's recipes go first, best first: what won on this class before is tried before
        # guesses; a change this context already tried (its own keepers, filed) is not offered again.
        offered = offered_recipes(recipes, [], recorded, has_tree=target.framework_tree is not None)
        variants = offered + variants
        return dg.Output(variants, metadata={
            "count": len(variants), "in_ledger": sum(variant_fingerprint(v) in recorded for v in variants),
            "proposer": settings.label if settings.asks_a_model else "rules",
            "recipe_class": klass.text(), "recipes": len(offered),
            "plan": table_value(plan_table(variants, recorded), run_secrets(target.env, target.server_args))})

    return candidates
