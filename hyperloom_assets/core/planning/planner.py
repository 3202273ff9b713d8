"""The plan: which variants to try next, best first, and why. Pure code.

Candidates come from the engine's seed grid (hyperloom_assets/core/engines/grids/) expressed relative
to the current base, and from ablations of the operator's own args and envs (drop one
inherited flag with its value, or unset one inherited env; never a counter-flag).
The plan starts from a diagnosis (planning/diagnosis.py: KV capacity, the sequence cap,
prefill, decode launch overhead, the memory roofline) read from the running best's own
telemetry and the roofline. Each proposal is scored by one rule of the rule table
(planning/rules.yaml) plus the diagnosis's boost for the knob's family, so the knobs
that act on what binds go first; its `reason` names the rule and the diagnosis. A knob
that a trial under the same diagnosis showed inert (reverted within INERT_GAIN_PCT) is
not proposed again until the diagnosis changes. `replan` is the same plan on top of the
stack of keepers, so a knob that binds only once another moved (the token budget after
the sequence cap is raised) comes back with a higher score.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.planning.between import ladder_midpoints
from hyperloom_assets.core.planning.combine import combined
from hyperloom_assets.core.planning.diagnosis import Diagnosis, PlanEvidence, diagnose
from hyperloom_assets.core.planning.fingerprints import trial_fingerprint
from hyperloom_assets.core.planning.rule_choice import rule_for
from hyperloom_assets.core.planning.rules import shipped_rules
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.engines.registry import engine_flags_for, grid_engine, harness_flags_for
from hyperloom_assets.core.planning.seed_grids import GridEntry, SeedGrid, When, accuracy_risk, load_grids
from hyperloom_assets.core.planning.slo_ceiling import cap_ceiling, over_ceiling
from hyperloom_assets.core.planning.variants import (
    EffectiveConfig,
    Variant,
    apply_variant,
    canonical_flag,
    compose,
    effective_settings,
    knob_of,
    setting_key,
    split_args,
)


RULES = shipped_rules().rules  # rule id -> score and text (planning/rules.yaml)
RISKY_FACTOR = 0.5
SHARED_PREFIX_MIN = 0.1  # prefix share from which `when: {shared_prefix: true}` holds
PLANNED = ("seed_grid", "search_space")  # on equal scores these go before ablations
INERT_GAIN_PCT = 3.0  # a reverted trial within this of the best moved nothing


def prefix_share_of(workload: Workload, theoretical_prefix_hit_pct: float | None = None) -> float:
    """The share of prompt tokens a prefix cache could reuse."""
    if theoretical_prefix_hit_pct is not None:
        return max(0.0, min(1.0, theoretical_prefix_hit_pct / 100))
    if workload.kind == "shared_prefix" and workload.isl:
        return min(1.0, workload.prefix_len / workload.isl)
    return 0.0


class Proposal(NamedTuple):
    variant: Variant
    family: str  # a ScoringFamily of the grid, or "ablation"
    new_value: int | None = None  # for the sequence-cap and token-budget ladders


class Base(NamedTuple):
    """What the plan is relative to: the running base and the knobs around it."""
    grid: SeedGrid
    args: list[str]
    env: dict[str, str]
    evidence: PlanEvidence
    concurrency: int
    isl: int | None
    cap: int | None
    budget: int | None
    diagnosis: Diagnosis


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def current_value(grid: SeedGrid, args: list[str], flag: str, host: str) -> str | None:
    """A flag's value in the args, else the engine's default for the host."""
    settings = effective_settings(args, grid.boolean_flag_set())
    if setting_key(flag) in settings:
        return settings[setting_key(flag)][1]
    return grid.default_value(flag, host)


def effective_sequence_cap(grid: SeedGrid, args: list[str], evidence: PlanEvidence) -> int | None:
    """The cap as launched: the args, else the engine's resolved value, else its default."""
    settings = effective_settings(args, grid.boolean_flag_set())
    if setting_key(grid.sequence_cap_flag) in settings:
        return _int_or_none(settings[setting_key(grid.sequence_cap_flag)][1])
    if evidence.sequence_cap is not None:
        return evidence.sequence_cap
    return _int_or_none(grid.default_value(grid.sequence_cap_flag, evidence.host))


def _holds(when: When, evidence: PlanEvidence) -> bool:
    checks = [
        when.host is None or when.host == evidence.host,
        when.shared_prefix is None or when.shared_prefix == (evidence.prefix_share >= SHARED_PREFIX_MIN),
        when.moe is None or when.moe == evidence.moe,
        when.has_mtp is None or when.has_mtp == evidence.has_mtp,
        when.fp8_model is None or when.fp8_model == evidence.fp8_model,
    ]
    return all(checks)


