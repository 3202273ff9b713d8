"""The recipe memory's pure rules and its store: classes by band, what is offered and in what
order, a stack filed as one change, and a miss that hides a recipe from its class only."""

from __future__ import annotations

from benchmarks.recipe_memory import launches_to_goal, pairs, recipes_from
from benchmarks.support.offline_climb import run_offline_climb, true_throughput
from hyperloom_assets.assets.recipes import class_recipes, mark_if_missed
from hyperloom_assets.core.config.search_space import SearchSpace
from hyperloom_assets.core.config.targets import Target, Workload
from hyperloom_assets.core.decisions.climb import TrialRecord
from hyperloom_assets.core.decisions.rule import Decision, Outcome
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.engines.registry import harness_flags_for
from hyperloom_assets.core.patches.library import library_patch
from hyperloom_assets.core.planning.recipes import (
    RecipeClass,
    class_of,
    guard_refusal,
    offered_recipes,
    recipe_of,
    recipe_variant,
    stack_recipe,
)
from hyperloom_assets.core.planning.stack import composition
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.proposer.allowlist import target_allowlist
from hyperloom_assets.core.roofline.model_shape import load_shape
from hyperloom_assets.core.roofline.roofline import gpu_hardware
from hyperloom_assets.resources.store.recipes import RecipeBook
from tests.conftest import SIM_MODEL

KLASS = RecipeClass(engine="sim 1", model="dense 3-10B gqa bfloat16", hardware="H100 x1",
                    workload="random isl~256 osl~64 c~16")


def target(isl: int, concurrency: int) -> Target:
    return Target(engine="sim", model=SIM_MODEL, server_args=["--gpu", "H100"],
                  workload=Workload(kind="random", isl=isl, osl=64, concurrency=concurrency))


def klass_of(t: Target) -> RecipeClass:
    shape = load_shape(SIM_MODEL)
    return class_of(t, shape, gpu_hardware("H100", 1, shape.dtype), "hyperloom-assets 1.0")


def variant(name: str, args: list[str], gain_risky: bool = False) -> Variant:
    return Variant(name=name, add_args=args, provenance="seed_grid", reason="r", accuracy_risky=gain_risky)


def test_a_class_holds_nearby_workloads_and_not_far_ones() -> None:
    assert klass_of(target(256, 16)).key == klass_of(target(240, 20)).key
    assert klass_of(target(256, 16)).key != klass_of(target(1024, 16)).key
    assert klass_of(target(256, 16)).key != klass_of(target(256, 64)).key
    assert klass_of(target(256, 16)).model.startswith("dense ") and " gqa " in klass_of(target(256, 16)).model


def test_recipes_are_offered_best_first_less_what_is_kept_tried_or_unservable() -> None:
    cap = recipe_of(KLASS, variant("cap", ["--max-num-seqs", "32"]), 40.0, (20.0, 60.0), "a", "run-a")
    budget = recipe_of(KLASS, variant("budget", ["--max-num-batched-tokens", "4096"]), 10.0, (2.0, 18.0), "a", "run-a")
    fused = library_patch(engine_for("sim"), "fused-decode-kernel")
    patched = recipe_of(KLASS, variant("patched", []).model_copy(update={"patches": [fused]}), 90.0, (1.0, 2.0), "a",
                        "run-a")
    offered = offered_recipes([budget.model_copy(update={"id": 2}), cap.model_copy(update={"id": 1})], [], set(),
                              has_tree=False)
    assert [v.name for v in offered] == ["recipe: cap", "recipe: budget"]
    assert offered[0].trial_provenance() == "recipe:run-a" and offered[0].provenance == "recipe"
    assert "kept there at +40.0% [+20.0%, +60.0%]" in offered[0].reason
    kept = [variant("cap", ["--max-num-seqs", "32"])]
    assert [v.name for v in offered_recipes([cap, budget], kept, set(), has_tree=False)] == ["recipe: budget"]
    assert offered_recipes([patched], [], set(), has_tree=False) == [], "no tree to apply its patch to"
    assert [v.patches for v in offered_recipes([patched], [], set(), has_tree=True)] == [[fused]]


def test_a_stack_is_filed_as_one_change_later_keepers_winning() -> None:
    keepers = [variant("b128", ["--max-num-batched-tokens", "128"]), variant("cap", ["--max-num-seqs", "32"]),
               variant("b256", ["--max-num-batched-tokens", "256"], gain_risky=True)]
    stack = stack_recipe(KLASS, keepers, 80.0, (50.0, 110.0), "a", "run-a")
    assert stack.add_args == ["--max-num-batched-tokens", "256", "--max-num-seqs", "32"]
    assert stack.accuracy_risky and recipe_variant(stack).accuracy_risky, "one risky keeper makes the stack risky"


