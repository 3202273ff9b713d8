"""Typed tables: every trial, the plan, the sweep, the profile. Pure code.

One table per thing a user reads row by row, with typed columns and numbers rounded to
what they mean; the assets hand these to Dagster as table metadata (sortable in the UI),
and the Markdown report renders its trials table from the same rows.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import model_validator

from hyperloom_assets.core.decisions.climb import TrialRecord
from hyperloom_assets.core.measurement.telemetry import Telemetry
from hyperloom_assets.core.models import Frozen
from hyperloom_assets.core.planning.fingerprints import variant_fingerprint
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.profile.trace import CATEGORIES, CATEGORY_MEANING, ProfileSummary
from hyperloom_assets.core.proposer.critic_rules import Review
from hyperloom_assets.core.report.pareto import Frontier
from hyperloom_assets.core.report.precision import rounded
from hyperloom_assets.core.roofline.position import Position

Cell = str | int | float | bool | None


class Column(Frozen):
    name: str
    type: Literal["int", "float", "string", "bool"]
    description: str


class Table(Frozen):
    columns: list[Column]
    rows: list[dict[str, Cell]]

    @model_validator(mode="after")
    def _rows_match_columns(self) -> Table:
        names = [c.name for c in self.columns]
        for index, row in enumerate(self.rows):
            if list(row) != names:
                raise ValueError(f"row {index} has columns {list(row)}, expected {names}")
        return self


def describe_change(variant: Variant) -> str:
    parts = []
    if variant.add_args:
        parts.append("add `" + " ".join(variant.add_args) + "`")
    if variant.remove_args:
        parts.append("remove `" + " ".join(variant.remove_args) + "`")
    parts += [f"env {k}={v}" for k, v in variant.set_env.items()]
    parts += [f"unset {k}" for k in variant.unset_env]
    parts += [f"patch `{patch.name}` ({', '.join(f'`{f}`' for f in patch.files)}; sha256 {patch.sha256[:12]})"
              for patch in variant.patches]
    return "; ".join(parts) or "(no change)"


def columns_of(*specs: tuple[str, str, str]) -> list[Column]:
    return [Column(name=name, type=kind, description=description) for name, kind, description in specs]


# The engine's telemetry of the variant's last launch (core/measurement/telemetry.py).
TELEMETRY_COLUMNS = columns_of(
    ("kv_usage_max_pct", "float", "engine telemetry: the most of the KV cache in use during the rounds, %"),
    ("preemptions", "int", "engine telemetry: requests preempted (vLLM) or retracted (SGLang) during the rounds"),
    ("running_mean", "float", "engine telemetry: mean requests in the running batch"),
    ("waiting_mean", "float", "engine telemetry: mean requests queued for admission"),
    ("prefix_hit_pct", "float", "engine telemetry: prompt tokens found in the prefix cache, %"),
    ("prefill_share_pct", "float", "engine telemetry: time in prefill as a share of prefill plus decode, %"),
)

TRIAL_COLUMNS = columns_of(
    ("index", "int", "trial number, in the order the climb ran them"),
    ("fingerprint", "string", "of the whole launched change (the ledger's key)"),
    ("name", "string", "the variant"),
    ("provenance", "string", "who proposed it: rules, operator, library or llm:<provider>/<model>"),
    ("change", "string", "what it changes on top of the running best"),
    ("diagnosis", "string", "the bottleneck the planner diagnosed when it proposed the variant"),
    ("rule", "string", "the planner's rule that scored it (its text is in the plan's reason)"),
    ("against", "string", "the running best it was judged against"),
    ("outcome", "string", "KEEP, REVERT, NEEDS_REVIEW, KEEP_UNSTABLE, FAILED, KILLED_OVERTIME or REJECTED"),
    ("gain_pct", "float", "gain over the running best, % (ratio of geometric launch means)"),
    ("ci_low_pct", "float", "low end of the last look's interval, % (its level is in the reason)"),
    ("ci_high_pct", "float", "high end of the last look's interval, %"),
    ("output_throughput", "float", "the variant's mean output tok/s over its repeats"),
    ("goodput", "float", "the variant's mean requests/s within the SLO over its repeats, where the objective is "
                         "goodput (gain_pct is then of goodput); empty otherwise"),
    ("launches", "int", "servers launched with the variant"),
    ("best_relaunches", "int", "servers launched with the running best beside it"),
    ("replayed", "bool", "taken from the ledger instead of measured again"),
    ("reason", "string", "why the decision rule decided so"),
    ("critic", "string", "the critic's verdict and reasons, for a change that touches the tree or came from a model"),
    ("slo", "string", "the target's SLO over the variant's launches: met or missed, each limit at the percentile "
                      "with its 95% upper bound, for these launches, their requests taken as independent; empty "
                      "without an SLO"),
    ("ran_on", "string", "where the trial's launches ran, host:devices of each slot they took (a pool's member or "
                         "a host that declares its gpus); empty where the target's host serves whole"),
) + TELEMETRY_COLUMNS


def telemetry_cells(telemetry: Telemetry | None) -> dict[str, Cell]:
    """The engine's own /metrics over a launch's measured rounds; None where it exposes no such series."""
    t = telemetry
    return dict(kv_usage_max_pct=rounded(t.kv_usage_pct_max, "%") if t else None,
                preemptions=t.preemptions if t else None,
                running_mean=rounded(t.running_mean, "requests") if t else None,
                waiting_mean=rounded(t.waiting_mean, "requests") if t else None,
                prefix_hit_pct=rounded(t.prefix_hit_pct, "%") if t else None,
                prefill_share_pct=rounded(t.prefill_share_pct, "%") if t else None)


def critic_text(trial: TrialRecord) -> str | None:
    """Who reviewed the trial's change and what they said: the climb's review of a planned
    patch, or the review a model's proposal passed when it was proposed."""
    if trial.review is not None:
        return trial.review.text()
    llm = trial.variant.llm
    if llm is None:
        return None
    return Review(critic=llm.critic or "critic", verdict=llm.verdict, reasons=tuple(llm.critic_reasons),
                  fallback=llm.critic_fallback).text()


