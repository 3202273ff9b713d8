"""What a model must answer, as pydantic models the SDKs turn into a JSON schema. Pure code.

The shapes are the issue's contract: a proposer reply holds proposals (server args,
env, an optional unified diff, a rationale); a critic reply holds a verdict and its
reasons. Unknown fields are refused, so a reply that adds an `expected_gain` does not
parse: the model's own numbers never enter a decision.

Every object is closed and every field required (nullable where it may be absent), and
env is a list of {name, value}: the one shape both providers' structured output accepts.
A free-form mapping is neither: OpenAI's strict mode refuses an open `additionalProperties`,
and `anthropic.transform_schema` closes it to an object that can hold no key at all.
"""

from __future__ import annotations

from typing import Literal

from hyperloom_assets.core.models import Strict


class EnvSetting(Strict):
    name: str
    value: str


class ProposedChange(Strict):
    name: str
    server_args: list[str]
    env: list[EnvSetting]
    patch: str | None
    rationale: str

    @property
    def env_map(self) -> dict[str, str]:
        """The env as the server gets it (a name given twice is the guard's `env_duplicate`)."""
        return {setting.name: setting.value for setting in self.env}


class ProposerReply(Strict):
    proposals: list[ProposedChange]


class CriticReply(Strict):
    verdict: Literal["approve", "reject"]
    reasons: list[str]
