"""The proposer against a real OpenAI-compatible server: vLLM CPU serving the tiny model.

Its replies are noise (random weights). vLLM honours the SDK's JSON schema (guided
decoding), so given room the noise can close into a schema-valid but empty reply; with a
reply budget of a few tokens it cannot, the SDK reports the cut-off reply
(LengthFinishReasonError), the call is recorded with that parse error and the reply's
text, the round falls back to the rule planner, and the run carries on. One short call.
"""

from __future__ import annotations

import pytest

from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.proposer.providers import LlmProviders
from hyperloom_assets.resources.store.llm_calls import LlmCallLog
from tests.conftest import VLLM_CPU_ENV
from tests.proposer.test_proposer_sim import write_target

pytestmark = pytest.mark.real_engine


def test_noise_from_vllm_is_recorded_and_the_rules_take_over(tmp_path, host, store, tiny_model, monkeypatch) -> None:
    import dagster as dg

    llm_host = LocalHost(state_dir=str(tmp_path / "llm-state"), check_foreign_processes=False)
    spec = ServerSpec(engine="vllm", model=tiny_model, env=VLLM_CPU_ENV,
                      server_args=["--enforce-eager", "--max-num-seqs", "2", "--max-model-len", "4096"])
    with llm_host.serve(spec, tmp_path / "llm-run") as served:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{served.base_url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "not-needed-by-vllm")
        write_target(tmp_path / "targets", max_trials=1, proposer={
            "provider": "openai", "model": served.served_model, "max_rounds": 1, "source_bytes": 0,
            "flag_help": False})
        defs = build_defs(tmp_path / "targets", host=host, store=store, llm=LlmProviders(max_tokens=4))
        # Up to its trials: the one proposer round is `candidates`', and the rule planner's plan is
        # what the trials launch; the validation, sweep and report after them never ask the model.
        climb = [dg.AssetKey(name) for name in ("baseline", "roofline", "profile", "candidates", "trials")]
        with dg.instance_for_test() as instance:
            result = defs.resolve_job_def("optimize_job").execute_in_process(partition_key="sim", instance=instance,
                                                                             asset_selection=climb)
    assert result.success, "a reply that does not parse never fails the run"
    calls = LlmCallLog(store).calls("sim")
    assert len(calls) == 1 and calls[0].role == "proposer" and calls[0].parsed is None
    assert calls[0].call_error is None, f"vLLM answered: {calls[0].call_error}"
    assert calls[0].parse_error and calls[0].reply_text is not None and calls[0].tokens_out
    rounds = LlmCallLog(store).rounds("sim")
    assert rounds[0]["fell_back"] and rounds[0]["fallback_reason"] == calls[0].parse_error
    trials = result.asset_value("trials").climb.trials
    assert trials and all(t.variant.trial_provenance() == "rules" for t in trials), "the rule planner's plan ran"
    print(f"\nvLLM reply ({calls[0].tokens_in} tokens in, {calls[0].tokens_out} out, {calls[0].latency_s:.1f} s): "
          f"{calls[0].parse_error}; text {calls[0].reply_text!r}")
