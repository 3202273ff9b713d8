"""The plan: grid variants relative to the base, explicit ablations, scored and deduplicated."""

from __future__ import annotations

import pytest

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.planning.fingerprints import trial_fingerprint, variant_fingerprint
from hyperloom_assets.core.planning.plan_evidence import model_class
from hyperloom_assets.core.planning.planner import RULES, PlanEvidence, plan, prefix_share_of, replan
from hyperloom_assets.core.roofline.model_shape import shape_from_config
from hyperloom_assets.core.engines.registry import engine_flags_for
from hyperloom_assets.core.engines.sim import HARNESS_FLAGS as SIM_HARNESS_FLAGS
from hyperloom_assets.core.measurement.telemetry import Telemetry
from hyperloom_assets.core.planning.rules import shipped_rules
from hyperloom_assets.core.planning.seed_grids import load_grids
from hyperloom_assets.core.planning.variants import Variant, apply_variant, setting_key, split_args

GRIDS = load_grids()
RANDOM_16 = Workload(kind="random", isl=256, osl=64, concurrency=16)
CPU = PlanEvidence(host="cpu")


def by_name(variants: list[Variant]) -> dict[str, Variant]:
    return {v.name: v for v in variants}


def rule_of(variant: Variant) -> str:
    return variant.reason.split("]")[0].lstrip("[")


def singles(variants: list[Variant]) -> list[Variant]:
    """The plan without the variant that moves several knobs at once (planning/combine.py)."""
    return [v for v in variants if v.provenance != "combined"]


def test_a_capped_config_puts_the_cap_raise_first():
    variants = singles(plan("vllm", None, ["--max-num-seqs", "4", "--enforce-eager"], {}, RANDOM_16, CPU, set(),
                            grids=GRIDS))
    first = variants[0]
    assert rule_of(first) == "cap_raise_to_concurrency"
    assert first.name == "max-num-seqs=16"  # the smallest step that reaches the concurrency
    assert first.expected_value == max(v.expected_value for v in variants)
    budget = by_name(variants)["max-num-batched-tokens=4096"]
    assert rule_of(budget) == "budget_up_cap_binding"
    assert variants.index(budget) > variants.index(by_name(variants)["max-num-seqs=8"])


def test_every_reason_names_a_rule_of_the_table_and_scores_are_ordered():
    variants = plan("vllm", None, ["--max-num-seqs", "4", "--enforce-eager"], {"VLLM_CPU_KVCACHE_SPACE": "2"},
                    RANDOM_16, CPU, set(), grids=GRIDS)
    assert all(rule_of(v) in RULES for v in variants)
    values = [v.expected_value for v in variants]
    assert values == sorted(values, reverse=True)


def test_after_the_cap_is_raised_the_budget_ladder_scores_next():
    operator = ["--max-num-seqs", "4", "--enforce-eager"]
    first = plan("vllm", None, operator, {}, RANDOM_16, CPU, set(), grids=GRIDS)
    keeper = by_name(first)["max-num-seqs=32"]
    tried = {trial_fingerprint([], v) for v in first[:3]}
    second = singles(replan("vllm", None, operator, {}, [keeper], RANDOM_16, CPU, tried, grids=GRIDS))
    assert rule_of(second[0]) == "budget_up_cap_free"
    assert second[0].name == "max-num-batched-tokens=4096"
    names = by_name(second)
    assert rule_of(names["max-num-batched-tokens=8192"]) == "budget_up_cap_free"
    # The keeper's own knob is not ablated, and the cap is not raised again.
    assert "drop --max-num-seqs" not in names and "max-num-seqs=32" not in names


def test_the_budget_ladder_extends_upward_from_a_new_base():
    operator = ["--max-num-seqs", "64"]
    long_prompts = Workload(kind="random", isl=4096, osl=64, concurrency=16)  # 65,536 prompt tokens at once
    first = plan("vllm", None, operator, {}, long_prompts, CPU, set(), grids=GRIDS)
    assert "max-num-batched-tokens=32768" not in by_name(first)
    keeper = by_name(first)["max-num-batched-tokens=16384"]
    second = replan("vllm", None, operator, {}, [keeper], long_prompts, CPU, set(), grids=GRIDS)
    names = by_name(second)
    assert "max-num-batched-tokens=32768" in names
    assert rule_of(names["max-num-batched-tokens=32768"]) == "budget_up_cap_free"
    assert rule_of(names["max-num-batched-tokens=4096"]) == "budget_down"


