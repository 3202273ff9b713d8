"""One proposer round: ask the model, guard, ask the critic, turn approvals into candidates.

Used by `candidates` (round 1) and by the climb's re-plan after each keeper (rounds 2 to
max_rounds). The model's reply is checked by the guard (core/proposer/guard.py) with the
engine's own parser and `git apply --check` run on the serving host; each proposal that
passes goes to the critic; every call and every proposal's fate is recorded in the
result store and as an AssetObservation on `candidates`. A reply that does not parse, or
a call that fails, is recorded and the round falls back to the rule planner alone.

The round itself needs no Dagster context: where its lines, observations and record go
are callables in RoundInputs, which `RoundInputs.for_asset` binds to an asset's context
and the result store, and the search-quality benchmark to a logger and a list
(benchmarks/support/offline_proposer.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import dagster as dg

from hyperloom_assets.core.engines import engine_for, speaking
from hyperloom_assets.core.engines.registry import harness_flags_for
from hyperloom_assets.core.patches.patch import PatchError, SourcePatch
from hyperloom_assets.core.planning.fingerprints import trial_fingerprint
from hyperloom_assets.core.planning.patch_plan import llm_patch
from hyperloom_assets.core.planning.recipes import Recipe, evidence_rows
from hyperloom_assets.core.patches.git_paths import GitPaths
from hyperloom_assets.core.planning.seed_grids import accuracy_risk
from hyperloom_assets.core.planning.variants import LlmOrigin, Variant
from hyperloom_assets.assets.critic import Critic
from hyperloom_assets.assets.metadata import run_secrets
from hyperloom_assets.core.proposer.critic_rules import CriticChange, Review
from hyperloom_assets.core.proposer.allowlist import parser_long_flags, target_allowlist
from hyperloom_assets.core.proposer.evidence import flag_rows, proposer_payload
from hyperloom_assets.core.proposer.guard import GuardInputs, argv_shape_error, guard
from hyperloom_assets.core.proposer.prompts import PROPOSER_PROMPT, load_prompt, render
from hyperloom_assets.core.proposer.record import LlmCall, ProposalFate, ProposerRound
from hyperloom_assets.core.proposer.replies import ProposedChange, ProposerReply
from hyperloom_assets.core.proposer.settings import ProposerConfigError, ProposerSettings, resolve_settings
from hyperloom_assets.resources.hosts.proposal_checks import checks_request
from hyperloom_assets.resources.store.llm_calls import LlmCallLog

# A source patch launches only from the target's framework_tree (the run's worktree of
# it); without one the engine is the venv's and the patch could not be served, so an
# approved patch is held, recorded, and not planned: it is never measured without it.
NO_TREE_TO_PATCH = "approved; the target has no framework_tree, so a source patch cannot be served"


def settings_for(target) -> ProposerSettings:
    """The target's proposer with the environment's defaults; a bad one fails the step, naming the field."""
    try:
        return resolve_settings(target.proposer, os.environ)
    except ProposerConfigError as exc:
        raise dg.Failure(description=str(exc)) from exc


# An observation of `candidates`: (metadata key, its JSON value).
Observe = Callable[[str, Any], None]


class RoundInputs:
    """What a round needs: the target's evidence, the resources that act, where its record goes.

    `log` takes the round's lines, `observe` each call and the round's record (without its
    calls), `record` the whole round with its calls.
    """

    def __init__(self, target, host, providers, baseline, roofline, settings: ProposerSettings,
                 profile: dict | None = None, recipes: list[Recipe] | None = None, *, log: logging.Logger,
                 observe: Observe, record: Callable[[ProposerRound], None]):
        self.target, self.host, self.providers = target, host, providers
        self.baseline, self.roofline, self.settings, self.profile = baseline, roofline, settings, profile
        self.recipes = recipes or []  # the class's recipes: shown to the model as evidence
        self.log, self.observe, self.record = log, observe, record
        self.critic = Critic(settings, speaking(target.engine, target.server_args), providers)

    @classmethod
    def for_asset(cls, context, target, host, providers, store, baseline, roofline, settings: ProposerSettings,
                  profile: dict | None = None, recipes: list[Recipe] | None = None) -> RoundInputs:
        """A round of an asset: its run log, observations of `candidates`, the result store's LlmCallLog;
        what goes to the last two without the target's secrets (the prompts held none already)."""
        secrets = run_secrets(target.env, target.server_args)

        def observe(key: str, value: Any) -> None:
            context.log_event(dg.AssetObservation(asset_key="candidates", partition=context.partition_key,
                                                  metadata={key: dg.MetadataValue.json(secrets.value(value, exact=True))}))

        def record(round_record: ProposerRound) -> None:
            kept = ProposerRound.model_validate(secrets.value(round_record.model_dump(mode="json"), exact=True))
            LlmCallLog(store).record_round(context.partition_key, context.run.run_id, kept)

        return cls(target, host, providers, baseline, roofline, settings, profile, recipes, log=context.log,
                   observe=observe, record=record)


