"""The offline critic: each rule that rejects, what approves, and every library patch approved."""

from __future__ import annotations

import difflib

import pytest

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.patches.library import library_patches
from hyperloom_assets.core.proposer.critic_rules import RULES, CriticChange, review, rules_review

VLLM, SIM = engine_for("vllm"), engine_for("sim")


def diff(path: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))


STEP = "def step(batch):\n    return run(batch)\n"
GUARDED = "def step(batch):\n    try:\n        return run(batch)\n    except RuntimeError:\n        return None\n"


@pytest.mark.parametrize("change, rule", [
    (CriticChange(name="swallow", patch=diff("vllm/worker.py", STEP, GUARDED)), "sensitive_code"),
    (CriticChange(name="dump", patch=diff("vllm/worker.py", STEP, STEP + "open('/tmp/x', 'w').write('y')\n")),
     "file_access"),
    (CriticChange(name="shell", patch=diff("vllm/worker.py", STEP, STEP + "import subprocess\n")), "denied_import"),
    (CriticChange(name="api", patch=diff("vllm/entrypoints/openai/api_server.py", STEP, STEP.replace("run", "fast")))
     , "sensitive_file"),
    (CriticChange(name="fp8 kv", server_args=("--kv-cache-dtype", "fp8"), rationale="reads less KV per step"),
     "unstated_accuracy_risk"),
])
def test_each_rule_rejects_what_it_names(change, rule) -> None:
    reply = review(change, VLLM)
    assert reply.verdict == "reject" and reply.reasons[0].startswith(f"{rule}:"), reply
    assert rule in RULES


def test_what_approves_says_why() -> None:
    stated = review(CriticChange(name="fp8 kv", server_args=("--kv-cache-dtype", "fp8"),
                                 rationale="KV reads bind; fp8 KV lowers precision, so the answers may change"), VLLM)
    assert stated.verdict == "approve" and "accuracy gate" in stated.reasons[0]
    clean = review(CriticChange(name="cap", patch=diff("vllm/worker.py", STEP, STEP.replace("run", "run_fused"))), VLLM)
    assert clean.verdict == "approve" and "touches vllm/worker.py" in clean.reasons[0]
    plain = rules_review(CriticChange(name="seqs", server_args=("--max-num-seqs", "64")), VLLM)
    assert plain.approved and plain.critic == "rules" and plain.text().startswith("rules approve:")


@pytest.mark.parametrize("engine", ["vllm", "sim"])
def test_every_library_patch_passes_the_rules(engine) -> None:
    """The library's patches (offered or kept for the gate's tests) reach the tree: the critic is not their judge."""
    spec = engine_for(engine)
    patches = library_patches(spec)
    assert patches
    for patch in patches:
        verdict = review(CriticChange(name=patch.name, patch=patch.text, rationale=patch.risk), spec)
        assert verdict.verdict == "approve", (patch.name, verdict.reasons)