def test_a_budget_that_holds_every_concurrent_prompt_is_not_raised_before_other_knobs():
    """The make demo target: 16 prompts of 128 tokens fit the CPU's default 2048 whole."""
    demo = Workload(kind="random", isl=128, osl=64, concurrency=16)
    variants = plan("vllm", None, ["--max-num-seqs", "16"], {}, demo, CPU, set(), grids=GRIDS)
    raises = [v for v in singles(variants) if v.name.startswith("max-num-batched-tokens=")]
    assert raises and {rule_of(v) for v in raises} == {"budget_up_covered"}
    assert all(v.expected_value < shipped_rules().combine.min_score for v in raises)
    combination = [v for v in variants if v.provenance == "combined"]
    assert not combination or "max-num-batched-tokens" not in combination[0].name
    # One prompt token more per stream and the budget no longer holds them all.
    longer = demo.model_copy(update={"isl": 129})
    again = singles(plan("vllm", None, ["--max-num-seqs", "16"], {}, longer, CPU, set(), grids=GRIDS))
    assert rule_of(by_name(again)["max-num-batched-tokens=4096"]) == "budget_up_cap_free"


def test_under_a_prefill_diagnosis_a_covered_budget_gets_no_boost():
    """Prefill binds, but 16 prompts of 128 tokens already fit the budget whole: neither a
    larger budget nor prefilling whole prompts can act on it."""
    demo = Workload(kind="random", isl=128, osl=64, concurrency=16)
    prefill = PlanEvidence(host="cpu", sequence_cap=16, telemetry=Telemetry(
        engine="vllm", scrapes=60, running_mean=9.9, waiting_mean=0.0, kv_usage_pct_max=0.4, preemptions=0,
        prefill_s=36.5, decode_s=63.5))
    variants = singles(plan("vllm", None, ["--max-num-seqs", "16"], {}, demo, prefill, set(), grids=GRIDS))
    names = by_name(variants)
    assert "diagnosis prefill" in names["max-num-batched-tokens=4096"].reason
    assert names["max-num-batched-tokens=4096"].expected_value == RULES["budget_up_covered"].score
    assert rule_of(names["no-chunked-prefill"]) == "chunked_prefill_covered"
    assert names["no-chunked-prefill"].expected_value == RULES["chunked_prefill_covered"].score


def test_variants_are_relative_to_the_base_and_skip_no_ops():
    variants = plan("vllm", None, ["--max-num-seqs", "8", "--block-size", "64"], {}, RANDOM_16, CPU, set(), grids=GRIDS)
    names = by_name(variants)
    assert "max-num-seqs=8" not in names  # already the base's value
    assert "block-size-cpu=64" not in names
    # Restating an engine default is not a change either (CPU budget default 2048).
    assert "max-num-batched-tokens=2048" not in names


def test_tried_fingerprints_are_skipped():
    base = ["--max-num-seqs", "4"]
    everything = plan("vllm", None, base, {}, RANDOM_16, CPU, set(), grids=GRIDS)
    tried = {variant_fingerprint(everything[0]), variant_fingerprint(everything[2])}
    again = plan("vllm", None, base, {}, RANDOM_16, CPU, tried, grids=GRIDS)
    assert [v.name for v in again] == [v.name for i, v in enumerate(everything) if i not in (0, 2)]


def test_identical_changes_under_different_names_are_planned_once(tmp_path):
    grids = load_grids()
    vllm = grids["vllm"]
    twin = vllm.entries[0].model_copy(update={"name": "twin-of-max-num-seqs"})
    grids["vllm"] = vllm.model_copy(update={"entries": [*vllm.entries, twin]})
    variants = plan("vllm", None, ["--max-num-seqs", "4"], {}, RANDOM_16, CPU, set(), grids=grids)
    fingerprints = [variant_fingerprint(v) for v in variants]
    assert len(fingerprints) == len(set(fingerprints))
    assert "max-num-seqs=32" in by_name(variants) and "twin-of-max-num-seqs=32" not in by_name(variants)


def test_harness_flags_never_appear_in_any_variant():
    sim_args = ["--gpu", "H100", "--time-scale", "4", "--noise-pct", "1", "--seed", "7", "--tp", "1",
                "--stream-interval-ms", "5", "--max-num-seqs", "4", "--enforce-eager"]
    harness = {setting_key(f) for f in SIM_HARNESS_FLAGS}
    for flavor in ("vllm", "sglang"):
        args = [*sim_args, "--flavor", flavor]
        variants = plan("sim", flavor, args, {}, RANDOM_16, PlanEvidence(), set(), grids=GRIDS)
        assert variants
        for v in variants:
            touched = {setting_key(s.flag) for s in split_args(v.add_args) if s.flag} | {setting_key(f) for f in v.remove_args}
            assert not touched & harness, v.name


