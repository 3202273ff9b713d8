"""How long one measurement may take in all, whatever the server does. Pure code.

The client's read timeout bounds each silence of a stream, not its whole: a server that
trickles a byte every few minutes never stalls, and would hold the run, and its host's
lease, for as long as it liked. So every measurement (a warm-up and its rounds) has a
total limit: its own requests at a floor speed that no engine worth tuning falls under,
never more than an absolute cap (`BenchmarkClient.max_measurement_s`). A caller that
knows better passes a tighter limit of its own (a trial: twice the baseline's measuring,
core/decisions/rule.py); past the limit the round in flight is cancelled (BenchOvertime).
"""

from __future__ import annotations

from collections.abc import Iterable

from hyperloom_assets.core.measurement.workloads import Plan

# The floor, over all the streams of a round together: the slowest real engine the tool
# tunes (a large model at concurrency 1) decodes several times faster and prefills far faster.
FLOOR_OUTPUT_TOKENS_PER_S = 5.0
FLOOR_PROMPT_TOKENS_PER_S = 500.0
ROUND_ALLOWANCE_S = 60.0  # each round's fixed share: connections, an engine compiling on first use
ARRIVAL_ALLOWANCE = 3.0  # Poisson arrivals: this many times their expected span
DEFAULT_MAX_MEASUREMENT_S = 2 * 3600.0


def round_floor_s(plan: Plan, request_rate: float | None = None) -> float:
    """The longest one round of `plan` may take at the floor speed: its tokens, every think time
    as if none overlapped, and its sessions' arrivals at `request_rate`."""
    requests = [request for session in plan for request in session]
    output = sum(request.output_tokens for request in requests)
    prompt = sum(len(request.prompt_ids) for request in requests)
    think_s = sum(request.think_ms for request in requests) / 1000
    arrivals_s = ARRIVAL_ALLOWANCE * len(plan) / request_rate if request_rate else 0.0
    return (ROUND_ALLOWANCE_S + output / FLOOR_OUTPUT_TOKENS_PER_S + prompt / FLOOR_PROMPT_TOKENS_PER_S
            + think_s + arrivals_s)


def measurement_limit_s(rounds: Iterable[Plan], request_rate: float | None, cap_s: float,
                        limit_s: float | None = None) -> tuple[float, str]:
    """(the limit of a measurement of these rounds, what set it): the caller's `limit_s` where given
    and tighter, else the rounds at the floor speed, never past `cap_s`."""
    if cap_s <= 0:
        raise ValueError(f"max_measurement_s must be positive, got {cap_s}")
    floor = sum(round_floor_s(plan, request_rate) for plan in rounds if plan)
    limits = [(floor, f"the workload at the floor speed ({FLOOR_OUTPUT_TOKENS_PER_S:g} output tok/s)"),
              (cap_s, "the client's max_measurement_s")]
    if limit_s is not None:
        limits.append((limit_s, "the caller's limit"))
    return min(limits, key=lambda limit: limit[0])
