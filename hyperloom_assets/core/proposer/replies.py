"""What a model must answer, as pydantic models the SDKs turn into a JSON schema. Pure code.

The shapes are the issue's contract: a proposer reply holds proposals (server args,
env, an optional unified diff, a rationale); a critic reply holds a verdict and its
reasons. Unknown fields are refused, so a reply that adds an `expected_gain` does not
parse: the model's own numbers never enter a decision.
"""

from __future__ import annotations

from typing import Literal

from hyperloom_assets.core.models import Strict


class ProposedChange(Strict):
    name: str
    server_args: list[str]
    env: dict[str, str]
    patch: str | None
    rationale: str


class ProposerReply(Strict):
    proposals: list[ProposedChange]


class CriticReply(Strict):
    verdict: Literal["approve", "reject"]
    reasons: list[str]