def test_a_sim_plans_with_its_flavors_grid():
    variants = plan("sim", "sglang", ["--gpu", "H100", "--flavor", "sglang"], {}, RANDOM_16, PlanEvidence(), set(), grids=GRIDS)
    flags = {s.flag for v in variants for s in split_args(v.add_args)}
    assert "--max-running-requests" in flags and "--max-num-seqs" not in flags


def test_an_ablation_removes_a_flag_with_its_value_and_never_adds_a_counter_flag():
    operator = ["--max-num-seqs", "4", "--enforce-eager", "--no-enable-prefix-caching", "--dtype", "float16"]
    workload = Workload(kind="shared_prefix", isl=256, osl=64, prefix_len=192, concurrency=16)
    evidence = PlanEvidence(host="gpu", prefix_share=prefix_share_of(workload))
    variants = plan("vllm", None, operator, {"E": "1"}, workload, evidence, set(), grids=GRIDS)
    ablations = [v for v in variants if v.provenance == "ablation"]
    for v in ablations:
        assert v.add_args == [] and v.set_env == {}
    names = by_name(variants)
    drop_cap = names["drop --max-num-seqs"]
    assert apply_variant(operator, {}, drop_cap).argv == ["--enforce-eager", "--no-enable-prefix-caching", "--dtype", "float16"]
    assert rule_of(names["drop --enforce-eager"]) == "cuda_graphs_gpu"
    assert rule_of(names["drop --no-enable-prefix-caching"]) == "prefix_cache"
    assert names["unset E"].unset_env == ["E"]
    assert "drop --dtype" not in names  # a keep flag: it changes what is served
    # No grid variant flips the operator's own booleans either.
    added = [a for v in variants for a in v.add_args]
    assert "--no-enforce-eager" not in added and "--enable-prefix-caching" not in added


def test_prefix_caching_scores_by_prefix_share():
    # ATOM before v0.1.3 kept the prefix cache off by default: its grid's defaults without the switch.
    atom = GRIDS["atom"]
    defaults = [a for a in atom.defaults.any if a != "--enable_prefix_caching"]
    old_atom = {**GRIDS, "atom": atom.model_copy(update={"defaults": atom.defaults.model_copy(update={"any": defaults})})}

    def prefix_variant(share: float, grids=old_atom) -> Variant:
        variants = plan("atom", None, [], {}, RANDOM_16, PlanEvidence(prefix_share=share), set(), grids=grids)
        return by_name(variants).get("prefix-caching")

    assert prefix_variant(0.0) is None  # `when: {shared_prefix: true}` does not hold
    assert prefix_variant(0.9).expected_value > prefix_variant(0.2).expected_value
    assert prefix_variant(0.9, GRIDS) is None  # on by default since v0.1.3: restating it is not a variant


def test_fp8_kv_scores_when_memory_bound_with_kv_pressure_and_risky_scores_lower():
    def fp8(evidence: PlanEvidence) -> Variant:
        return by_name(plan("vllm", None, [], {}, RANDOM_16, evidence, set(), grids=GRIDS))["fp8-kv"]

    preempting = Telemetry(engine="vllm", scrapes=3, preemptions=3, kv_usage_pct_max=100.0, running_mean=20.0,
                           waiting_mean=12.0)
    starved = fp8(PlanEvidence(binding="memory", telemetry=preempting))
    near_roofline = fp8(PlanEvidence(binding="memory", achieved_pct=85.0))
    plain = fp8(PlanEvidence(binding="compute"))
    assert rule_of(starved) == "fp8_kv_capacity" and starved.diagnosis == "kv_capacity"
    assert rule_of(near_roofline) == "fp8_kv_pressure" and near_roofline.diagnosis == "memory_bandwidth"
    assert rule_of(plain) == "fp8_kv_other"
    assert starved.expected_value > near_roofline.expected_value > plain.expected_value
    boost = shipped_rules().diagnoses["kv_capacity"].boosts["fp8_kv"]
    assert starved.expected_value == (RULES["fp8_kv_capacity"].score + boost) * 0.5
    assert starved.accuracy_risky


def test_atom_gates_by_model_class():
    plain = by_name(plan("atom", None, [], {}, RANDOM_16, PlanEvidence(), set(), grids=GRIDS))
    assert not {"expert-parallel", "dp-attention", "mtp", "fp8-kv"} & set(plain)
    assert "level=2" in plain and "level=3" not in plain  # 3 is the default
    moe = by_name(plan("atom", None, [], {}, RANDOM_16, PlanEvidence(moe=True, has_mtp=True, fp8_model=True), set(), grids=GRIDS))
    assert {"expert-parallel", "dp-attention", "mtp", "fp8-kv"} <= set(moe)
    assert moe["mtp"].add_args == ["--method", "mtp", "--num-speculative-tokens", "1"]
    assert moe["cudagraph-capture-sizes=[1,2,4,8,16]"].add_args[1] == "[1,2,4,8,16]"


