"""The workload contract the baseline fixes for every later measurement of a target (invariant 4).

Everything about the workload that can fail does so here, before a launch: a bad trace, a
request longer than the server's context. For a target with an slo it also sizes the rounds
so each launch's verdict has power (core/measurement/slo_power.py), and says so in the run.
"""

from hyperloom_assets.assets.stops import baseline_failure
from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.measurement.contract import WorkloadContract
from hyperloom_assets.core.measurement.slo_power import AT_LIMIT, TAIL_SIGMA, prompts_for_power, requests_for_power
from hyperloom_assets.core.measurement.slo_statistic import label, min_samples
from hyperloom_assets.core.measurement.workloads import (
    TraceError,
    build_plan,
    default_num_prompts,
    default_warmups,
    max_context_tokens,
)
from hyperloom_assets.core.planning.variants import parse_args
from hyperloom_assets.core.roofline.model_shape import load_shape

# Flags that cap the context below the model's own maximum, per engine.
MAX_LEN_FLAGS = ("--max-model-len", "--context-length")


def max_model_len(target: Target) -> int:
    """The server's context limit: the operator's cap when given, else the model's."""
    limit = load_shape(target.model).max_position_embeddings
    args = parse_args(target.server_args)
    for flag in MAX_LEN_FLAGS:
        value = args.get(flag)
        if value is not None and value.isdigit():
            limit = min(limit, int(value))
    return limit


def say_slo_prompts(log, target: Target, contract: WorkloadContract) -> None:
    """Say in the run how many requests each launch gives the SLO's verdict, and why (slo_power.py)."""
    q, asked = target.slo.percentile, target.workload.num_prompts
    power = (f"{requests_for_power(q, power=target.slo.power)} read a config at {AT_LIMIT:.0%} of a limit as "
             f"meeting it {target.slo.power:.0%} of the "
             f"time (lognormal latency of log spread {TAIL_SIGMA:g})")
    if contract.num_prompts is None:
        log.info("slo: an agentic round replays its whole trace; a launch with fewer than %d requests has no %s bound, "
                 "and %s", min_samples(q), label(q), power)
    elif asked is None or contract.num_prompts > asked:
        log.warning("slo: %d prompts per round (%d per launch over %d repeats): a %s bound needs %d requests per "
                    "launch, and %s", contract.num_prompts, contract.num_prompts * contract.repeats, contract.repeats,
                    label(q), min_samples(q), power)


def workload_contract(target: Target) -> WorkloadContract:
    """Fix the workload every later measurement reuses; bad input fails before a launch."""
    shape = load_shape(target.model)
    limit = max_model_len(target)
    workload = target.workload
    try:
        plan = build_plan(workload, shape.vocab)
    except TraceError as exc:
        raise baseline_failure("baseline_failed", f"bad trace: {exc}") from exc
    longest = max_context_tokens(plan)
    if longest > limit:
        raise baseline_failure("baseline_failed", f"workload: a request needs {longest} tokens of context, more than the "
                               f"server's max model length {limit} ({target.model / 'config.json'}, server_args)")
    num_prompts = None
    if workload.kind != "agentic":
        num_prompts = workload.num_prompts or default_num_prompts(workload.concurrency, workload.isl or 0, workload.osl or 0)
    if target.slo is not None:
        workload = workload.model_copy(update={"slo": target.slo.goodput()})  # each round's goodput counts under it
        if num_prompts is not None:
            num_prompts = max(num_prompts, prompts_for_power(target.slo.percentile, target.repeats, target.slo.power))
    return WorkloadContract(workload=workload, vocab_size=shape.vocab, max_model_len=limit,
                            num_prompts=num_prompts, repeats=target.repeats,
                            warmups=default_warmups(workload.concurrency, engine_for(target.engine).compiles_on_first_use))