def _seed(entry: GridEntry, base: Base, name: str, add_args: list[str] | None = None,
          set_env: dict[str, str] | None = None) -> Variant:
    # Risk is the engine's call, value by value (ATOM's --level 3 is its default, 2 is not).
    risky = accuracy_risk(engine_for(base.grid.engine), add_args or [], set_env or {}) is not None
    provenance = "search_space" if entry.from_search_space else "seed_grid"
    return Variant(name=name, add_args=add_args or [], set_env=set_env or {}, provenance=provenance,
                   reason=entry.doc or entry.name, accuracy_risky=risky)


def _entry_proposals(entry: GridEntry, base: Base) -> list[Proposal]:
    if entry.flag is not None and entry.ladder is not None:
        current = _int_or_none(current_value(base.grid, base.args, entry.flag, base.evidence.host))
        numbers = entry.ladder.numbers(base.concurrency, base.isl, current)
        return [Proposal(_seed(entry, base, f"{entry.name}={entry.ladder.render(n)}", [entry.flag, entry.ladder.render(n)]),
                         entry.rule, n) for n in numbers]
    if entry.flag is not None:
        return [Proposal(_seed(entry, base, f"{entry.name}={c}", [entry.flag, c]), entry.rule, _int_or_none(c))
                for c in entry.choices]
    if entry.env_var is not None:
        return [Proposal(_seed(entry, base, f"{entry.name}={c}", set_env={entry.env_var: c}), entry.rule)
                for c in entry.choices]
    return [Proposal(_seed(entry, base, entry.name, list(entry.add_args), dict(entry.set_env)), entry.rule)]


def seed_proposals(base: Base) -> list[Proposal]:
    proposals: list[Proposal] = []
    for entry in base.grid.entries:
        if _holds(entry.when, base.evidence):
            proposals += _entry_proposals(entry, base)
    return proposals


def ablation_proposals(base: Base, operator_args: list[str], operator_env: dict[str, str],
                       protected: set[str]) -> list[Proposal]:
    """Drop one inherited flag (with its value) or unset one inherited env."""
    booleans = base.grid.boolean_flag_set()
    present = effective_settings(base.args, booleans)
    keep = {setting_key(f) for f in base.grid.keep_flags} | protected
    rules = {canonical_flag(k) if k.startswith("-") else k: v for k, v in base.grid.ablation_rules.items()}
    ladders = {setting_key(base.grid.sequence_cap_flag): "sequence_cap"}
    if base.grid.token_budget_flag:
        ladders[setting_key(base.grid.token_budget_flag)] = "token_budget"
    proposals, seen = [], set()
    for setting in split_args(operator_args, booleans):
        key = setting_key(setting.flag) if setting.flag else ""
        if not setting.flag or key in keep or key in seen or key not in present:
            continue
        seen.add(key)
        variant = Variant(name=f"drop {setting.flag}", remove_args=[setting.flag], provenance="ablation",
                          reason=f"the operator set {' '.join(setting.tokens)}")
        if key in ladders:
            # Dropping a cap or budget is a step to the engine's default: score it as one.
            default = _int_or_none(base.grid.default_value(setting.flag, base.evidence.host))
            proposals.append(Proposal(variant, ladders[key], default))
        else:
            proposals.append(Proposal(variant, rules.get(canonical_flag(setting.flag), "ablation")))
    for name in operator_env:
        if name in base.env and name not in protected:
            variant = Variant(name=f"unset {name}", unset_env=[name], provenance="ablation",
                              reason=f"the operator set {name}={operator_env[name]}")
            proposals.append(Proposal(variant, rules.get(name, "ablation")))
    return proposals


def scored(proposal: Proposal, base: Base) -> Variant:
    rule_id = rule_for(proposal, base)
    rule = RULES[rule_id]
    bottleneck = base.diagnosis.bottleneck
    boost = shipped_rules().diagnoses[bottleneck].boost(rule_id, proposal.family) if rule.can_act else 0.0
    score = rule.score + rule.per_prefix_share * base.evidence.prefix_share + boost
    value = score * (RISKY_FACTOR if proposal.variant.accuracy_risky else 1.0)
    risk = f", x{RISKY_FACTOR:g} accuracy-risky" if proposal.variant.accuracy_risky else ""
    acts = f"; {bottleneck} {boost:+g}" if boost else ""
    reason = (f"[{rule_id}] {rule.text} ({proposal.variant.reason}); diagnosis {bottleneck}: "
              f"{base.diagnosis.because}{acts}; score {score:g}{risk} = {value:g}")
    return proposal.variant.model_copy(update={"expected_value": value, "reason": reason, "rule": rule_id,
                                               "diagnosis": bottleneck})