def test_a_model_that_ships_mtp_layers_gets_the_speculative_variant():
    deepseek_like = {"hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128, "vocab_size": 129280,
                     "n_routed_experts": 256, "num_experts_per_tok": 8, "num_nextn_predict_layers": 1}
    shape = shape_from_config(deepseek_like)
    assert model_class(shape) == {"moe": True, "fp8_model": False, "has_mtp": True}
    variants = by_name(plan("atom", None, [], {}, RANDOM_16, PlanEvidence(**model_class(shape)), set(), grids=GRIDS))
    assert rule_of(variants["mtp"]) == "speculative"
    plain = shape_from_config({**deepseek_like, "num_nextn_predict_layers": 0})
    assert "mtp" not in by_name(plan("atom", None, [], {}, RANDOM_16, PlanEvidence(**model_class(plain)), set(),
                                     grids=GRIDS))


def test_accepted_flags_filter_what_a_sim_can_take():
    accepted = frozenset({"--max-num-seqs", "--max-num-batched-tokens", "--enforce-eager"})
    variants = plan("sim", "vllm", ["--gpu", "H100"], {}, RANDOM_16, PlanEvidence(), set(), grids=GRIDS, accepted_flags=accepted)
    flags = {setting_key(s.flag) for v in variants for s in split_args(v.add_args)}
    assert flags <= accepted and flags


@pytest.mark.parametrize("engine", ["vllm", "sglang", "atom"])
def test_every_engine_plans_something_on_an_empty_base(engine):
    variants = plan(engine, None, [], {}, RANDOM_16, PlanEvidence(), set(), grids=GRIDS)
    assert variants and all(v.provenance in ("seed_grid", "combined") for v in variants)


def test_a_grid_entry_on_a_harness_flag_is_dropped_for_the_sim_only():
    grids = load_grids()
    vllm = grids["vllm"]
    seed_entry = vllm.entries[0].model_copy(update={"name": "seed", "flag": "--seed", "ladder": None, "choices": ["1"]})
    grids["vllm"] = vllm.model_copy(update={"entries": [*vllm.entries, seed_entry]})
    for_sim = plan("sim", "vllm", ["--gpu", "H100", "--seed", "7"], {}, RANDOM_16, PlanEvidence(), set(), grids=grids)
    assert "seed=1" not in by_name(for_sim)
    for_vllm = plan("vllm", None, [], {}, RANDOM_16, PlanEvidence(), set(), grids=grids)
    assert "seed=1" in by_name(for_vllm)  # --seed is vLLM's own flag when vLLM serves


@pytest.mark.parametrize("flavor", ["vllm", "sglang"])
def test_a_sim_is_only_offered_the_flags_its_flavor_parser_knows(flavor):
    # The grids offer --stream-interval, which the sim does not implement: planning it
    # would only spend a launch on `unrecognized arguments`, again after every keeper.
    known = {setting_key(f) for f in engine_flags_for("sim", flavor)}
    base = ["--gpu", "H100", "--flavor", flavor]
    for_sim = plan("sim", flavor, base, {}, RANDOM_16, PlanEvidence(), set(), grids=GRIDS)
    added = {setting_key(s.flag) for v in for_sim for s in split_args(v.add_args) if s.flag}
    assert added and added <= known
    assert not any(v.name.startswith("stream-interval") for v in for_sim)
    # The real engine keeps the grid's full list.
    assert any(v.name.startswith("stream-interval") for v in plan(flavor, None, [], {}, RANDOM_16, PlanEvidence(), set(), grids=GRIDS))


def test_the_gpu_token_budget_default_is_not_assumed():
    # vLLM's GPU budget default is 2048 or 8192 by the card's memory (the sim's is 8192), so
    # on a GPU the 2048 step is a real change; the CPU backend's 2048 is a known default.
    gpu = by_name(plan("vllm", None, ["--max-num-seqs", "16"], {}, RANDOM_16, PlanEvidence(host="gpu"), set(), grids=GRIDS))
    assert "max-num-batched-tokens=2048" in gpu
    cpu = by_name(plan("vllm", None, ["--max-num-seqs", "16"], {}, RANDOM_16, CPU, set(), grids=GRIDS))
    assert "max-num-batched-tokens=2048" not in cpu and "max-num-batched-tokens=4096" in cpu
