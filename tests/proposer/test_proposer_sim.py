"""The proposer through the real SDKs against a scripted server, on a sim target.

The whole optimize_job runs: the model's good proposal is tried first and kept; every
refused proposal is refused by its rule and never launched; each call is recorded in the
store and as an observation on `candidates`; a canary API key, planted in the
environment, reaches the server as the SDK's header and appears nowhere else; a token in the
target's env reaches the server and appears in no prompt, record, metadata or report.
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
import yaml

from hyperloom_assets.core.proposer.replies import CriticReply, ProposerReply
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.proposer.providers import LlmProviders
from hyperloom_assets.resources.store.llm_calls import LlmCallLog
from tests.conftest import SIM_MODEL
from tests.graph_runs import run_job
from tests.proposer.proposals import APPROVE, GOOD, REFUSED, change, first_reply
from tests.proposer.scripted_llm import ScriptedLlm

CANARY = "sk-canary-7f3e9a1c5b2d4e6f8a0b"
TARGET_TOKEN = "hf_target-canary-4c2e8a6b0d9f"


def write_target(folder: Path, **extra) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sim.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL),
        "server_args": ["--gpu", "H100", "--time-scale", "50", "--max-num-seqs", "4", "--enforce-eager"],
        "workload": {"kind": "random", "isl": 256, "osl": 64, "concurrency": 16, "num_prompts": 48},
        "repeats": 2, "max_trials": 2, "target_gain_pct": 1000, "sweep_concurrencies": [16], **extra}))


def files_holding(folder: Path, needle: str) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def test_a_proposal_is_kept_the_refused_are_refused_by_their_rule_and_the_key_is_nowhere(
        tmp_path, host, store, monkeypatch) -> None:
    script = {"proposer": [first_reply(), json.dumps({"proposals": []})], "critic": [APPROVE]}
    with ScriptedLlm(script) as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{llm.port}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", CANARY)
        write_target(tmp_path / "targets", proposer={"provider": "openai", "model": "scripted-model",
                                                     "max_proposals": 13, "max_rounds": 2,
                                                     "price_per_mtok": [3.0, 15.0]},
                     env={"HF_TOKEN": TARGET_TOKEN})
        defs = build_defs(tmp_path / "targets", host=host, store=store)
        (tmp_path / "dagster").mkdir()
        with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
            result = defs.resolve_job_def("optimize_job").execute_in_process(partition_key="sim", instance=instance)
            assert result.success
            events = [json.dumps(e.event_specific_data.__dict__ if e.event_specific_data else {}, default=str)
                      + (e.message or "") for e in result.all_events]
            stored_events = [dg.serialize_value(r) for r in instance.all_logs(result.run_id)]
    assert llm.requests and all({k.lower(): v for k, v in r["headers"].items()}.get("authorization") == f"Bearer {CANARY}"
                               for r in llm.requests), "the SDK sent the key"

    trials = result.asset_value("trials").climb.trials
    first = trials[0]
    assert (first.name, first.outcome) == ("llm: raise the cap", "KEEP"), "the model's proposal goes first and is kept"
    assert first.variant.trial_provenance() == "llm:openai/scripted-model"
    assert first.env.get("VLLM_CPU_KVCACHE_SPACE") == "4", "the proposal's env knob was in the launch's environment"
    assert first.variant.llm.verdict == "approve" and first.variant.llm.critic_reasons
    assert "[claim discarded]" in first.variant.llm.rationale and "300%" not in first.variant.llm.rationale
    launched = " ".join(" ".join(t.argv) for t in trials)
    assert "--download-dir" not in launched and "--bogus-knob" not in launched and "rm -rf" not in launched

    log = LlmCallLog(store)
    rounds = log.rounds("sim")
    assert [r["round"] for r in rounds] == [1, 2], "re-planned after the keeper, up to max_rounds"
    fates = {f["proposal"]["name"]: f for f in rounds[0]["fates"]}
    assert {name: fates[name]["rule"] for name in REFUSED} == {name: rule for name, (rule, _) in REFUSED.items()}
    assert "not a unified diff" in json.dumps(fates["mode-only-patch"]["refusals"]), \
        "git applies a bare mode change; the guard still refuses it, for having no hunk"
    assert fates[GOOD["name"]]["outcome"] == "approved"
    assert fates["tag the perf model"]["outcome"] == "held", \
        "an applying patch is approved, and held: the target has no framework_tree to serve it from"
    calls = log.calls("sim")
    assert [c.role for c in calls].count("proposer") == 2 and [c.role for c in calls].count("critic") == 2
    proposer_call = calls[0]
    assert proposer_call.prompt_version.startswith("proposer/v1@") and proposer_call.tokens_in == 1200
    assert proposer_call.cost_usd == pytest.approx((1200 * 3 + 300 * 15) / 1e6)
    flags = {flag for row in json.loads(proposer_call.messages[1].content)["engine_flags"] for flag in row["flags"]}
    assert "--enable-chunked-prefill" in flags and "--no-enable-chunked-prefill" in flags, \
        "the engine's own flag list is in the prompt (as its parser registers it: the target sets neither)"
    assert not any("chunked" in arg for arg in json.loads(proposer_call.messages[1].content)["target"]["server_args"])
    shown = json.loads(proposer_call.messages[1].content)["profile"]
    profiled = result.asset_value("profile")
    assert shown is not None and shown["shares_pct"] == {k: round(v, 2) for k, v in profiled.summary.shares_pct.items()}
    assert shown["top_ops"][0]["op"] == profiled.summary.top_ops[0].name, "the model sees the profile table"
    seen = json.loads(proposer_call.messages[1].content)["telemetry"]
    scraped = result.asset_value("baseline").measurement.telemetry
    assert scraped.scrapes > 1 and scraped.kv_usage_pct_max is not None
    assert seen["kv_usage_pct_max"] == scraped.kv_usage_pct_max, \
        "the model sees the server's own telemetry (the sim speaks its flavor's metric names)"
    observed = [e for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"
                and e.asset_key == dg.AssetKey("candidates")]
    assert len(observed) == len(calls) + len(rounds)

    report = Path(result.asset_value("final_report")) if isinstance(result.asset_value("final_report"), str) else None
    for where, texts in {"the event log": events + stored_events,
                         "the store": [Path(store.url.removeprefix("sqlite:///")).read_bytes().decode(errors="replace")]}.items():
        assert not any(CANARY in t for t in texts), f"the key is in {where}"
    assert files_holding(tmp_path / "state", CANARY) == [], "the key is in the run folder"
    report_dirs = [p for p in tmp_path.rglob("report.md")]
    assert report_dirs and all(CANARY not in p.read_text() for p in report_dirs), "the key is in the report"
    assert files_holding(tmp_path, CANARY) == [], "the key is in no file at all"

    assert result.asset_value("baseline").spec.env["HF_TOKEN"] == TARGET_TOKEN, "the server is launched with it"
    assert first.env["HF_TOKEN"] == TARGET_TOKEN, "and so is each trial's"
    sent = [json.dumps(r["body"]) for r in llm.requests] + [m.content for c in calls for m in c.messages]
    assert '"HF_TOKEN":"<redacted>"' in calls[0].messages[1].content, "the model sees the variable, not its value"
    for where, texts in {"the prompts sent and recorded": sent, "the event log": events + stored_events}.items():
        assert not any(TARGET_TOKEN in t for t in texts), f"the target's token is in {where}"
    assert 'HF_TOKEN="$HF_TOKEN"' in report_dirs[0].read_text(), "the Reproduce block reads it from the pasting shell"
    dagster_storage = tmp_path / "dagster" / "storage"  # the assets' outputs: the launches need the real value
    holding = [p for p in files_holding(tmp_path, TARGET_TOKEN) if dagster_storage not in p.parents]
    assert holding == [tmp_path / "targets" / "sim.yaml"], "the store, the report, the run folders hold none"


def test_the_anthropic_wire_format_parses_both_replies(monkeypatch) -> None:
    with ScriptedLlm({"proposer": [first_reply()], "critic": [APPROVE]}) as llm:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{llm.port}")
        monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
        providers = LlmProviders()
        call, reply = providers.ask(role="proposer", provider="anthropic", model="claude-scripted",
                                    prompt_version="proposer/v1", round=1, system="You tune", user="{}",
                                    reply=ProposerReply)
        critic_system = __import__("hyperloom_assets.core.proposer.prompts", fromlist=["x"]).load_prompt("critic_v1").text
        verdict_call, verdict = providers.ask(role="critic", provider="anthropic", model="claude-scripted",
                                              prompt_version="critic/v1", round=1, system=critic_system, user="{}",
                                              reply=CriticReply)
    assert reply is not None and reply.proposals[0].server_args == ["--max-num-seqs", "32"]
    assert (call.tokens_in, call.tokens_out) == (1100, 250)
    assert verdict is not None and verdict.verdict == "approve"
    sent = llm.requests[0]
    headers = {k.lower(): v for k, v in sent["headers"].items()}
    assert sent["path"] == "/v1/messages" and any(CANARY in v for v in headers.values()), "the SDK sent the key"
    assert sent["body"]["output_config"]["format"]["type"] == "json_schema", "the SDK's structured output"



ENV_KNOB = change("cap and more kv room", ["--max-num-seqs", "32"], env={"VLLM_CPU_KVCACHE_SPACE": "4"},
                  rationale="the cap (4) binds under concurrency 16")


def test_an_env_knob_proposed_through_the_anthropic_sdk_is_launched_and_judged(tmp_path, host, store,
                                                                               monkeypatch) -> None:
    """The env field's shape is one Anthropic's schema can carry (the OpenAI side: the test above)."""
    script = {"proposer": [json.dumps({"proposals": [ENV_KNOB]}), json.dumps({"proposals": []})],
              "critic": [APPROVE]}
    with ScriptedLlm(script) as llm:
        llm.point_sdk(monkeypatch, "anthropic")
        write_target(tmp_path / "targets", max_trials=1, profile=False,
                     proposer={"provider": "anthropic", "model": "scripted-model", "max_rounds": 1})
        result, _ = run_job(tmp_path / "targets", "sim", host, store, ())
    schema = llm.requests[0]["body"]["output_config"]["format"]["schema"]
    assert schema["$defs"]["EnvSetting"]["required"] == ["name", "value"], "env as {name, value} on the wire"
    trial = result.asset_value("trials").climb.trials[0]
    assert trial.name == "llm: cap and more kv room" and trial.outcome in ("KEEP", "REVERT"), trial.decision
    assert trial.env.get("VLLM_CPU_KVCACHE_SPACE") == "4", "the knob was in the launch's environment"
    assert trial.variant.llm.critic == "llm:anthropic/scripted-model"