def _natural(name: str) -> list[tuple[int, int | str]]:
    # Ties go by name with numbers in numeric order: the smaller step of a ladder first.
    return [(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name)]


def _touched_keys(variant: Variant) -> set[str]:
    return {setting_key(s.flag) for s in split_args(variant.add_args) if s.flag} | {setting_key(f) for f in variant.remove_args}


def _flips_operator_boolean(variant: Variant, operator_args: list[str], booleans: frozenset[str]) -> bool:
    # `--enable-x` over an operator's `--no-enable-x` is a counter-flag; dropping the
    # operator's flag is the ablation's job (docs/design.md, invariant 2).
    written = {setting_key(s.flag): s.flag for s in split_args(operator_args, booleans) if s.flag and s.value is None}
    for setting in split_args(variant.add_args, booleans):
        key = setting_key(setting.flag) if setting.flag else ""
        if setting.value is None and key in written and written[key] != setting.flag:
            return True
    return False


def _changes(base: Base, variant: Variant) -> bool:
    """False when the variant launches what the base launches, defaults counted."""
    booleans = base.grid.boolean_flag_set()
    defaults = base.grid.default_args(base.evidence.host)
    after = apply_variant(base.args, base.env, variant, booleans)
    before = EffectiveConfig(argv=list(base.args), env=dict(base.env))
    return not _with_defaults(after, defaults).same_as(_with_defaults(before, defaults), booleans)


def _with_defaults(config: EffectiveConfig, defaults: list[str]) -> EffectiveConfig:
    # The defaults go first, so any flag the config sets wins over them.
    return EffectiveConfig(argv=defaults + config.argv, env=config.env, unset_env=config.unset_env)


class Tried(NamedTuple):
    """A trial the climb ran: what it changed, under which diagnosis, and what came of it."""
    variant: Variant
    outcome: str
    gain_pct: float | None
    broke_batch_latency: bool = False  # its launches broke the SLO's TPOT or E2E limit (slo_ceiling.py)


def inert_knobs(history: Sequence[Tried], bottleneck: str) -> set[frozenset[str]]:
    """Knobs a trial under this same diagnosis reverted without moving throughput."""
    return {knob_of(t.variant) for t in history
            if t.outcome == "REVERT" and t.variant.diagnosis == bottleneck
            and t.gain_pct is not None and abs(t.gain_pct) < INERT_GAIN_PCT}


def graphs_off(grid: SeedGrid, args: list[str]) -> bool:
    """The config turns CUDA graphs off: a flag whose ablation the grid scores as CUDA graphs."""
    present = set(effective_settings(args, grid.boolean_flag_set()))
    return any(setting_key(flag) in present for flag, family in grid.ablation_rules.items()
               if family == "cuda_graphs" and flag.startswith("-"))


def base_for(grid: SeedGrid, args: list[str], env: dict[str, str], workload: Workload, evidence: PlanEvidence) -> Base:
    """The running base with its knobs read and its bottleneck diagnosed."""
    budget_flag = grid.token_budget_flag
    budget = _int_or_none(current_value(grid, args, budget_flag, evidence.host)) if budget_flag else None
    cap = effective_sequence_cap(grid, args, evidence)
    diagnosis = diagnose(evidence, cap, workload.concurrency, graphs_off(grid, args))
    return Base(grid, list(args), dict(env), evidence, workload.concurrency, workload.isl, cap, budget, diagnosis)


def _admissible(variant: Variant, base: Base, harness: set[str], accepted_flags: frozenset[str] | None,
                operator_args: list[str]) -> bool:
    booleans = base.grid.boolean_flag_set()
    added = {setting_key(s.flag) for s in split_args(variant.add_args, booleans) if s.flag}
    if _touched_keys(variant) & harness:
        return False
    if accepted_flags is not None and not added <= {setting_key(f) for f in accepted_flags}:
        return False
    return not _flips_operator_boolean(variant, operator_args, booleans) and _changes(base, variant)


def _joint(ranked: list[tuple[str, Variant]], base: Base, history: Sequence[Tried], held: frozenset[str]) -> Variant | None:
    """The combined variant: of the knobs the diagnosis names when it names several, else of every strong knob."""
    rules = shipped_rules()
    boosts = rules.diagnoses[base.diagnosis.bottleneck].boosts
    acting = [variant for family, variant in ranked if boosts.get(family, 0.0) > 0]
    pool = acting if len({knob_of(v) for v in acting}) >= rules.combine.min_knobs else [v for _, v in ranked]
    refused = [t.variant for t in history if t.variant.provenance == "combined" and t.outcome == "FAILED"]
    return combined(pool, rules.combine, held, refused)