def _probe_request(inputs: RoundInputs, argvs: list[list[str]], patches: list[str]) -> dict:
    spec = engine_for(inputs.target.engine)
    tree = str(inputs.target.framework_tree) if inputs.target.framework_tree else None
    return checks_request(spec, inputs.target.server_args, str(inputs.host.python_executable(inputs.baseline.spec)),
                          argvs, patches=patches, tree=tree, source_files=list(spec.source_context),
                          max_source_bytes=inputs.settings.source_bytes)


def _ask(inputs: RoundInputs, round_no: int, payload: dict):
    s = inputs.settings
    prompt = load_prompt(PROPOSER_PROMPT)
    call, parsed = inputs.providers.ask(role="proposer", provider=s.provider, model=s.model,
                                        prompt_version=prompt.version, round=round_no, system=prompt.text,
                                        user=render(payload), reply=ProposerReply, price_per_mtok=s.price_per_mtok)
    inputs.observe("llm_call", call.model_dump(mode="json"))
    return call, parsed


def _variant(inputs: RoundInputs, change: ProposedChange, round_no: int, review: Review,
             patch: SourcePatch | None) -> Variant:
    spec = speaking(inputs.target.engine, inputs.target.server_args)
    origin = LlmOrigin(provider=inputs.settings.provider, model=inputs.settings.model, round=round_no,
                       rationale=change.rationale, verdict="approve", critic=review.critic,
                       critic_reasons=list(review.reasons), critic_fallback=review.fallback, patch=change.patch)
    risky = accuracy_risk(spec, change.server_args, change.env_map) is not None or change.patch is not None
    reason = f"[llm round {round_no}] {change.rationale} (critic: {review.text()})"
    return Variant(name=f"llm: {change.name}", add_args=change.server_args, set_env=change.env_map, provenance="llm",
                   reason=reason, accuracy_risky=risky, llm=origin, patches=[patch] if patch else [])


def _judge(inputs: RoundInputs, round_no: int, changes: list[ProposedChange], checks: dict, evidence: dict,
           calls: list[LlmCall]) -> tuple[list[Variant], list[ProposalFate]]:
    spec = engine_for(inputs.target.engine)
    probe = checks["probe"]
    parser_errors = probe.get("errors") or [probe.get("parser_error") or "no parser"] * len(changes)
    prefix = f"{spec.source_import_root}/{spec.package}".removeprefix("./")
    target = inputs.target
    allowed = target_allowlist(target.engine, target.server_args, target.search_space).with_parser(
        parser_long_flags(probe))
    variants, fates, patch_index = [], [], 0
    for change, parser_error in zip(changes, parser_errors):
        patch, patch_error, git_paths = None, None, None
        if change.patch:
            patch, not_a_patch = _source_patch(spec, change)
            patch_error = checks["patch_errors"][patch_index] or not_a_patch
            git_paths = _git_paths(checks, patch_index)
            patch_index += 1
        shape = argv_shape_error(change.server_args)
        verdict = guard(change, spec, harness_flags_for(spec.name),
                        GuardInputs(parser_error=shape or parser_error or probe.get("parser_error"),
                                    patch_apply_error=patch_error, package_prefix=prefix, patch_paths=git_paths,
                                    env_prefixes=speaking(spec.name, inputs.target.server_args).env_prefixes,
                                    allowed=allowed))
        fate = ProposalFate(round=round_no, proposal=verdict.proposal, outcome="refused", rule=verdict.rule,
                            refusals=verdict.refusals, claims_discarded=verdict.claims_discarded)
        if verdict.passed:
            review, call = inputs.critic.review(proposal_change(verdict.proposal), evidence, round_no)
            if call is not None:
                calls.append(call)
                inputs.observe("llm_call", call.model_dump(mode="json"))
            fate = _after_critic(inputs, fate, verdict.proposal, review, round_no, variants, patch)
        fates.append(fate)
    return variants, fates


