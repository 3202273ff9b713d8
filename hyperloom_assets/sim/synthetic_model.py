"""The sim's deterministic synthetic model: greedy tokens and top-k logprobs. Pure code.

The next-token distribution is a pure function of the context's last few tokens and
its length, so a config that changes only scheduling (batch size, token budget, cache
layout) gives the same tokens and logprobs, as a numerically exact engine would, and
the accuracy gate passes it. Two things change the outputs: a salt, which `sim-serve
--alter-outputs-with FLAG,...` sets when one of those engine flags is given (a stand-in
for a risky knob that changes numerics), and LOGIT_PERTURBATION, which a source patch
of the sim's tree can raise (a stand-in for a patch that corrupts outputs).
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

CONTEXT_TOKENS = 4  # how many trailing tokens the distribution depends on
CANDIDATES = 20  # the most logprobs a request can ask for
TOP_LOGPROB = -0.4
LOGPROB_STEP = 0.35  # a clear margin between ranks: greedy never sits on a tie
LOGIT_PERTURBATION = 0.0  # > 0 scrambles the ranking; only a patch raises it


class Step(NamedTuple):
    token: int
    top: list[tuple[int, float]]  # (token, logprob), best first


def _digest(context: list[int], salt: str, extra: str = "") -> bytes:
    tail = ",".join(str(t) for t in context[-CONTEXT_TOKENS:])
    return hashlib.sha256(f"{salt}|{len(context)}|{tail}|{extra}".encode()).digest()


def distribution(context: list[int], vocab: int, salt: str = "", perturbation: float | None = None) -> list[tuple[int, float]]:
    """The top CANDIDATES (token, logprob) after `context`, best first."""
    perturbation = LOGIT_PERTURBATION if perturbation is None else perturbation
    digest = _digest(context, salt) + _digest(context, salt, "more")
    tokens: list[int] = []
    for i in range(0, len(digest) - 1, 2):
        token = int.from_bytes(digest[i:i + 2], "big") % vocab
        if token not in tokens:
            tokens.append(token)
    scored = []
    for rank, token in enumerate(tokens[:CANDIDATES]):
        noise = perturbation * (_digest(context, "perturb", str(token))[0] / 255.0) * CANDIDATES * LOGPROB_STEP
        scored.append((token, TOP_LOGPROB - LOGPROB_STEP * rank + noise))
    return sorted(scored, key=lambda pair: -pair[1])


def generate(prompt: list[int], max_tokens: int, vocab: int, salt: str = "") -> list[Step]:
    """Greedy decoding of `max_tokens` tokens."""
    context, steps = list(prompt), []
    for _ in range(max_tokens):
        top = distribution(context, vocab, salt)
        steps.append(Step(top[0][0], top))
        context.append(top[0][0])
    return steps
