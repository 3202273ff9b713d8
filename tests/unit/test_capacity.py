"""Capacity at the SLO by bisection: doubling while the SLO holds, halving while it breaks,
then bisecting to the resolution, within the probe budget; a config that meets it at the
ceiling is said to be at least that."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from hyperloom_assets.assets.capacity import capacity_result, measure_capacity
from hyperloom_assets.core.config.targets import Target, TargetSlo, Workload
from hyperloom_assets.core.measurement.capacity import (
    CEILING_FACTOR,
    PROBE_LIMIT_FACTOR,
    RESOLUTION,
    Capacity,
    CapacityAtSlo,
    Probe,
    find_capacity,
    probe_limit_s,
    probe_prompts,
    rate_shortfall,
)
from hyperloom_assets.core.measurement.contract import WorkloadContract
from hyperloom_assets.core.measurement.limits import ROUND_ALLOWANCE_S
from hyperloom_assets.core.measurement.measurement import ArrivalLoad, RepeatMetrics, RequestRecord
from hyperloom_assets.core.measurement.metrics import arrival_load, summarize
from hyperloom_assets.core.measurement.serving import BenchOvertime, ServerSpec
from hyperloom_assets.core.report.markdown import capacity_text
from hyperloom_assets.resources.bench.runner import RoundFailed
from hyperloom_assets.resources.measure import _contract_rounds
from tests.conftest import SIM_MODEL

TARGET = Target(engine="sim", model=SIM_MODEL, workload=Workload(kind="random", isl=16, osl=4, concurrency=4),
                slo=TargetSlo(e2e_ms=1000, percentile=50, capacity_probes=6))


MAX_PROBES = 7


def limit_at(capacity: float):
    """An SLO met up to `capacity` (latency grows with load)."""
    return lambda load: Probe(load=load, met=load <= capacity, why=f"load {load}")


@pytest.mark.parametrize("true, start", [(37, 16), (16, 16), (5, 16), (60, 16)])
def test_concurrency_is_found_within_the_resolution_from_above_and_below(true, start) -> None:
    found = find_capacity(limit_at(true), start, "concurrency", MAX_PROBES)
    assert found.load <= true, found
    assert found.load >= true * 0.875 - 1, found
    assert len(found.probes) <= MAX_PROBES and found.probes[0].load == start
    assert all(p.met == (p.load <= true) for p in found.probes)
    assert found.at_ceiling is False


def test_a_config_that_breaks_the_slo_even_at_one_stream_has_no_capacity() -> None:
    found = find_capacity(limit_at(0), 4, "concurrency", MAX_PROBES)
    assert found.load == 0 and [p.load for p in found.probes] == [4, 2, 1]


def test_a_config_that_meets_it_at_the_ceiling_is_a_lower_bound() -> None:
    found = find_capacity(limit_at(10_000), 8, "concurrency", MAX_PROBES)
    assert found.load == CEILING_FACTOR * 8 and found.at_ceiling is True
    assert [p.load for p in found.probes] == [8, 16, 32]


def test_request_rate_is_bisected_as_a_real_number() -> None:
    found = find_capacity(limit_at(3.3), 2.0, "request_rate", MAX_PROBES)
    assert 3.3 * 0.875 <= found.load <= 3.3 and found.unit == "request_rate"
    assert [p.load for p in found.probes][:3] == [2.0, 4.0, 3.0]


def test_a_spent_budget_says_where_it_broke() -> None:
    found = find_capacity(limit_at(37), 16, "concurrency", 4)
    assert [p.load for p in found.probes] == [16, 32, 64, 48] and found.load == 32 and found.broke_at == 48
    text = capacity_text(CapacityAtSlo(baseline=found.load, stack=None, unit="concurrency",
                                       baseline_broke_at=found.broke_at))
    assert text == "Capacity at the SLO: the baseline serves 32 concurrent streams within it (48 broke it), the stack " \
                   "not measured."


def test_probe_rounds_carry_enough_requests_for_the_bound() -> None:
    assert probe_prompts(4, "concurrency", 99, 10) == 299 and probe_prompts(64, "concurrency", 90, 10) == 128
    assert probe_prompts(2.0, "request_rate", 95, 200) == 200 and probe_prompts(2.0, "request_rate", 95, 10) == 59


def test_the_gain_is_the_stack_over_the_baseline() -> None:
    assert CapacityAtSlo(baseline=16, stack=24, unit="concurrency", baseline_broke_at=18,
                         stack_broke_at=27).gain_pct() == pytest.approx(50.0)
    assert CapacityAtSlo(baseline=0, stack=24, unit="concurrency", baseline_broke_at=1,
                         stack_broke_at=27).gain_pct() is None


# Issue 47, points 2 and 3: a lower bound is said as one, the gain only between bracketed
# capacities, a failed probe is a broken one, probes have a time limit, and a rate probe breaks
# when its client falls behind the offered rate.

def test_a_search_that_runs_out_of_probes_before_any_load_breaks_is_only_a_lower_bound() -> None:
    found = find_capacity(limit_at(10_000), 8, "concurrency", 2)
    assert [p.load for p in found.probes] == [8, 16] and found.broke_at is None and not found.at_ceiling
    capacity = capacity_result(TARGET, found, None)
    assert capacity.at_least == ["baseline"] and capacity.baseline_bracket == [16, None]
    assert capacity_text(capacity) == ("Capacity at the SLO: the baseline serves at least 16 concurrent streams "
                                       "within it (no load probed broke it), the stack not measured.")


def test_a_ceiling_on_both_sides_gives_no_gain_figure() -> None:
    base = find_capacity(limit_at(10_000), 8, "concurrency", MAX_PROBES)
    stack = find_capacity(limit_at(20_000), 8, "concurrency", MAX_PROBES)
    capacity = capacity_result(TARGET, base, stack)
    assert capacity.gain_pct() is None and capacity.gain_at_least_pct() is None
    assert capacity_text(capacity) == (
        "Capacity at the SLO: the baseline serves at least 32 concurrent streams within it (the highest load the "
        "search may probe), the stack at least 32 (the highest load the search may probe); no gain figure, as both "
        "are only lower bounds.")


def test_a_stack_at_its_ceiling_over_a_bracketed_baseline_gains_at_least_the_ceiling_over_where_it_broke() -> None:
    base = find_capacity(limit_at(10), 16, "concurrency", MAX_PROBES)  # 16 broke, 8 met, then 12, 10, 11
    stack = find_capacity(limit_at(10_000), 16, "concurrency", MAX_PROBES)  # at least 64
    capacity = capacity_result(TARGET, base, stack)
    assert (capacity.baseline, capacity.baseline_broke_at, capacity.stack) == (10, 11, 64), capacity
    assert capacity.gain_pct() is None, "64 is a lower bound: 64 over 10 is no gain"
    assert capacity.gain_at_least_pct() == pytest.approx(100 * (64 / 11 - 1))
    assert capacity_text(capacity).endswith("the stack at least 64 (the highest load the search may probe), "
                                            "at least +482%.")
    assert "+540%" not in capacity_text(capacity)


def test_a_bracketed_capacity_carries_its_interval_and_the_resolution() -> None:
    base = find_capacity(limit_at(37), 16, "concurrency", MAX_PROBES)
    stack = find_capacity(limit_at(50), 16, "concurrency", MAX_PROBES)
    capacity = capacity_result(TARGET, base, stack)
    assert capacity.baseline_bracket == [base.load, base.broke_at] and capacity.stack_bracket == [stack.load,
                                                                                                   stack.broke_at]
    assert base.load <= 37 < base.broke_at and stack.load <= 50 < stack.broke_at
    assert capacity.resolution == RESOLUTION and capacity.at_least == [] and capacity.gain_pct() is not None
    dumped = capacity.model_dump(mode="json")
    assert {"baseline_bracket", "stack_bracket", "resolution", "at_least", "at_ceiling", "baseline_broke_at"} <= set(dumped)
    assert CapacityAtSlo.model_validate(dumped) == capacity


def test_a_failed_probe_is_a_broken_one_and_a_lost_server_ends_the_search() -> None:
    def meets(load: float) -> Probe:
        if load >= 32:
            return Probe(load=load, met=False, why="its round failed (server_gone)", failed=True, last=True)
        return Probe(load=load, met=True, why="fine")

    found = find_capacity(meets, 16, "concurrency", MAX_PROBES)
    assert [p.load for p in found.probes] == [16, 32] and (found.load, found.broke_at) == (16, 32)
    text = capacity_text(capacity_result(TARGET, found, None))
    assert "16 concurrent streams within it (32 broke it: its round failed (server_gone))" in text


class FailingHost:
    """A host whose every probe round fails the way `error` says; it records each round's limit."""

    def __init__(self, error: Exception):
        self.error, self.limits = error, []

    def measure(self, bench, base_url, served_model, workload, vocab_size, repeats, timeout_s=None, **_) -> None:
        self.limits.append((workload.concurrency, timeout_s))
        raise self.error


