"""The recipe memory through the graph, on the sim: a first target's validated keeper is filed,
and a second target of the same class tries it first, with its provenance, and its model sees it."""

from __future__ import annotations

import json

import yaml

from hyperloom_assets.resources.store.llm_calls import LlmCallLog
from hyperloom_assets.resources.store.recipes import RecipeBook
from tests.conftest import SIM_MODEL
from tests.graph_runs import run_job, trial_observations
from tests.proposer.proposals import APPROVE
from tests.proposer.scripted_llm import ScriptedLlm


def target(isl: int, concurrency: int, **extra) -> dict:
    return {"engine": "sim", "model": str(SIM_MODEL), "profile": False,
            # A cap of 2 under 16 streams: lifting it wins by multiples, which machine load cannot undo.
            "server_args": ["--gpu", "H100", "--time-scale", "20", "--max-num-seqs", "2", "--enforce-eager"],
            "workload": {"kind": "random", "isl": isl, "osl": 64, "concurrency": concurrency, "num_prompts": 48},
            "repeats": 2, "max_trials": 1, "target_gain_pct": 1000, "sweep_concurrencies": [concurrency], **extra}


def test_a_validated_keeper_is_tried_first_by_the_next_target_of_its_class(tmp_path, host, store,
                                                                            monkeypatch) -> None:
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "first.yaml").write_text(yaml.safe_dump(target(256, 16)))
    first, meta = run_job(targets, "first", host, store, ("optimization_stack",))
    outcomes = [(t.name, t.outcome, t.decision.reason) for t in first.asset_value("trials").climb.trials]
    assert meta["optimization_stack"]["recipes_filed"] == 1, ("the validated keeper is filed", outcomes,
                                                               meta["optimization_stack"])
    (kept,) = first.asset_value("optimization_stack").keepers

    # The same class: prompt length and concurrency within their bands; a model proposes nothing new.
    (targets / "second.yaml").write_text(yaml.safe_dump(target(240, 20, proposer={
        "provider": "openai", "model": "scripted-model", "max_rounds": 1})))
    with ScriptedLlm({"proposer": [json.dumps({"proposals": []})], "critic": [APPROVE]}) as llm:
        llm.point_sdk(monkeypatch, "openai")
        # Up to its trials: the recipe's trial is what this asks of the second target.
        second, meta = run_job(targets, "second", host, store, ("candidates",),
                               only=("baseline", "roofline", "profile", "candidates", "trials"))
    assert meta["candidates"]["recipes"] == 1
    plan = [row.data["name"] for row in meta["candidates"]["plan"].records]
    assert plan[0] == f"recipe: {kept.name}", "the class's recipe leads the plan"
    trial = trial_observations(second)[f"recipe: {kept.name}"]
    assert trial["provenance"] == f"recipe:{first.run_id}" and trial["trial"] == 1
    assert trial["outcome"] in ("KEEP", "REVERT"), "judged on this target like any candidate"
    shown = json.loads(LlmCallLog(store).calls("second")[0].messages[1].content)["recipes_of_this_class"]
    assert [(r["recipe"], r["run"], r["target"]) for r in shown] == [(kept.name, first.run_id, "first")], \
        "the model is shown what won on this class before"
    missed = RecipeBook(store).misses(second.asset_value("trials").recipe_class.key)
    assert (trial["outcome"] == "REVERT") == bool(missed), "a recipe that lost here is marked for this class"
