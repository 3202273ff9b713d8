"""The guard's allowlist (issue 48, point 3): a model proposes only the knobs of the engine's grid, its
rules and the target's search_space, each spelled out in full. Pure code, no parser, no server."""

from __future__ import annotations

import pytest

from hyperloom_assets.core.config.search_space import SearchSpace
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.engines.registry import harness_flags_for
from hyperloom_assets.core.planning.recipes import RecipeClass, guard_refusal, recipe_of
from hyperloom_assets.core.planning.seed_grids import GridEntry, load_grids
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.proposer.allowlist import allowlist_of, target_allowlist
from hyperloom_assets.core.proposer.guard import GuardInputs, guard
from hyperloom_assets.core.proposer.replies import EnvSetting, ProposedChange

VLLM = engine_for("vllm")
HARNESS = harness_flags_for("vllm")

# Each passed the deny-list guard and the critic before the allowlist (issue 48, point 3).
ABBREVIATIONS = [["--hos", "0.0.0.0"], ["--por", "22"], ["--served-model", "other"]]
EXPLOIT_ARGS = [
    *ABBREVIATIONS,
    ["--tool-parser-plugin", "/tmp/evil.py"], ["--chat-template", "/etc/shadow"], ["--config", "/tmp/c.yaml"],
    ["--middleware", "evil.Middleware"], ["--worker-extension-cls", "evil.Ext"], ["--trust-remote-code"],
    ["--allowed-local-media", "/"], ["--otlp-traces-endpoint", "http://203.0.113.9:4317"],
]


def rules(verdict) -> list[str]:
    return [r.rule for r in verdict.refusals]


def first_rule(args: list[str]) -> str:
    """The rule reported: an abbreviation of an identity flag is the harness's before it is not allowed."""
    return "flag_identity" if args in ABBREVIATIONS else "flag_not_allowed"
EXPLOIT_ENV = ["VLLM_LOGGING_CONFIG_PATH", "VLLM_USAGE_STATS_SERVER", "VLLM_ALLOW_INSECURE_SERIALIZATION",
               "VLLM_RPC_BASE_PATH"]


def proposal(args=(), env=None) -> ProposedChange:
    return ProposedChange(name="p", server_args=list(args), patch=None, rationale="why",
                          env=[EnvSetting(name=k, value=v) for k, v in (env or {}).items()])


def inputs(space: SearchSpace | None = None, allowed=None) -> GuardInputs:
    return GuardInputs(package_prefix="vllm", allowed=allowed or target_allowlist("vllm", [], space))


def with_prefixes_in_grid():
    """The vLLM grid with an entry that sets a prefix of each exploit flag (a grid that happens to hold one)."""
    grid = load_grids()["vllm"]
    prefixes = ["--ho", "--po", "--served", "--tool-parser", "--chat", "--con", "--midd", "--worker",
                "--trust-remote", "--allowed-local", "--otlp"]
    extra = [GridEntry(name=p, rule="search_space", add_args=[p]) for p in prefixes]
    return allowlist_of(VLLM, grid.model_copy(update={"entries": [*grid.entries, *extra]}), None)


@pytest.mark.parametrize("args", EXPLOIT_ARGS, ids=lambda a: a[0])
def test_each_exploit_flag_is_refused_by_name(args) -> None:
    verdict = guard(proposal(args), VLLM, HARNESS, inputs())
    assert verdict.rule == first_rule(args) and args[0] in verdict.refusals[0].detail, verdict.refusals
    allowlist = [r for r in verdict.refusals if r.rule == "flag_not_allowed"]
    assert allowlist and args[0] in allowlist[0].detail, "the allowlist refuses it on its own"


@pytest.mark.parametrize("args", EXPLOIT_ARGS, ids=lambda a: a[0])
def test_a_grid_holding_a_prefix_of_an_exploit_flag_still_refuses_it(args) -> None:
    verdict = guard(proposal(args), VLLM, HARNESS, inputs(allowed=with_prefixes_in_grid()))
    assert verdict.rule == first_rule(args) and "flag_not_allowed" in rules(verdict), verdict.refusals


