"""The critic in front of every change that touches the tree or the server.

A model's proposals meet it in the proposer's round (proposer_round.py); a planned patch
of any other origin (the operator's, the library's) meets it in the climb, before
`git apply` (trials.py). The target's `proposer.critic_provider` says who reviews:
`rules` (core/proposer/critic_rules.py, offline, no SDK), or a model through the
providers resource with the critic prompt. When a model critic's call fails or its reply
does not parse, `critic_fallback` decides: `rules` (the offline critic decides, and the
review says why it did) or `skip` (the change is not tried).
"""

from __future__ import annotations

from typing import Any

from hyperloom_assets.core.engines.spec import EngineSpec
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.proposer.critic_rules import RULES as CRITIC_RULES
from hyperloom_assets.core.proposer.critic_rules import CriticChange, Review, rules_review
from hyperloom_assets.core.proposer.evidence import critic_payload
from hyperloom_assets.core.proposer.guard import RULES as GUARD_RULES
from hyperloom_assets.core.proposer.prompts import CRITIC_PROMPT, load_prompt, render
from hyperloom_assets.core.proposer.record import LlmCall
from hyperloom_assets.core.proposer.replies import CriticReply
from hyperloom_assets.core.proposer.settings import ProposerSettings

RISK_RULES = {**GUARD_RULES, **CRITIC_RULES}
PATCH_REVIEW_ROUND = 0  # the round a planned patch's critic call is recorded under (a model's proposals: 1 and on)


def variant_change(variant: Variant) -> CriticChange:
    """A planned variant as the critic reads it: its patches' diffs, their headers as its rationale."""
    said = " ".join(f"{p.name}: changes {p.changes or '(not said)'}; why {p.why or '(not said)'}; "
                    f"risk {p.risk or '(not said)'}." for p in variant.patches)
    return CriticChange(name=variant.name, server_args=tuple(variant.add_args), env=tuple(variant.set_env.items()),
                        patch="".join(p.text for p in variant.patches) or None, rationale=said or variant.reason)


class Critic:
    """Reviews one change at a time: its Review, and the model call it made (None for the rules)."""

    def __init__(self, settings: ProposerSettings, spec: EngineSpec, providers):
        self.settings, self.spec, self.providers = settings, spec, providers

    def review(self, change: CriticChange, evidence: dict[str, Any], round_no: int) -> tuple[Review, LlmCall | None]:
        if self.settings.critic_provider == "rules":
            return rules_review(change, self.spec), None
        call, reply = self._ask(change, evidence, round_no)
        return self._verdict(call, reply, change), call

    def _verdict(self, call: LlmCall, reply: CriticReply | None, change: CriticChange) -> Review:
        if reply is not None:
            return Review(critic=self.settings.critic_label, verdict=reply.verdict, reasons=tuple(reply.reasons))
        failure = (f"the critic's call failed: {call.call_error}" if call.call_error
                   else f"the critic's reply did not parse: {call.parse_error}")
        if self.settings.critic_fallback == "rules":
            return rules_review(change, self.spec, fallback=f"{failure}; the rules decided")
        return Review(critic=self.settings.critic_label, verdict="skipped", reasons=(failure,),
                      fallback="critic_fallback is skip: the change is not tried")

    def _ask(self, change: CriticChange, evidence: dict[str, Any], round_no: int) -> tuple[LlmCall, CriticReply | None]:
        s = self.settings
        prompt = load_prompt(CRITIC_PROMPT)
        proposal = {"name": change.name, "server_args": list(change.server_args),
                    "env": [{"name": k, "value": v} for k, v in change.env], "patch": change.patch,
                    "rationale": change.rationale}
        call, reply = self.providers.ask(role="critic", provider=s.critic_provider, model=s.critic_model,
                                         prompt_version=prompt.version, round=round_no, system=prompt.text,
                                         user=render(critic_payload(proposal, evidence, RISK_RULES)),
                                         reply=CriticReply, price_per_mtok=s.price_per_mtok)
        return call, reply
