"""The search-quality benchmark's proposer column: the product's round inside the offline climb.

The real round (assets/proposer_round.py: the openai SDK, the sim's own parser in a
subprocess, the critic) against tests/proposer/scripted_llm.py, an in-process HTTP
thread: an approved proposal the space admits is tried first, with the model's
provenance, and one the space does not hold is never launched; a reply that is noise
falls back to the rule plan, and the climb is then planner+history's to the launch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.support.llm_servers import environment, scripted
from benchmarks.support.offline_climb import SimScenario
from benchmarks.support.offline_proposer import OfflineProposer
from benchmarks.support.search_space import Noise, Space
from benchmarks.support.searchers import climb_search
from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.planning.stack import composition
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.resources.proposer.providers import LlmProviders
from tests.conftest import SIM_MODEL
from tests.proposer.proposals import APPROVE, change
from tests.proposer.scripted_llm import Unconstrained

# A small space (448 points, a few seconds of truths): a cap of 4 under 16 streams.
SCENARIO = SimScenario(name="capped-small", model=SIM_MODEL, gpu="H100", server_args=["--max-num-seqs", "4"],
                       workload=Workload(kind="random", isl=256, osl=64, concurrency=16, num_prompts=32))
NOISE, SEED, BUDGETS = Noise(launch_sd=0.05, repeat_sd=0.03), 0, [5, 10, 20, 40]
IN_SPACE = change("raise the cap", ["--max-num-seqs", "16"], rationale="the cap of 4 binds under 16 streams")
OUTSIDE = change("an odd cap", ["--max-num-seqs", "20"], rationale="the grid never offers it")
MODEL = "scripted-model"


@pytest.fixture(scope="module")
def space() -> Space:
    return Space.build(SCENARIO, workers=1)


def admitted(space: Space, proposal: dict) -> bool:
    variant = Variant(name=proposal["name"], add_args=proposal["server_args"], provenance="llm", reason="")
    return space.contains(composition(SCENARIO.target(), [variant]).argv)


def climb_with(space: Space, script: dict, tmp_path: Path, max_rounds: int):
    with scripted(script, model=MODEL) as server, environment(server.env):
        proposer = OfflineProposer.from_field({**server.proposer, "max_rounds": max_rounds},
                                              LlmProviders(max_tokens=server.max_tokens), tmp_path / "host")
        picks, trials = climb_search(space, NOISE, SEED, BUDGETS, history=True, proposer=proposer)
    return proposer, picks, trials


def test_an_approved_proposal_in_the_space_is_tried_first_with_the_models_provenance(space, tmp_path) -> None:
    assert admitted(space, IN_SPACE) and not admitted(space, OUTSIDE), "the script's premise"
    script = {"proposer": [json.dumps({"proposals": [OUTSIDE, IN_SPACE]}), json.dumps({"proposals": []})],
              "critic": [APPROVE]}
    proposer, _, trials = climb_with(space, script, tmp_path, max_rounds=2)

    assert [r.round for r in proposer.rounds] == [1, 2], "round 1 on the first plan, round 2 after the keeper"
    first_round = proposer.rounds[0]
    assert not first_round.fell_back
    assert [f.outcome for f in first_round.fates] == ["approved", "approved"], "the guard and the critic passed both"
    assert trials[0].name == "llm: raise the cap", "the model's approved proposal goes ahead of the rule plan"
    assert trials[0].variant.trial_provenance() == f"llm:openai/{MODEL}"
    assert trials[0].variant.llm.verdict == "approve"
    assert all("an odd cap" not in t.name for t in trials), "a proposal outside the space is never launched"
    # The model saw the offline baseline's evidence, as the asset's round shows it.
    sent = json.loads(first_round.calls[0].messages[1].content)
    assert sent["target"]["server_args"] == SCENARIO.target().server_args
    assert "--max-num-seqs" in sent["allowed_knobs"]["flags"], "the model is shown what the guard lets through"
    assert sent["baseline"]["launch_evidence"] and sent["roofline"]["ceiling_tok_s"] > 0
    assert proposer.summary()["llm_calls"] == sum(len(r.calls) for r in proposer.rounds) >= 3


def test_a_reply_that_is_noise_falls_back_and_the_climb_is_planner_history(space, tmp_path) -> None:
    script = {"proposer": [Unconstrained("<s> cap cap the the 4 }{ proposals")], "critic": [APPROVE]}
    proposer, picks, trials = climb_with(space, script, tmp_path, max_rounds=1)

    assert [r.round for r in proposer.rounds] == [1], "not asked again after the keeper: max_rounds is 1"
    assert proposer.rounds[0].fell_back and "ProposerReply" in proposer.rounds[0].fallback_reason
    assert any(t.outcome == "KEEP" for t in trials), "the climb re-planned (the premise of the round bound)"
    assert all(t.variant.provenance != "llm" for t in trials)
    planner_picks, planner_trials = climb_search(space, NOISE, SEED, BUDGETS, history=True)
    assert picks == planner_picks, "the fallback is planner+history's pick at every budget"
    assert [(t.name, t.outcome) for t in trials] == [(t.name, t.outcome) for t in planner_trials]
