"""What the model sees, gathered from the target's evidence into one JSON payload. Pure code.

The target and its workload, the hardware and roofline, the baseline's launch evidence
and metrics, the server's own telemetry over the baseline's measured rounds (None when
the engine serves no /metrics), the profile table, what won on targets of the same class before
(the recipe memory), every trial so far with its outcome and interval,
the engine's own flag list as its installed parser registers it, and for patches a few
source files of the engine's package within a size bound.

No secret of the target reaches a prompt: the payload is redacted (core/secrets.py) of
the target's secret env values and secret flags' values wherever they appear, launch
evidence and trial reasons included.
"""

from __future__ import annotations

from typing import Any

from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.decisions.climb import TrialRecord
from hyperloom_assets.core.results import BaselineResult, RooflineResult
from hyperloom_assets.core.secrets import Redactor


def baseline_telemetry(baseline: BaselineResult) -> dict[str, Any] | None:
    """The engine's /metrics over the baseline's measured rounds, with the prefix hit rate worked out."""
    telemetry = baseline.measurement.telemetry
    if telemetry is None:
        return None
    return {**telemetry.model_dump(mode="json", exclude_none=True), "prefix_hit_pct": telemetry.prefix_hit_pct}


def flag_rows(flags: list[dict], with_help: bool) -> list[dict]:
    """The parser's flags; without help, only what a model needs to write a valid token."""
    if with_help:
        return flags
    return [{k: v for k, v in flag.items() if k in ("flags", "choices") and v} for flag in flags]


def trial_rows(trials: list[TrialRecord]) -> list[dict[str, Any]]:
    return [{"name": t.name, "provenance": t.variant.trial_provenance(), "add_args": t.variant.add_args,
             "remove_args": t.variant.remove_args, "set_env": t.variant.set_env, "outcome": t.outcome,
             "gain_pct": t.decision.gain_pct, "ci_low_pct": t.decision.ci_low_pct,
             "ci_high_pct": t.decision.ci_high_pct, "reason": t.decision.reason} for t in trials]


def proposer_payload(target: Target, baseline: BaselineResult, roofline: RooflineResult,
                     trials: list[TrialRecord], flags: list[dict], profile: dict[str, Any] | None,
                     sources: dict[str, str], kept: list[str], max_proposals: int,
                     recipes: list[dict] | None = None) -> dict[str, Any]:
    secrets = Redactor.of(env=target.env, argv=target.server_args)
    # The engine's own flag list and sources are its text, not the target's: left word for word,
    # so a patch's context lines match the file.
    return {**secrets.value(_evidence(target, baseline, roofline, trials, profile, kept, max_proposals, recipes)),
            "engine_flags": flags, "engine_sources": sources}


def _evidence(target: Target, baseline: BaselineResult, roofline: RooflineResult, trials: list[TrialRecord],
              profile: dict[str, Any] | None, kept: list[str], max_proposals: int,
              recipes: list[dict] | None) -> dict[str, Any]:
    m, r, a = baseline.measurement, roofline.roofline, roofline.achieved
    return {
        "ask": f"at most {max_proposals} proposals",
        "target": {"engine": target.engine, "model": target.model.name, "server_args": target.server_args,
                   "env": target.env, "workload": target.workload.model_dump(mode="json")},
        "hardware": roofline.hardware.model_dump(mode="json"),
        "roofline": {"binding": r.binding, "ceiling_tok_s": r.ceiling_tok_s, "explanation": r.explanation,
                     "achieved_pct": a.achieved_pct},
        "baseline": {"output_throughput": m.output_throughput, "ci": [m.output_throughput_ci_low,
                     m.output_throughput_ci_high], "request_throughput": m.request_throughput,
                     "completed": m.completed, "launch_evidence": baseline.launch.evidence},
        "telemetry": baseline_telemetry(baseline),
        "profile": profile,
        "recipes_of_this_class": recipes or [],
        "kept_so_far": kept,
        "trials_so_far": trial_rows(trials),
    }


def critic_payload(proposal: dict[str, Any], proposer_evidence: dict[str, Any], risk_rules: dict[str, str]) -> dict[str, Any]:
    evidence = {k: v for k, v in proposer_evidence.items() if k not in ("engine_flags", "engine_sources", "ask")}
    # The proposal's own secret-named env values and secret flags' values only: its patch stays word for word.
    return {"proposal": Redactor().value(proposal, exact=True), "evidence": evidence, "risk_rules": risk_rules}