def plan(engine: str, flavor: str | None, base_args: list[str], base_env: dict[str, str], workload: Workload,
         evidence: PlanEvidence, tried_fingerprints: set[str], *, keepers: list[Variant] | None = None,
         operator_args: list[str] | None = None, operator_env: dict[str, str] | None = None,
         grids: dict[str, SeedGrid] | None = None, accepted_flags: frozenset[str] | None = None,
         history: Sequence[Tried] = ()) -> list[Variant]:
    """Variants to try on top of the base, best first, none already tried.

    `keepers` are the stack the base already holds (empty for the first plan); the
    operator's own args and env default to the base's. Dedup is by trial_fingerprint
    (the stack's change plus the variant's), against `tried_fingerprints` and among
    the plan itself. `accepted_flags` drops variants adding other flags; for a sim it
    defaults to the flags its flavor's parser knows (the sim takes only some of them).
    `history` (the climb's trials so far) drops knobs shown inert under the same diagnosis.
    """
    grid = (grids or load_grids())[grid_engine(engine, flavor)]
    accepted_flags = engine_flags_for(engine, flavor) if accepted_flags is None else accepted_flags
    keepers = list(keepers or [])
    operator_args = list(base_args if operator_args is None else operator_args)
    operator_env = dict(base_env if operator_env is None else operator_env)
    harness = {setting_key(f) for f in harness_flags_for(engine)}
    base = base_for(grid, base_args, base_env, workload, evidence)
    inert = inert_knobs(history, base.diagnosis.bottleneck)
    protected = harness | set().union(*(_touched_keys(k) for k in keepers)) | {v for k in keepers for v in [*k.set_env, *k.unset_env]}
    proposals = seed_proposals(base)
    if grid.ablate:
        proposals += ablation_proposals(base, operator_args, operator_env, protected)
    ceiling = cap_ceiling([t.variant for t in history if t.broke_batch_latency], grid.sequence_cap_flag,
                          grid.boolean_flag_set())
    pairs = [(p.family, scored(p, base)) for p in proposals
             if knob_of(p.variant) not in inert and _admissible(p.variant, base, harness, accepted_flags, operator_args)
             and not over_ceiling(p.variant, ceiling, grid, base.evidence.host)]
    pairs.sort(key=lambda pair: (-pair[1].expected_value, pair[1].provenance not in PLANNED, _natural(pair[1].name)))
    candidates = [variant for _, variant in pairs]
    joint = _joint(pairs, base, history, frozenset(protected))
    between = [v for v in _between(base, keepers, history) if _admissible(v, base, harness, accepted_flags, operator_args)]
    result, seen = [], set(tried_fingerprints)
    for variant in between + ([joint] if joint else []) + candidates:
        fingerprint = trial_fingerprint(keepers, variant)
        if fingerprint not in seen:
            seen.add(fingerprint)
            result.append(variant)
    return result


def _between(base: Base, keepers: list[Variant], history: Sequence[Tried]) -> list[Variant]:
    """The midpoints between a keeper's value of a ladder knob and its nearest neighbour that lost, tried
    before anything else (planning/between.py)."""
    held = set().union(*(knob_of(k) for k in keepers))
    current = lambda flag: _int_or_none(current_value(base.grid, base.args, flag, base.evidence.host))  # noqa: E731
    found = []
    for entry, mid in ladder_midpoints(base.grid.entries, held, current, [(t.variant, t.outcome) for t in history]):
        seed = _seed(entry, base, f"{entry.name}={mid.value}", [entry.flag, str(mid.value)])
        variant = scored(Proposal(seed, entry.rule, mid.value), base)
        rule, rest = variant.reason.split("] ", 1)
        found.append(variant.model_copy(update={"reason": f"{rule}] between the kept {mid.kept} and {mid.lost}, which "
                                                          f"lost ({mid.why}), first; {rest}"}))
    return found


def replan(engine: str, flavor: str | None, operator_args: list[str], operator_env: dict[str, str],
           keepers: list[Variant], workload: Workload, evidence: PlanEvidence, tried_fingerprints: set[str], *,
           grids: dict[str, SeedGrid] | None = None, accepted_flags: frozenset[str] | None = None,
           history: Sequence[Tried] = ()) -> list[Variant]:
    """The plan again after a keeper: variants re-expressed on top of the stack."""
    grids = grids or load_grids()
    grid = grids[grid_engine(engine, flavor)]
    stack = compose(operator_args, operator_env, keepers, harness_flags=harness_flags_for(engine),
                    boolean_flags=grid.boolean_flag_set())
    return plan(engine, flavor, stack.argv, stack.env, workload, evidence, tried_fingerprints, keepers=keepers,
                operator_args=operator_args, operator_env=operator_env, grids=grids, accepted_flags=accepted_flags,
                history=history)
