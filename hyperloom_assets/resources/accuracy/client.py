"""The accuracy gate's client: greedy completions with top-k logprobs from one server.

Every prompt is its own request, all sent at once (as a benchmark would load the
server), each asking for `temperature: 0`, `max_tokens`, `logprobs: top_k` and
`return_tokens_as_token_ids` (vLLM's extension: tokens as `token_id:N`, so two
detokenizers cannot disagree on text). Any failure is GateUnavailable: the gate
fails closed on it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from hyperloom_assets.core.accuracy.agreement import PromptOutput
from hyperloom_assets.core.accuracy.prompts import fixed_prompts
from hyperloom_assets.core.config.targets import AgreementCheck

REQUEST_TIMEOUT_S = 300


class GateUnavailable(RuntimeError):
    """The outputs could not be had: a server error, a refused request, no logprobs."""


def _output(body: Any, index: int) -> PromptOutput:
    try:
        logprobs = body["choices"][0]["logprobs"]
    except (KeyError, IndexError, TypeError) as exc:
        raise GateUnavailable(f"prompt {index}: the reply has no choices[0].logprobs") from exc
    if not isinstance(logprobs, dict) or not logprobs.get("tokens"):
        raise GateUnavailable(f"prompt {index}: the server returned no logprobs (does it support `logprobs`?)")
    return PromptOutput(tokens=list(logprobs["tokens"]), top_logprobs=list(logprobs.get("top_logprobs") or []))


async def _one(session: aiohttp.ClientSession, url: str, payload: dict, index: int) -> PromptOutput:
    try:
        async with session.post(url, json=payload) as reply:
            body = await reply.json(content_type=None)
            if reply.status != 200:
                message = body.get("message") if isinstance(body, dict) else body
                raise GateUnavailable(f"prompt {index}: HTTP {reply.status}: {str(message)[:300]}")
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
        raise GateUnavailable(f"prompt {index}: {type(exc).__name__}: {exc}") from exc
    return _output(body, index)


async def collect_async(base_url: str, model: str, check: AgreementCheck) -> list[PromptOutput]:
    url = f"{base_url.rstrip('/')}/v1/completions"
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    payloads = [{"model": model, "prompt": prompt, "max_tokens": check.max_tokens, "temperature": 0,
                 "logprobs": check.top_k, "return_tokens_as_token_ids": True, "seed": 0}
                for prompt in fixed_prompts(check.prompts)]
    async with aiohttp.ClientSession(timeout=timeout) as session:
        return list(await asyncio.gather(*(_one(session, url, p, i) for i, p in enumerate(payloads))))


def collect_outputs(base_url: str, model: str, check: AgreementCheck) -> list[PromptOutput]:
    """The server's greedy outputs on the gate's fixed prompts; GateUnavailable on any failure."""
    return asyncio.run(collect_async(base_url, model, check))
