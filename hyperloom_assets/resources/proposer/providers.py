"""Model providers as one Dagster resource: the anthropic and openai SDKs, structured output.

`anthropic`: the Messages API with `output_config.format` a JSON schema the SDK builds
from the reply's pydantic model (`anthropic.transform_schema`), and the text read back
with the same TypeAdapter the SDK's own `messages.parse` uses. `openai`: Chat Completions
through `chat.completions.parse(response_format=Model)`, with the raw body kept so a
reply that does not parse is still recorded word for word. With OPENAI_BASE_URL this
reaches any OpenAI-compatible server (vLLM serving a local model).

Keys and base URLs are the SDKs' own environment variables; nothing here holds a key.
What is sent and what is recorded are scrubbed (core/secrets.py) of the values of those
variables, of every other secret-named variable of the environment (`HF_TOKEN`, a
database password) and of the passwords of URLs in it.
"""

from __future__ import annotations

import os
import time
from typing import TypeVar

import dagster as dg
import pydantic

from hyperloom_assets.core.proposer.record import LlmCall, Message
from hyperloom_assets.core.secrets import Redactor

SECRET_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "OPENAI_ADMIN_KEY")
ReplyT = TypeVar("ReplyT", bound=pydantic.BaseModel)


def environ_redactor() -> Redactor:
    """The secrets of this process's environment: the SDK keys and every other secret-named variable."""
    return Redactor.of(environ=os.environ, values=[os.environ[name] for name in SECRET_ENV if os.environ.get(name)])


def scrub(text: str | None) -> str | None:
    """Text with any secret the environment holds replaced: an error may quote a header."""
    return None if text is None else environ_redactor().known(text)


class CallOutcome(pydantic.BaseModel):
    text: str | None = None
    parsed: pydantic.BaseModel | None = None
    parse_error: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None


class LlmProviders(dg.ConfigurableResource):
    """Calls a provider's model once with a system and a user message and a reply schema."""

    timeout_s: float = 120.0
    max_tokens: int = 4096
    max_retries: int = 1

    def _anthropic(self, model: str, system: str, user: str, reply: type[ReplyT]) -> CallOutcome:
        import anthropic

        client = anthropic.Anthropic(timeout=self.timeout_s, max_retries=self.max_retries)
        schema = anthropic.transform_schema(reply)
        message = client.messages.create(model=model, max_tokens=self.max_tokens, system=system,
                                         messages=[{"role": "user", "content": user}],
                                         output_config={"format": {"type": "json_schema", "schema": schema}})
        text = "".join(block.text for block in message.content if block.type == "text")
        outcome = CallOutcome(text=text, tokens_in=message.usage.input_tokens, tokens_out=message.usage.output_tokens)
        try:
            outcome.parsed = pydantic.TypeAdapter(reply).validate_json(text)
        except pydantic.ValidationError as exc:
            outcome.parse_error = str(exc).splitlines()[0] + ": " + "; ".join(e["msg"] for e in exc.errors()[:3])
        return outcome

    def _openai(self, model: str, system: str, user: str, reply: type[ReplyT]) -> CallOutcome:
        import openai

        client = openai.OpenAI(timeout=self.timeout_s, max_retries=self.max_retries)
        raw = client.chat.completions.with_raw_response.parse(
            model=model, max_completion_tokens=self.max_tokens, response_format=reply,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": user}])
        body = raw.http_response.json()
        choices = body.get("choices") or [{}]
        usage = body.get("usage") or {}
        outcome = CallOutcome(text=(choices[0].get("message") or {}).get("content"),
                              tokens_in=usage.get("prompt_tokens"), tokens_out=usage.get("completion_tokens"))
        try:
            parsed = raw.parse().choices[0].message.parsed
            outcome.parsed = parsed
            if parsed is None:
                outcome.parse_error = "the reply held no parsed content (a refusal or an empty message)"
        except (pydantic.ValidationError, openai.LengthFinishReasonError, openai.ContentFilterFinishReasonError) as exc:
            outcome.parse_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
        return outcome

    def ask(self, *, role: str, provider: str, model: str, prompt_version: str, round: int, system: str,
            user: str, reply: type[ReplyT], price_per_mtok: tuple[float, float] | None = None
            ) -> tuple[LlmCall, ReplyT | None]:
        """One call; a failure of any kind is in the record, never raised."""
        started = time.monotonic()
        system, user = scrub(system), scrub(user)  # the model is never sent a secret of this process
        outcome, error = CallOutcome(), None
        try:
            outcome = (self._anthropic if provider == "anthropic" else self._openai)(model, system, user, reply)
        except Exception as exc:  # noqa: BLE001 - a provider's failure is the rule planner's turn, never the run's end
            error = f"{type(exc).__name__}: {str(exc)[:500]}"
        cost = None
        if price_per_mtok and outcome.tokens_in is not None and outcome.tokens_out is not None:
            cost = (outcome.tokens_in * price_per_mtok[0] + outcome.tokens_out * price_per_mtok[1]) / 1e6
        call = LlmCall(role=role, provider=provider, model=model, prompt_version=prompt_version, round=round,
                       messages=[Message(role="system", content=system), Message(role="user", content=user)],
                       reply_text=scrub(outcome.text), parse_error=scrub(outcome.parse_error), call_error=scrub(error),
                       parsed=outcome.parsed.model_dump(mode="json") if outcome.parsed is not None else None,
                       tokens_in=outcome.tokens_in, tokens_out=outcome.tokens_out,
                       latency_s=time.monotonic() - started, cost_usd=cost)
        return call, outcome.parsed