def _probe_with(host: FailingHost, rows: list) -> Capacity | None:
    contract = WorkloadContract(workload=TARGET.workload, vocab_size=1000, max_model_len=4096, num_prompts=40,
                                warmups=4, repeats=2)
    baseline = SimpleNamespace(contract=contract, context_key="ctx", measuring_s=10.0,
                               measurement=SimpleNamespace(completed=40))
    context = SimpleNamespace(partition_key="sim", run=SimpleNamespace(run_id="run"), log=logging.getLogger("t"))
    launch = SimpleNamespace(base_url="http://127.0.0.1:9", served_model="m", argv=["sim"], evidence=None,
                             log_path="server.log", cpus=None)
    store = SimpleNamespace(record_measurement=lambda **row: rows.append(row))
    spec = ServerSpec(engine="sim", model=TARGET.model, server_args=["--gpu", "H100"])
    return measure_capacity(context, TARGET, host, None, store, baseline, spec, launch, Path("/nonexistent"),
                            "baseline")


def test_a_probe_round_that_fails_counts_as_broken_with_its_reason_instead_of_dropping_the_side() -> None:
    found = _probe_with(FailingHost(RoundFailed("connection_dropped", "4 of 40 capacity requests failed")), [])
    assert found is not None, "the side is measured: it broke"
    [probe] = found.probes  # the server's state is unknown after a failed round: no further probe
    assert probe.failed and not probe.met and probe.why.startswith("its round failed (connection_dropped: 4 of 40")
    assert (found.load, found.broke_at) == (0, TARGET.workload.concurrency)


