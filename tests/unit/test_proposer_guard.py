"""The guard's rules one by one, on the engine modules' own data (no parser, no git: their verdicts are inputs)."""

from __future__ import annotations

import pytest

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.engines.registry import harness_flags_for
from hyperloom_assets.core.proposer.allowlist import target_allowlist
from hyperloom_assets.core.proposer.guard import GuardInputs, guard
from hyperloom_assets.core.proposer.replies import EnvSetting, ProposedChange
from hyperloom_assets.core.proposer.settings import ProposerConfigError, ProposerField, resolve_settings

VLLM = engine_for("vllm")
OK = GuardInputs(package_prefix="vllm", allowed=target_allowlist("vllm", [], None))
DIFF = "--- a/{0}\n+++ b/{0}\n@@ -1 +1 @@\n-a\n+b\n"


def proposal(args=(), env=None, patch=None, rationale="why") -> ProposedChange:
    return ProposedChange(name="p", server_args=list(args), env=[EnvSetting(name=k, value=v) for k, v in (env or {}).items()],
                          patch=patch, rationale=rationale)


@pytest.mark.parametrize("change, rule", [
    (proposal(["--download-dir", "/x"]), "flag_path"),
    (proposal(["--chat-template-file=/x"]), "flag_path"),
    (proposal(["--tokenizer", "t"]), "flag_identity"),
    (proposal(["--port", "1"]), "flag_identity"),
    (proposal(["--max-num-seqs", "8|cat"]), "shell_metacharacter"),
    (proposal(["--max-num-seqs", "8\n"]), "shell_metacharacter"),
    (proposal(env={"LD_PRELOAD": "x.so"}), "env_denied"),
    (proposal(env={"VLLM_API_KEY": "x"}), "env_denied"),
    (proposal(env={"PYTHONPATH": "/x"}), "env_denied"),
    (proposal(env={"OMP_NUM_THREADS": "2"}), "env_prefix"),
    (ProposedChange(name="p", server_args=[], patch=None, rationale="why",
                    env=[EnvSetting(name="VLLM_X", value="1"), EnvSetting(name="VLLM_X", value="2")]), "env_duplicate"),
    (proposal(patch=DIFF.format("setup.py")), "patch_outside_package"),
    (proposal(patch=DIFF.format("vllm/../setup.py")), "patch_outside_package"),
    (proposal(patch="x" * 30_000), "patch_too_large"),
    (proposal(), "empty_proposal"),
])
def test_each_rule_refuses_what_it_names(change, rule) -> None:
    assert guard(change, VLLM, harness_flags_for("vllm"), OK).rule == rule


def test_the_parser_and_git_verdicts_refuse_and_a_clean_proposal_passes() -> None:
    bad_argv = GuardInputs(package_prefix="vllm", parser_error="unrecognized arguments: --bogus")
    assert guard(proposal(["--bogus", "1"]), VLLM, frozenset(), bad_argv).rule == "argv_unparsed"
    stale = GuardInputs(package_prefix="vllm", patch_apply_error="patch does not apply")
    assert guard(proposal(patch=DIFF.format("vllm/x.py")), VLLM, frozenset(), stale).rule == "patch_not_applying"
    clean = guard(proposal(["--max-num-seqs", "8"], {"VLLM_CPU_KVCACHE_SPACE": "2"}, DIFF.format("vllm/x.py")),
                  VLLM, frozenset(), OK)
    assert clean.passed


def test_harness_flags_and_claimed_gains() -> None:
    sim = engine_for("sim")
    assert guard(proposal(["--time-scale", "1000"]), sim, harness_flags_for("sim"), OK).rule == "harness_flag"
    verdict = guard(proposal(["--max-num-seqs", "8"], rationale="gains 35% and 2x, 900 tok/s"), VLLM, frozenset(), OK)
    assert verdict.claims_discarded == 3 and "35%" not in verdict.proposal.rationale


def test_settings_default_from_the_environment_and_name_the_field() -> None:
    assert resolve_settings(None, {}).provider == "rules"
    env = {"HYPERLOOM_PROPOSER": "anthropic", "HYPERLOOM_PROPOSER_MODEL": "m"}
    assert resolve_settings(None, env).label == "llm:anthropic/m"
    with pytest.raises(ProposerConfigError, match="proposer.model"):
        resolve_settings(ProposerField(provider="openai"), {})
    with pytest.raises(ProposerConfigError, match="HYPERLOOM_PROPOSER"):
        resolve_settings(None, {"HYPERLOOM_PROPOSER": "gpt"})
    with pytest.raises(ValueError, match="critic_model: a model name for critic_provider 'openai'"):
        ProposerField(provider="anthropic", model="m", critic_provider="openai")
    with pytest.raises(ProposerConfigError, match="proposer.critic_model"):
        resolve_settings(ProposerField(critic_provider="openai"), {})
    rules_critic = resolve_settings(ProposerField(provider="openai", model="m", critic_provider="rules"), {})
    assert (rules_critic.critic_label, rules_critic.critic_model) == ("rules", None), "no model to send a rules review to"
