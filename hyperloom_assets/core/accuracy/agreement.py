"""The accuracy gate's rule: greedy tokens with top-k logprobs against the running best's. Pure code.

vLLM's own test of fp8 KV cache on CPU (tests/models/quantization/test_fp8.py,
`test_cpu_models`: greedy, NUM_LOG_PROBS = 8) compares two runs with
`check_logprobs_close` (tests/models/utils.py), which walks the generated tokens and, at
the first that differ, asserts "Each predicted token must be in top N logprobs of the
other" (`output_id_0 in logprobs_elem_1` and `output_id_1 in logprobs_elem_0`), then
"Break out since sequences will now diverge." A prompt here agrees by exactly that
rule. vLLM's test needs every prompt to agree; the gate passes when at least
MIN_AGREEMENT of them do, a share calibrated by benchmarks/accuracy_gate.py (A/A pairs
of fresh servers and batching-only variants against patches that corrupt outputs).
"""

from __future__ import annotations

from typing import Literal

from hyperloom_assets.core.models import Strict

Verdict = Literal["pass", "drop", "unavailable"]
# Calibrated in benchmarks/accuracy_gate.py: every A/A and batching-only pair agreed on
# every prompt, every corrupting patch agreed on none to few; see docs/benchmarks.md, accuracy gate.
MIN_AGREEMENT = 0.9


class PromptOutput(Strict):
    """One prompt's greedy completion: its tokens and, per position, the top-k {token: logprob}."""
    tokens: list[str]
    top_logprobs: list[dict[str, float] | None]


class PromptAgreement(Strict):
    index: int
    agrees: bool
    matched: int  # tokens equal before the first difference
    diverged_at: int | None = None  # None: the tokens are identical
    detail: str = ""


class AgreementResult(Strict):
    verdict: Verdict
    agreed: int = 0
    prompts: int = 0
    min_agreement: float = MIN_AGREEMENT
    per_prompt: list[PromptAgreement] = []
    reason: str

    @property
    def share(self) -> float:
        return self.agreed / self.prompts if self.prompts else 0.0


def compare_prompt(index: int, reference: PromptOutput, candidate: PromptOutput) -> PromptAgreement:
    """check_logprobs_close's rule for one prompt; ValueError when logprobs are missing where needed."""
    for position, (ref_token, cand_token) in enumerate(zip(reference.tokens, candidate.tokens)):
        if ref_token == cand_token:
            continue
        ref_top, cand_top = _top(reference, position), _top(candidate, position)
        if ref_top is None or cand_top is None:
            raise ValueError(f"prompt {index}: no logprobs at token {position}")
        agrees = ref_token in cand_top and cand_token in ref_top
        detail = (f"token {position}: {ref_token} vs {cand_token}, "
                  + ("each in the other's top-k" if agrees else "not each in the other's top-k"))
        return PromptAgreement(index=index, agrees=agrees, matched=position, diverged_at=position, detail=detail)
    return PromptAgreement(index=index, agrees=True, matched=min(len(reference.tokens), len(candidate.tokens)))


def _top(output: PromptOutput, position: int) -> dict[str, float] | None:
    return output.top_logprobs[position] if position < len(output.top_logprobs) else None


def unavailable(reason: str) -> AgreementResult:
    """The gate could not run (a server error, no logprobs): it fails closed."""
    return AgreementResult(verdict="unavailable", reason=reason)


def judge(reference: list[PromptOutput], candidate: list[PromptOutput],
          min_agreement: float = MIN_AGREEMENT) -> AgreementResult:
    """The verdict over all prompts: pass when at least min_agreement of them agree."""
    if not reference or len(reference) != len(candidate):
        return unavailable(f"{len(reference)} reference and {len(candidate)} candidate outputs")
    try:
        per_prompt = [compare_prompt(i, ref, cand) for i, (ref, cand) in enumerate(zip(reference, candidate))]
    except ValueError as exc:
        return unavailable(str(exc))
    agreed = sum(p.agrees for p in per_prompt)
    share = agreed / len(per_prompt)
    verdict: Verdict = "pass" if share >= min_agreement else "drop"
    reason = (f"{agreed} of {len(per_prompt)} prompts agree ({100 * share:.0f}%; "
              f"{'at least' if verdict == 'pass' else 'under'} {100 * min_agreement:.0f}% needed)")
    return AgreementResult(verdict=verdict, agreed=agreed, prompts=len(per_prompt), min_agreement=min_agreement,
                           per_prompt=per_prompt, reason=reason)
