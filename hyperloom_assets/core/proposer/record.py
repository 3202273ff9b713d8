"""What the record keeps of each model call and each proposal's fate. Pure models.

A call keeps what was sent and what came back, word for word (the API key is never part
of either: the SDKs read it from the environment and send it as a header); a proposal
keeps the guard's refusals, the critic's verdict, and what it became.
"""

from __future__ import annotations

from typing import Literal

from hyperloom_assets.core.models import Frozen, Strict
from hyperloom_assets.core.proposer.guard import Refusal
from hyperloom_assets.core.proposer.replies import ProposedChange


class Message(Frozen):
    role: Literal["system", "user", "assistant"]
    content: str


class LlmCall(Strict):
    role: Literal["proposer", "critic"]
    provider: str
    model: str
    prompt_version: str  # e.g. proposer/v1@<sha of the prompt file>
    round: int
    messages: list[Message]
    reply_text: str | None = None
    parsed: dict | None = None  # the reply as the schema read it; None when it did not parse
    parse_error: str | None = None  # the reply came back but is not the schema's shape
    call_error: str | None = None  # no reply: connection, HTTP status, missing key
    tokens_in: int | None = None
    tokens_out: int | None = None
    latency_s: float
    cost_usd: float | None = None  # only where the target gives the price

    @property
    def ok(self) -> bool:
        return self.parsed is not None


class ProposalFate(Strict):
    round: int
    proposal: ProposedChange
    outcome: Literal["refused", "rejected", "approved", "held", "critic_failed"]
    rule: str | None = None  # the guard's first rule, when refused
    refusals: list[Refusal] = []
    claims_discarded: int = 0
    verdict: Literal["approve", "reject"] | None = None
    critic: str | None = None  # who reviewed it: `rules` or `llm:<provider>/<model>`
    reasons: list[str] = []
    variant: str | None = None  # the candidate's name, when approved
    detail: str = ""


class ProposerRound(Strict):
    """One round: the proposer's call, each proposal's fate, and whether the rules took over."""
    round: int
    provenance: str  # llm:<provider>/<model>
    calls: list[LlmCall]
    fates: list[ProposalFate] = []
    fell_back: bool = False  # the reply did not parse or the call failed: the rule planner's plan alone
    fallback_reason: str | None = None