def test_each_probe_round_has_a_time_limit_from_the_baselines_pace_and_an_overtime_is_a_broken_probe() -> None:
    rows: list = []
    host = FailingHost(BenchOvertime(99.0, 99.0, "the caller's limit"))
    found = _probe_with(host, rows)
    assert [p.load for p in found.probes] == [4, 2, 1] and all(p.failed and "overtime" in p.why for p in found.probes)
    per_request = 10.0 / (2 * 40 + 4)  # the baseline's measuring over its requests
    for concurrency, limit in host.limits:
        requests = probe_prompts(concurrency, "concurrency", 50, 40) + min(concurrency, 8)
        assert limit == pytest.approx(probe_limit_s(10.0, 84, requests, 4, concurrency))
        assert limit == pytest.approx(PROBE_LIMIT_FACTOR * per_request * requests * 4 / concurrency
                                      + 2 * ROUND_ALLOWANCE_S)
    assert len(rows) == 3 and all(row["error"].startswith("overtime") for row in rows), "each stored as a failure"


def _arrivals(achieved: float, queue_end: float = 0.0, n: int = 400) -> ArrivalLoad:
    return ArrivalLoad(offered_rate=10.0, achieved_rate=achieved, sessions=n, queue_start=0.5, queue_end=queue_end)


def test_a_rate_probe_breaks_when_its_client_sends_short_of_the_offered_rate_beyond_the_noise() -> None:
    assert rate_shortfall(_arrivals(9.6, n=2000)) is None  # 4% short over 2,000: within 5%
    assert rate_shortfall(_arrivals(9.4, n=2000)).startswith("the client sent 9.4 req/s of the 10 offered "
                                                             "(more than 5% short over 2000 requests)")
    assert rate_shortfall(_arrivals(8.9, n=299)) is None  # 2/sqrt(299) = 11.6%: noise
    assert rate_shortfall(_arrivals(8.7, n=299)) is not None


def test_a_rate_probe_breaks_when_its_clients_queue_grows_over_the_round() -> None:
    assert rate_shortfall(_arrivals(10.0, queue_end=20.0)) is None  # 19.5 more of 400: under 5%
    assert rate_shortfall(_arrivals(10.0, queue_end=21.0)).startswith("the client's queue grew from 0.5 to 21.0")


def test_the_clients_queue_is_read_off_each_sessions_arrival_and_send() -> None:
    # Eight sessions due every 0.1 s, one slot, 0.25 s a request: each waits longer than the last.
    due = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    sent = [0.1, 0.35, 0.6, 0.85, 1.1, 1.35, 1.6, 1.85]
    records = [RequestRecord(ok=True, prompt_tokens=1, output_tokens=1, arrival_s=a, start_s=s)
               for a, s in zip(due, sent)]
    load = arrival_load(records, 10.0)
    assert load.sessions == 8 and load.achieved_rate == pytest.approx(8 / 1.85)
    assert (load.queue_start, load.queue_end) == (0.0, 3.5)  # arrivals 1-2 see 0 and 0 waiting, 7-8 see 3 and 4
    assert arrival_load([RequestRecord(ok=True, prompt_tokens=1)], 10.0) is None


def test_an_ordinary_rate_round_whose_client_fell_behind_is_said_in_the_log(caplog) -> None:
    behind = ArrivalLoad(offered_rate=10.0, achieved_rate=4.0, sessions=100, queue_start=0.0, queue_end=30.0)
    round_ = RepeatMetrics(output_throughput=1.0, request_throughput=1.0, ttft_p50_ms=1, ttft_p99_ms=1, tpot_p50_ms=1,
                           itl_p50_ms=1, e2el_p50_ms=1, completed=100, duration_s=25.0, arrivals=behind)
    host = SimpleNamespace(measure=lambda *args, **kwargs: summarize([round_]))
    launch = SimpleNamespace(base_url="http://127.0.0.1:9", served_model="m", cpus=None)
    contract = WorkloadContract(workload=TARGET.workload, vocab_size=1000, max_model_len=4096, num_prompts=100,
                                warmups=0, repeats=1)
    spec = ServerSpec(engine="sim", model=SIM_MODEL, server_args=["--gpu", "H100"])
    with caplog.at_level(logging.WARNING):
        _contract_rounds(host, None, launch, spec, contract, TARGET.workload, Path("/nonexistent"), "trial x", None,
                         None)
    assert "trial x: repeat 1: the client sent 4 req/s of the 10 offered" in caplog.text