def ran_on_text(trial: TrialRecord) -> str:
    """Each slot the trial's launches took, once, in the order first taken: `gpu-a:0, gpu-b:2`."""
    return ", ".join(dict.fromkeys(trial.ran_on))


def trials_table(trials: list[TrialRecord]) -> Table:
    rows = [dict(index=t.index, fingerprint=t.fingerprint, name=t.name, provenance=t.variant.trial_provenance(),
                 change=describe_change(t.variant), diagnosis=t.variant.diagnosis, rule=t.variant.rule,
                 against=t.against, outcome=t.outcome, gain_pct=rounded(t.decision.gain_pct, "%"),
                 ci_low_pct=rounded(t.decision.ci_low_pct, "%"), ci_high_pct=rounded(t.decision.ci_high_pct, "%"),
                 output_throughput=rounded(t.output_throughput, "tok/s"),
                 goodput=rounded(t.mean, "req/s") if t.objective == "goodput" else None, launches=t.measurements,
                 best_relaunches=len(t.best_launches), replayed=t.replayed, reason=t.decision.reason,
                 critic=critic_text(t), slo=t.slo.short() if t.slo else "", ran_on=ran_on_text(t),
                 **telemetry_cells(t.telemetry))
            for t in trials]
    return Table(columns=TRIAL_COLUMNS, rows=rows)


PLAN_COLUMNS = columns_of(
    ("index", "int", "position in the plan, best first"),
    ("fingerprint", "string", "the variant's fingerprint"),
    ("name", "string", "the variant"),
    ("change", "string", "what it changes on the operator's config"),
    ("provenance", "string", "seed_grid, ablation, llm or patch"),
    ("proposed_by", "string", "rules, operator or llm:<provider>/<model>"),
    ("accuracy_risky", "bool", "must pass the accuracy gate before it is kept"),
    ("in_ledger", "bool", "already tried in this context: the climb replays its outcome"),
    ("reason", "string", "why the planner proposes it"),
)


def plan_table(variants: list[Variant], recorded: set[str] = frozenset()) -> Table:
    rows = [dict(index=i + 1, fingerprint=variant_fingerprint(v), name=v.name, change=describe_change(v),
                 provenance=v.provenance, proposed_by=v.trial_provenance(), accuracy_risky=v.accuracy_risky,
                 in_ledger=variant_fingerprint(v) in recorded, reason=v.reason)
            for i, v in enumerate(variants)]
    return Table(columns=PLAN_COLUMNS, rows=rows)


SWEEP_COLUMNS = columns_of(
    ("config", "string", "baseline or stack"),
    ("concurrency", "int", "requests in flight"),
    ("output_throughput", "float", "output tok/s"),
    ("request_throughput", "float", "completed requests per second"),
    ("tpot_p50_ms", "float", "time per output token, median, ms"),
    ("interactivity", "float", "tokens per second per user (1000 / TPOT p50)"),
    ("ttft_p50_ms", "float", "time to first token, median, ms"),
    ("completed", "int", "requests completed in the round"),
    ("latency_warning", "string", "why TPOT and interactivity cannot be read per token here; empty when they can"),
)


def sweep_rows(config: str, results) -> list[dict[str, Any]]:
    """A config's (concurrency, Measurement) pairs as the sweep's rows."""
    return [{"config": config, "concurrency": rung, "output_throughput": m.output_throughput,
             "request_throughput": m.request_throughput, "tpot_p50_ms": m.tpot_p50_ms,
             "interactivity": m.interactivity, "ttft_p50_ms": m.ttft_p50_ms, "completed": m.completed,
             "latency_warning": "; ".join(m.latency.warnings()) if m.latency else ""}
            for rung, m in results]


