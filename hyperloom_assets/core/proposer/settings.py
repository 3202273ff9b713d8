"""Which model proposes, from the target's `proposer` field and the environment. Pure code.

`rules` (the default) asks no model. The environment's HYPERLOOM_PROPOSER and
HYPERLOOM_PROPOSER_MODEL fill what the target leaves out; keys and base URLs stay with
the SDKs' own variables (ANTHROPIC_API_KEY, OPENAI_BASE_URL, ...), never in a target.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from hyperloom_assets.core.models import Frozen, Strict

Provider = Literal["rules", "anthropic", "openai"]
PROVIDERS: tuple[str, ...] = ("rules", "anthropic", "openai")
PROPOSER_ENV = "HYPERLOOM_PROPOSER"
PROPOSER_MODEL_ENV = "HYPERLOOM_PROPOSER_MODEL"


class ProposerField(Strict):
    """The target file's `proposer:` (every key optional)."""
    provider: Provider | None = None
    model: str | None = None
    max_proposals: PositiveInt = 4
    max_rounds: PositiveInt = 3
    critic_provider: Provider | None = None  # default: the proposer's; `rules` asks no model
    critic_model: str | None = None
    # When the model critic's call fails or its reply does not parse: `rules` lets the
    # offline critic decide, `skip` drops the change untried.
    critic_fallback: Literal["rules", "skip"] = "rules"
    # USD per million tokens (input, output), where the operator knows the price: the record's cost.
    price_per_mtok: tuple[float, float] | None = None
    source_bytes: int = Field(default=24_000, ge=0)  # engine source shown for patches, all files together
    flag_help: bool = True  # the flag list with each flag's help and default (off: names and choices only)

    @model_validator(mode="after")
    def _critic_has_a_model(self) -> ProposerField:
        # Checked with the target, before any launch: a model critic of another provider than
        # the proposer's cannot borrow the proposer's model name.
        if self.critic_provider not in (None, "rules") and self.critic_model is None and \
                self.provider is not None and self.provider != self.critic_provider:
            raise ValueError(f"critic_model: a model name for critic_provider {self.critic_provider!r}")
        return self


class ProposerSettings(Frozen):
    provider: Provider
    model: str | None
    max_proposals: int
    max_rounds: int
    critic_provider: Provider
    critic_model: str | None
    critic_fallback: Literal["rules", "skip"] = "rules"
    price_per_mtok: tuple[float, float] | None = None
    source_bytes: int = 24_000
    flag_help: bool = True

    @property
    def asks_a_model(self) -> bool:
        return self.provider != "rules"

    @property
    def label(self) -> str:
        """A trial's provenance for what this proposer proposed: `llm:<provider>/<model>`."""
        return f"llm:{self.provider}/{self.model}"

    @property
    def critic_label(self) -> str:
        """Who reviews changes: `rules`, or `llm:<provider>/<model>`."""
        return "rules" if self.critic_provider == "rules" else f"llm:{self.critic_provider}/{self.critic_model}"


class ProposerConfigError(ValueError):
    """A provider without a model, or an unknown provider in the environment."""


def resolve_settings(field: ProposerField | None, environ: Mapping[str, str]) -> ProposerSettings:
    field = field or ProposerField()
    provider = field.provider or environ.get(PROPOSER_ENV) or "rules"
    if provider not in PROVIDERS:
        raise ProposerConfigError(f"{PROPOSER_ENV}: one of {', '.join(PROVIDERS)}, got {provider!r}")
    model = field.model or environ.get(PROPOSER_MODEL_ENV) or None
    if provider != "rules" and not model:
        raise ProposerConfigError(f"proposer.model: a model name for provider {provider!r} "
                                  f"(or set {PROPOSER_MODEL_ENV})")
    critic = field.critic_provider or provider
    critic_model = field.critic_model or (model if critic == provider else None)
    if critic != "rules" and not critic_model:
        raise ProposerConfigError(f"proposer.critic_model: a model name for critic_provider {critic!r}")
    return ProposerSettings(provider=provider, model=model, max_proposals=field.max_proposals,
                            max_rounds=field.max_rounds, critic_provider=critic, critic_fallback=field.critic_fallback,
                            critic_model=critic_model if critic != "rules" else None, price_per_mtok=field.price_per_mtok,
                            source_bytes=field.source_bytes, flag_help=field.flag_help)