def _git_paths(checks: dict, index: int) -> GitPaths | None:
    """git's account of a patch's paths from the host's checks (None: git could not read it, or a host
    that does not send one: the guard's strict text reader decides)."""
    found = (checks.get("patch_paths") or [])[index:index + 1]
    return GitPaths.model_validate(found[0]) if found and found[0] is not None else None


def _source_patch(spec, change: ProposedChange) -> tuple[SourcePatch | None, str | None]:
    """The proposal's diff as the patch it launches as, or why git's yes is not enough (a diff without a hunk)."""
    try:
        return llm_patch(change.name, change.patch, spec), None
    except PatchError as exc:
        return None, str(exc)


def proposal_change(change: ProposedChange) -> CriticChange:
    return CriticChange(name=change.name, server_args=tuple(change.server_args),
                        env=tuple((s.name, s.value) for s in change.env), patch=change.patch, rationale=change.rationale)


def _after_critic(inputs, fate: ProposalFate, change: ProposedChange, review: Review, round_no: int,
                  variants: list[Variant], patch: SourcePatch | None) -> ProposalFate:
    fate = fate.model_copy(update={"critic": review.critic, "reasons": list(review.reasons),
                                   "detail": review.fallback or ""})
    if review.verdict == "skipped":
        return fate.model_copy(update={"outcome": "critic_failed"})
    fate = fate.model_copy(update={"verdict": review.verdict})
    if review.verdict == "reject":
        return fate.model_copy(update={"outcome": "rejected"})
    variant = _variant(inputs, change, round_no, review, patch)
    if change.patch and inputs.target.framework_tree is None:
        return fate.model_copy(update={"outcome": "held", "variant": variant.name, "detail": NO_TREE_TO_PATCH})
    variants.append(variant)
    return fate.model_copy(update={"outcome": "approved", "variant": variant.name})


def propose(inputs: RoundInputs, round_no: int, trials: list, keepers: list[Variant],
            tried: set[str]) -> list[Variant]:
    """The approved candidates of one round, in the model's order, none already tried."""
    s, log = inputs.settings, inputs.log
    first = inputs.host.proposal_checks(_probe_request(inputs, [], []))["probe"]
    flags = flag_rows(first.get("flags", []), s.flag_help)
    evidence = proposer_payload(inputs.target, inputs.baseline, inputs.roofline, trials, flags,
                                inputs.profile, first.get("sources", {}), [k.name for k in keepers],
                                s.max_proposals, evidence_rows(inputs.recipes))
    # What the guard lets through, so the model spends its proposals on knobs that can be tried.
    target = inputs.target
    evidence["allowed_knobs"] = target_allowlist(target.engine, target.server_args, target.search_space).shown()
    call, reply = _ask(inputs, round_no, evidence)
    record = ProposerRound(round=round_no, provenance=s.label, calls=[call])
    variants: list[Variant] = []
    if reply is None:
        record.fell_back, record.fallback_reason = True, call.call_error or call.parse_error
        log.warning("proposer round %d (%s): %s; the rule planner's plan alone", round_no, s.label,
                    record.fallback_reason)
    else:
        changes = reply.proposals[:s.max_proposals]
        checks = inputs.host.proposal_checks(_probe_request(inputs, [c.server_args for c in changes],
                                                            [c.patch for c in changes if c.patch]))
        variants, record.fates = _judge(inputs, round_no, changes, checks, evidence, record.calls)
        for fate in record.fates:
            log.info("proposer round %d: %s %s%s", round_no, fate.proposal.name, fate.outcome,
                     f" ({fate.rule}: {fate.refusals[0].detail})" if fate.rule else "")
    inputs.record(record)
    inputs.observe("proposer_round", record.model_dump(mode="json", exclude={"calls"}))
    return [v for v in variants if trial_fingerprint(keepers, v) not in tried]
