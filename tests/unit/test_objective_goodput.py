"""The goodput objective: rounds compared on the requests per second that met the SLO instead of
output tok/s, in the climb, the validation and the trials table; a target asking for it without
an SLO is refused by name; its ledger context is its own."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hyperloom_assets.core.config.identity import server_config_version
from hyperloom_assets.core.config.targets import TargetSlo, parse_target
from hyperloom_assets.core.decisions.climb import Budget, Checks, SloCheck, TrialMeasurement, climb
from hyperloom_assets.core.decisions.ledger import MemoryLedger
from hyperloom_assets.core.measurement.measurement import RepeatMetrics
from hyperloom_assets.core.measurement.metrics import summarize
from hyperloom_assets.core.measurement.objective import (
    decision_goodput,
    goodputs_if_measured,
    mean_goodput,
    repeat_values,
)
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.report.rendering import trials_markdown
from tests.conftest import SIM_MODEL
from tests.unit.test_climb_slo import latency

SLO = TargetSlo(ttft_ms=2000, percentile=95)


def round_of(tok_s: float, goodput: float | None, duration_s: float = 10.0) -> RepeatMetrics:
    return RepeatMetrics(output_throughput=tok_s, request_throughput=1.0, ttft_p50_ms=1, ttft_p99_ms=1, tpot_p50_ms=1,
                         itl_p50_ms=1, e2el_p50_ms=1, completed=10, duration_s=duration_s, goodput=goodput)


def test_a_round_is_read_in_the_objectives_values_and_none_within_the_slo_still_compares() -> None:
    m = summarize([round_of(100, 2.0), round_of(110, 0.0, duration_s=5.0)])
    assert repeat_values(m, "throughput") == [100, 110]
    assert repeat_values(m, "goodput") == [2.0, 0.1], "no request within the SLO: half a request over the round"
    assert decision_goodput(round_of(1, 0.2)) == 0.2, "the floor only lifts a round below half a request"
    assert goodputs_if_measured(summarize([round_of(100, None)])) == []
    assert mean_goodput(m) == pytest.approx(1.05) and mean_goodput(summarize([round_of(100, None)])) is None
    with pytest.raises(ValueError, match="without an slo"):
        repeat_values(summarize([round_of(100, None)]), "goodput")


# Two knobs: the big batch gains output tok/s but queues requests past the SLO (fewer good ones);
# the small batch loses tok/s and serves more requests within it.
LEVELS = {"big batch": (160.0, 1.0), "small batch": (80.0, 3.0)}
BIG = Variant(name="big batch", add_args=["--max-num-seqs", "64"], provenance="search_space", reason="test")
SMALL = Variant(name="small batch", add_args=["--max-num-seqs", "8"], provenance="search_space", reason="test")


def measure(keepers: list[Variant], v: Variant | None) -> TrialMeasurement:
    tok_s, good = 100.0, 2.0
    for knob in [*keepers, *([v] if v else [])]:
        tok_s, good = LEVELS[knob.name]
    return TrialMeasurement(throughputs=[tok_s, tok_s + 1, tok_s - 1], goodputs=[good, good * 1.01, good * 0.99],
                            measuring_s=1.0, latency=latency(10))


def run_on(objective: str):
    checks = Checks(slo=SloCheck(SLO, latency(10), objective))
    base = [2.0, 2.02, 1.98] if objective == "goodput" else [100.0, 101.0, 99.0]
    return climb(base, 1.0, Budget(max_trials=5, target_gain_pct=500.0), lambda keepers, tried: [BIG, SMALL], measure,
                 MemoryLedger(), checks=checks)


def test_the_climb_keeps_what_gains_goodput_where_that_is_the_objective() -> None:
    by_goodput = run_on("goodput")
    big, small = by_goodput.trials[0], by_goodput.trials[1]
    assert big.outcome == "REVERT" and big.decision.gain_pct < -40, big.decision.reason
    assert small.outcome == "KEEP" and small.decision.gain_pct > 40, small.decision.reason
    assert small.objective == "goodput" and small.mean == pytest.approx(3.0)
    assert small.output_throughput == pytest.approx(80.0), "the table's tok/s stays tok/s"
    by_throughput = run_on("throughput")
    assert [t.outcome for t in by_throughput.trials[:1]] == ["KEEP"], "on tok/s the big batch wins"
    text = trials_markdown(by_goodput.trials)
    assert "| goodput gain |" in text and "good req/s" in text and "| 3.000 |" in text, text


def test_goodput_without_an_slo_is_refused_naming_the_field(tmp_path: Path) -> None:
    folder = tmp_path / "targets"
    folder.mkdir()
    file = folder / "t.yaml"
    file.write_text(yaml.safe_dump({"engine": "sim", "model": str(SIM_MODEL), "objective": "goodput",
                                    "workload": {"kind": "random", "isl": 8, "osl": 8, "concurrency": 1}}))
    target, problems = parse_target(file)
    assert target is None and [p.field for p in problems] == ["objective"], problems
    assert "an slo to count goodput against" in problems[0].expected
    body = yaml.safe_load(file.read_text()) | {"slo": {"ttft_ms": 500}}
    file.write_text(yaml.safe_dump(body))
    on_goodput, problems = parse_target(file)
    assert problems == []
    on_throughput = on_goodput.model_copy(update={"objective": "throughput"})
    tighter = on_goodput.model_copy(update={"slo": TargetSlo(ttft_ms=400)})
    assert server_config_version(on_throughput) == server_config_version(
        on_throughput.model_copy(update={"slo": None})), "the default objective keeps earlier versions"
    assert len({server_config_version(t) for t in (on_throughput, on_goodput, tighter)}) == 3, \
        "goodput's launches are its own evidence, under its own limits"
    from hyperloom_assets.assets.trials import target_noise_key
    assert target_noise_key(on_goodput, "sim-1") == target_noise_key(on_throughput, "sim-1") + "|goodput", \
        "and so is its launch noise"


def test_the_validation_compares_the_objectives_launches() -> None:
    from hyperloom_assets.assets.optimization_stack import Validation, compared

    both = Validation(base=[[100.0]], top=[[200.0]], base_goodputs=[[2.0]], top_goodputs=[[1.0]])
    assert compared(both, "goodput") == ([[1.0]], [[2.0]]), "more tok/s, fewer requests within the SLO"
    assert compared(both, "throughput") == ([[200.0]], [[100.0]])
    with pytest.raises(ValueError, match="counted no goodput"):
        compared(Validation(base=[[100.0]], top=[[200.0]]), "goodput")
