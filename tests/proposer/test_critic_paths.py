"""Every path of the critic through both SDKs' real requests to a server enforcing the schema.

Approve and reject with the model's reasons; a reply cut at max_tokens (it does not parse)
and a failed call, each with the fallback the target asks for (the rules decide, or the
change is skipped); `critic_provider: rules` sends nothing. And the server itself: like
the real APIs, it refuses a schema outside the provider's rules with the provider's 400
body, and a scripted reply the schema does not admit fails the test.
"""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from hyperloom_assets.assets.critic import Critic
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.proposer.critic_rules import CriticChange
from hyperloom_assets.core.proposer.settings import ProposerField, resolve_settings
from hyperloom_assets.resources.proposer.providers import LlmProviders
from tests.proposer.proposals import APPROVE
from tests.proposer.scripted_llm import Failed, ScriptedLlm, Truncated

SENSITIVE = CriticChange(name="swallow errors", rationale="fewer restarts", patch=(
    "--- a/vllm/worker.py\n+++ b/vllm/worker.py\n@@ -1,2 +1,5 @@\n def step(batch):\n-    return run(batch)\n"
    "+    try:\n+        return run(batch)\n+    except RuntimeError:\n+        return None\n"))
REJECT = json.dumps({"verdict": "reject", "reasons": ["it relieves decode, and the roofline says prefill binds"]})
MODELS = {"openai": "scripted-model", "anthropic": "claude-scripted"}


def critic(provider: str, fallback: str = "rules") -> Critic:
    field = ProposerField(provider=provider, model=MODELS.get(provider), critic_fallback=fallback)
    return Critic(resolve_settings(field, {}), engine_for("vllm"), LlmProviders(max_retries=0))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_each_verdict_path_through_the_sdk(provider, monkeypatch) -> None:
    script = {"critic": [APPROVE, REJECT, Truncated('{"verdict": "appr'), Failed(500), Failed(500)]}
    with ScriptedLlm(script) as llm:
        llm.point_sdk(monkeypatch, provider)
        by_rules, by_skip = critic(provider), critic(provider, fallback="skip")
        approve, approve_call = by_rules.review(SENSITIVE, {}, 1)
        reject, _ = by_rules.review(SENSITIVE, {}, 1)
        unparsed, unparsed_call = by_rules.review(SENSITIVE, {}, 1)
        failed_rules, failed_call = by_rules.review(SENSITIVE, {}, 1)
        failed_skip, _ = by_skip.review(SENSITIVE, {}, 1)
    label = f"llm:{provider}/{MODELS[provider]}"
    assert (approve.critic, approve.verdict, approve.fallback) == (label, "approve", None)
    assert approve_call is not None and approve_call.ok and approve_call.role == "critic"
    assert (reject.verdict, reject.reasons) == ("reject", ("it relieves decode, and the roofline says prefill binds",))
    assert unparsed_call.parse_error and not unparsed_call.ok
    assert (unparsed.critic, unparsed.verdict) == ("rules", "reject"), "the rules decided, and said no"
    assert unparsed.reasons[0].startswith("sensitive_code:") and "did not parse" in unparsed.fallback
    assert failed_call.call_error and "the critic's call failed" in failed_rules.fallback
    assert failed_rules.critic == "rules" and failed_rules.verdict == "reject"
    assert (failed_skip.critic, failed_skip.verdict) == (label, "skipped") and "skip" in failed_skip.fallback
    assert len(llm.requests) == 5, "one request per review: no retry hides a failure"


def test_the_rules_critic_calls_no_sdk(monkeypatch) -> None:
    with ScriptedLlm({"critic": [APPROVE]}) as llm:
        llm.point_sdk(monkeypatch, "openai")
        field = ProposerField(provider="openai", model="scripted-model", critic_provider="rules")
        rules = Critic(resolve_settings(field, {}), engine_for("vllm"), LlmProviders())
        review, call = rules.review(SENSITIVE, {}, 1)
    assert (review.critic, review.verdict, call) == ("rules", "reject", None)
    assert llm.requests == [], "nothing was sent"


class OpenMapping(Strict):
    env: dict[str, str]


def test_the_server_refuses_a_schema_outside_each_providers_rules(monkeypatch) -> None:
    with ScriptedLlm({"proposer": ['{"env": {}}']}) as llm:
        llm.point_sdk(monkeypatch, "openai")
        llm.point_sdk(monkeypatch, "anthropic")
        with pytest.raises(openai.BadRequestError, match="Invalid schema for response_format 'OpenMapping'"):
            openai.OpenAI(max_retries=0).chat.completions.parse(
                model="m", response_format=OpenMapping, messages=[{"role": "user", "content": "x"}])
        open_schema = {"type": "object", "required": ["env"],
                       "properties": {"env": {"type": "object", "additionalProperties": {"type": "string"}}}}
        with pytest.raises(anthropic.BadRequestError, match="additionalProperties must be false"):
            anthropic.Anthropic(max_retries=0).messages.create(
                model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}],
                output_config={"format": {"type": "json_schema", "schema": open_schema}})
    assert llm.used["proposer"] == 0, "refused before any reply was taken"


def test_a_scripted_reply_the_schema_does_not_admit_fails_the_test(monkeypatch) -> None:
    llm = ScriptedLlm({"critic": [json.dumps({"verdict": "maybe", "reasons": []})]})
    with pytest.raises(AssertionError, match="scripted replies the schema sent does not admit"):
        with llm:
            llm.point_sdk(monkeypatch, "openai")
            review, call = critic("openai", fallback="skip").review(SENSITIVE, {}, 1)
            assert review.verdict == "skipped" and "500" in call.call_error