def record(v: Variant, outcome: Outcome, replayed: bool = False) -> TrialRecord:
    return TrialRecord(index=1, name=v.name, fingerprint="f", variant=v, against="baseline",
                       decision=Decision(outcome=outcome, reason="r"), measurements=1, launches=[], replayed=replayed)


def test_the_book_files_once_offers_best_first_and_a_miss_hides_a_recipe_from_its_class(store) -> None:
    book = RecipeBook(store)
    cap = recipe_of(KLASS, variant("cap", ["--max-num-seqs", "32"]), 40.0, (20.0, 60.0), "a", "run-a")
    budget = recipe_of(KLASS, variant("budget", ["--max-num-batched-tokens", "4096"]), 10.0, (2.0, 18.0), "a", "run-a")
    book.file([budget, cap])
    book.file([cap])  # a replayed validation files again: nothing new
    filed = book.offered(KLASS.key)
    assert [r.name for r in filed] == ["cap", "budget"] and all(r.id for r in filed)
    other = KLASS.model_copy(update={"hardware": "H200 x1"})
    assert book.offered(other.key) == [], "another class sees none of them"

    tried = recipe_variant(filed[0])
    mark_if_missed(store, record(tried, Outcome.KEEP), "b", "run-b")
    mark_if_missed(store, record(tried, Outcome.REVERT, replayed=True), "b", "run-b")
    assert [r.name for r in book.offered(KLASS.key)] == ["cap", "budget"], "a KEEP or a replay marks nothing"
    mark_if_missed(store, record(tried, Outcome.REVERT), "b", "run-b")
    assert [r.name for r in book.offered(KLASS.key)] == ["budget"], "a REVERT here: not offered to this class again"
    assert [(m["target"], m["outcome"]) for m in book.misses(KLASS.key)] == [("b", "REVERT")]


def test_a_target_searching_its_space_only_is_offered_no_recipe(store) -> None:
    RecipeBook(store).file([recipe_of(KLASS, variant("cap", ["--max-num-seqs", "32"]), 40.0, (20.0, 60.0), "a", "run-a")])
    t = target(256, 16)
    assert [r.name for r in class_recipes(store, KLASS, t)] == ["cap"]
    spaced = t.model_copy(update={"search_space": SearchSpace(args={"--max-num-seqs": [8]}, only=True)})
    assert class_recipes(store, KLASS, spaced) == []


def test_with_the_first_targets_recipes_the_second_reaches_its_best_in_fewer_launches() -> None:
    """benchmarks/recipe_memory.py's claim, on one pair and seed (the offline climb is seeded)."""
    first, second = (s.model_copy(update={"max_trials": 4}) for s in pairs(4)[1])
    climb = run_offline_climb(first, 0)
    assert sum(t.outcome == "KEEP" for t in climb.climb.trials) > 1, "the premise: the first climb stacked keepers"
    goal = true_throughput(second, composition(second.target(), climb.climb.keepers).argv)
    cold = launches_to_goal(second, run_offline_climb(second, 1000), goal)
    warm_climb = run_offline_climb(second, 1000, recipes=recipes_from(first, climb, 0))
    warm = launches_to_goal(second, warm_climb, goal)
    assert warm_climb.climb.trials[0].variant.provenance == "recipe"
    assert warm is not None and (cold is None or warm < cold), (warm, cold)



def test_a_recipe_meets_the_proposers_guard_like_a_model_proposal() -> None:
    vllm = engine_for("vllm")
    harness = harness_flags_for("vllm")
    allowed = target_allowlist("vllm", [], None)
    plain = recipe_of(KLASS, variant("cap", ["--max-num-seqs", "32"]), 40.0, (20.0, 60.0), "a", "run-a")
    assert guard_refusal(plain, vllm, harness, vllm.env_prefixes, allowed) is None
    moved = recipe_of(KLASS, variant("port", ["--port", "9"]), 40.0, (20.0, 60.0), "a", "run-a")
    assert guard_refusal(moved, vllm, harness, vllm.env_prefixes, allowed).startswith("flag_identity:")
    preload = recipe_of(KLASS, variant("preload", []).model_copy(update={"set_env": {"LD_PRELOAD": "x.so"}}), 5.0,
                        (1.0, 9.0), "a", "run-a")
    assert guard_refusal(preload, vllm, harness, vllm.env_prefixes, allowed).startswith("env_denied:")
    dropped = recipe_of(KLASS, variant("eager off", []).model_copy(update={"remove_args": ["--enforce-eager"]}), 5.0,
                        (1.0, 9.0), "a", "run-a")
    assert guard_refusal(dropped, vllm, harness, vllm.env_prefixes, allowed) is None, "a removal changes something"