@pytest.mark.parametrize("args, identity", [(["--hos", "0.0.0.0"], "--host"), (["--por", "22"], "--port"),
                                             (["--served-model", "x"], "--served-model-name"),
                                             (["--tokenizer-rev=x"], "--tokenizer-revision")])
def test_an_abbreviation_of_an_identity_flag_is_the_harnesss_even_when_a_space_lists_it(args, identity) -> None:
    space = SearchSpace(args={args[0].split("=")[0]: ["x"]})
    verdict = guard(proposal(args), VLLM, HARNESS, inputs(space))
    assert rules(verdict) == ["flag_identity"] and identity in verdict.refusals[0].detail, verdict.refusals


@pytest.mark.parametrize("name", EXPLOIT_ENV)
def test_each_exploit_env_name_is_refused_by_name(name) -> None:
    verdict = guard(proposal(env={name: "x"}), VLLM, HARNESS, inputs())
    assert verdict.rule == "env_not_allowed" and name in verdict.refusals[0].detail, verdict.refusals


def test_a_grid_flag_and_env_pass_and_an_abbreviation_of_them_does_not() -> None:
    assert guard(proposal(["--max-num-seqs", "8", "--enable-prefix-caching"], {"VLLM_CPU_KVCACHE_SPACE": "2"}),
                 VLLM, HARNESS, inputs()).passed
    assert guard(proposal(["--kv-cache-dtype", "fp8"]), VLLM, HARNESS, inputs()).passed, "a fixed change's flag"
    assert guard(proposal(["--max-num-seqs=8"]), VLLM, HARNESS, inputs()).passed, "--flag=value is the same flag"
    assert guard(proposal(["--no-enable-prefix-caching"]), VLLM, HARNESS, inputs()).passed, "the knob's off-switch"
    assert guard(proposal(["--max-num", "8"]), VLLM, HARNESS, inputs()).rule == "flag_not_allowed"
    assert guard(proposal(env={"VLLM_CPU_KVCACHE": "2"}), VLLM, HARNESS, inputs()).rule == "env_not_allowed"


def test_a_search_space_flag_and_env_pass_only_for_the_target_that_lists_them() -> None:
    space = SearchSpace(args={"--async-scheduling": [True], "--long-prefill-token-threshold": [64]},
                        env={"VLLM_ATTENTION_BACKEND": ["FLASH_ATTN"]})
    change = proposal(["--async-scheduling", "--long-prefill-token-threshold", "128"],
                      {"VLLM_ATTENTION_BACKEND": "FLASHINFER"})
    assert guard(change, VLLM, HARNESS, inputs(space)).passed
    refused = guard(change, VLLM, HARNESS, inputs())
    assert rules(refused) == ["flag_not_allowed", "flag_not_allowed", "env_not_allowed"]


def test_an_engine_alias_passes_only_when_the_flag_it_stands_for_is_allowed() -> None:
    tp = proposal(["-tp", "2"])
    assert guard(tp, VLLM, HARNESS, inputs()).rule == "flag_not_allowed"
    assert "--tensor-parallel-size" in guard(tp, VLLM, HARNESS, inputs()).refusals[0].detail
    assert guard(tp, VLLM, HARNESS, inputs(SearchSpace(args={"--tensor-parallel-size": [2]}))).passed
    assert guard(proposal(["--tensor-parallel-size", "2"]), VLLM, HARNESS,
                 inputs(SearchSpace(args={"-tp": [2]}))).passed, "a space that lists the alias allows its flag"
    assert guard(proposal(["-t", "2"]), VLLM, HARNESS,
                 inputs(SearchSpace(args={"--tensor-parallel-size": [2]}))).rule == "flag_not_allowed"


