"""The accuracy gate against live servers: each side's outputs, then the pure verdict."""

from __future__ import annotations

from pathlib import Path

from hyperloom_assets.core.accuracy.agreement import AgreementResult, PromptOutput, judge, unavailable
from hyperloom_assets.core.accuracy.lm_eval import LmEvalResult, lm_eval_verdict
from hyperloom_assets.core.config.targets import AgreementCheck, LmEvalCheck
from hyperloom_assets.resources.accuracy.client import GateUnavailable, collect_outputs
from hyperloom_assets.resources.accuracy.lm_eval_runner import score_server

SideEvidence = list[PromptOutput] | float  # the agreement check's outputs, or an lm-eval score


def evidence_of(base_url: str, model: str, check: AgreementCheck | LmEvalCheck, folder: Path) -> SideEvidence:
    """What one server answers to the gate (raises GateUnavailable)."""
    if isinstance(check, LmEvalCheck):
        return score_server(base_url, model, check, folder)
    return collect_outputs(base_url, model, check)


def verdict_of(check: AgreementCheck | LmEvalCheck, reference: SideEvidence,
               candidate: SideEvidence) -> AgreementResult | LmEvalResult:
    if isinstance(check, LmEvalCheck):
        assert isinstance(reference, float) and isinstance(candidate, float)
        return lm_eval_verdict(check, reference, candidate)
    assert isinstance(reference, list) and isinstance(candidate, list)
    return judge(reference, candidate)


def compare_servers(reference_url: str, reference_model: str, candidate_url: str, candidate_model: str,
                    check: AgreementCheck | LmEvalCheck, folder: Path) -> AgreementResult | LmEvalResult:
    """Both servers up at once (the CLI's case); fails closed as `unavailable`."""
    try:
        reference = evidence_of(reference_url, reference_model, check, folder / "reference")
        candidate = evidence_of(candidate_url, candidate_model, check, folder / "candidate")
    except GateUnavailable as exc:
        if isinstance(check, LmEvalCheck):
            return LmEvalResult(verdict="unavailable", reason=str(exc), task=check.task, tolerance=check.tolerance)
        return unavailable(str(exc))
    return verdict_of(check, reference, candidate)