def sweep_table(rows: list[dict[str, Any]]) -> Table:
    return Table(columns=SWEEP_COLUMNS, rows=[dict(
        config=row["config"], concurrency=int(row["concurrency"]),
        output_throughput=rounded(row["output_throughput"], "tok/s"),
        request_throughput=rounded(row["request_throughput"], "req/s"),
        tpot_p50_ms=rounded(row["tpot_p50_ms"], "ms"), interactivity=rounded(row["interactivity"], "tok/s/user"),
        ttft_p50_ms=rounded(row["ttft_p50_ms"], "ms"), completed=int(row["completed"]),
        latency_warning=row.get("latency_warning", "")) for row in rows])


POSITION_COLUMNS = columns_of(
    ("measurement_id", "int", "the result store's measurement id"),
    ("kind", "string", "baseline, trial, best_relaunch, validation or sweep"),
    ("fingerprint", "string", "the trial's fingerprint, where it has one"),
    ("concurrency", "int", "requests in flight: the ceiling's batch"),
    ("output_throughput", "float", "measured output tok/s"),
    ("ceiling_tok_s", "float", "the roofline ceiling of this launch, tok/s"),
    ("of_ceiling_pct", "float", "measured as a share of the ceiling, %"),
    ("binding", "string", "memory or compute: the bound that sets the ceiling"),
)


def positions_table(found: list[Position]) -> Table:
    return Table(columns=POSITION_COLUMNS, rows=[dict(
        measurement_id=p.measurement_id, kind=p.kind, fingerprint=p.fingerprint, concurrency=p.concurrency,
        output_throughput=rounded(p.output_throughput, "tok/s"), ceiling_tok_s=rounded(p.ceiling_tok_s, "tok/s"),
        of_ceiling_pct=rounded(p.of_ceiling_pct, "%"), binding=p.binding) for p in found])


PARETO_COLUMNS = columns_of(
    ("measurement_id", "int", "the result store's measurement id"),
    ("config", "string", "the config it measured, by fingerprint: baseline, stack, a trial's keepers and variant, "
                         "or unrecorded"),
    ("fingerprint", "string", "that config's fingerprint; empty where its row did not record one"),
    ("kind", "string", "the step that measured it: baseline, trial, best_relaunch, validation, sweep or capacity"),
    ("concurrency", "int", "requests in flight"),
    ("tok_s_per_gpu", "float", "output tok/s per device serving the model"),
    ("tok_s_per_user", "float", "1000 / TPOT p50; empty where TPOT is not per-token"),
    ("meets_slo", "string", "yes or no under the target's SLO, that launch alone; empty without an SLO"),
    ("on_frontier", "bool", "no other point is as good on both axes and better on one"),
    ("on_slo_frontier", "bool", "no other point within the SLO is as good on both axes and better on one; "
                                "false outside the SLO or without one"),
    ("recommended", "bool", "the point within the SLO with the most throughput per GPU (on its frontier)"),
    ("why_off", "string", "why it cannot be on the frontier, when it cannot"),
)


def pareto_table(found: Frontier) -> Table:
    pick = found.recommended.measurement_id if found.recommended else None
    return Table(columns=PARETO_COLUMNS, rows=[dict(
        measurement_id=p.measurement_id, config=p.config, fingerprint=p.fingerprint or "", kind=p.kind,
        concurrency=p.concurrency,
        tok_s_per_gpu=rounded(p.tok_s_per_gpu, "tok/s"), tok_s_per_user=rounded(p.tok_s_per_user, "tok/s/user"),
        meets_slo="" if p.meets_slo is None else ("yes" if p.meets_slo else "no"), on_frontier=p.on_frontier,
        on_slo_frontier=p.on_slo_frontier, recommended=p.measurement_id == pick, why_off=p.why_off)
        for p in found.points])


PROFILE_OP_COLUMNS = columns_of(
    ("rank", "int", "by self time, largest first"),
    ("op", "string", "the op as the profiler names it (step annotations with their sizes as N)"),
    ("category", "string", "attention, gemm, sampling, overhead, communication or other"),
    ("calls", "int", "times it ran in the profiled round"),
    ("self_ms", "float", "its own time, children excluded, ms (the sim's: simulated ms)"),
    ("share_pct", "float", "of the profiled window, %"),
)
PROFILE_SHARE_COLUMNS = columns_of(
    ("category", "string", "where the time went"),
    ("share_pct", "float", "of the profiled window, %"),
    ("self_ms", "float", "its ops' self time, ms"),
    ("covers", "string", "what the category holds"),
)


def profile_ops_table(summary: ProfileSummary) -> Table:
    return Table(columns=PROFILE_OP_COLUMNS, rows=[dict(
        rank=i + 1, op=o.name, category=o.category, calls=o.calls, self_ms=rounded(o.self_ms, "ms"),
        share_pct=rounded(o.share_pct, "%")) for i, o in enumerate(summary.top_ops)])


def profile_shares_table(summary: ProfileSummary) -> Table:
    return Table(columns=PROFILE_SHARE_COLUMNS, rows=[dict(
        category=c, share_pct=rounded(summary.shares_pct[c], "%"), self_ms=rounded(summary.category_ms[c], "ms"),
        covers=CATEGORY_MEANING[c]) for c in CATEGORIES])