def test_an_alias_of_an_identity_flag_is_the_harnesss_even_when_allowed() -> None:
    sglang = engine_for("sglang")  # its launcher takes --model for --model-path
    allowed = allowlist_of(sglang, None, SearchSpace(args={"--model": ["m"]}))
    verdict = guard(proposal(["--model", "other"]), sglang, harness_flags_for("sglang"),
                    GuardInputs(package_prefix="sglang", allowed=allowed))
    assert rules(verdict) == ["flag_identity"]


def test_a_token_argparse_reads_as_an_option_is_checked_even_in_a_value_slot() -> None:
    # float() takes `-inf`, argparse does not: to it, it is the short option -i with the argument `nf`.
    verdict = guard(proposal(["--gpu-memory-utilization", "-inf"]), VLLM, HARNESS, inputs())
    assert verdict.rule == "flag_not_allowed" and "-inf" in verdict.refusals[0].detail
    assert guard(proposal(["--stream-interval", "-1"]), VLLM, HARNESS, inputs()).passed, "a negative number is a value"


def test_where_the_parser_is_known_a_flag_must_be_registered_as_written() -> None:
    registered = ["--max-num-seqs", "--enable-prefix-caching", "--no-enable-prefix-caching"]
    allowed = target_allowlist("vllm", [], None).with_parser(registered)
    assert guard(proposal(["--max-num-seqs", "8"]), VLLM, HARNESS, inputs(allowed=allowed)).passed
    # In the grid, but this release's parser lacks it: argparse would take it for a prefix of a longer flag.
    verdict = guard(proposal(["--block-size", "16"]), VLLM, HARNESS, inputs(allowed=allowed))
    assert verdict.rule == "flag_not_allowed" and "registers" in verdict.refusals[0].detail
    assert target_allowlist("vllm", [], None).with_parser([]).registered is None, "no flag list: unknown"


def test_a_caller_that_passes_no_allowlist_refuses_every_knob() -> None:
    verdict = guard(proposal(["--max-num-seqs", "8"], {"VLLM_CPU_KVCACHE_SPACE": "2"}), VLLM, HARNESS,
                    GuardInputs(package_prefix="vllm"))
    assert rules(verdict) == ["flag_not_allowed", "env_not_allowed"]


def test_a_stand_in_is_allowed_its_flavors_grid() -> None:
    sim_args = ["--gpu", "H100", "--flavor", "sglang"]
    allowed = target_allowlist("sim", sim_args, None)
    assert allowed == target_allowlist("sglang", [], None)
    sim = engine_for("sim")
    ok = GuardInputs(package_prefix="hyperloom_assets/sim", env_prefixes=("SGLANG_", "SGL_"), allowed=allowed)
    assert guard(proposal(["--max-running-requests", "8"]), sim, harness_flags_for("sim"), ok).passed
    assert guard(proposal(["--max-num-seqs", "8"]), sim, harness_flags_for("sim"), ok).rule == "flag_not_allowed"


def test_a_recipe_holds_only_what_this_targets_allowlist_allows() -> None:
    klass = RecipeClass(engine="vllm 0.32", model="dense <1B gqa float32", hardware="cpu", workload="random")
    kept = Variant(name="threshold", add_args=["--long-prefill-token-threshold", "64"], provenance="search_space",
                   reason="another target's space")
    recipe = recipe_of(klass, kept, 10.0, (2.0, 18.0), "other", "run-a")
    space = SearchSpace(args={"--long-prefill-token-threshold": [64]})
    assert guard_refusal(recipe, VLLM, HARNESS, VLLM.env_prefixes, target_allowlist("vllm", [], space)) is None
    refusal = guard_refusal(recipe, VLLM, HARNESS, VLLM.env_prefixes, target_allowlist("vllm", [], None))
    assert refusal is not None and refusal.startswith("flag_not_allowed:")
