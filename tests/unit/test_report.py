"""Report rendering: every section, the numbers given, and every flagged measurement warned."""

from __future__ import annotations

from hyperloom_assets.core.decisions.climb import TrialRecord
from hyperloom_assets.core.decisions.rule import Decision, Outcome
from hyperloom_assets.core.measurement.measurement import RepeatMetrics
from hyperloom_assets.core.measurement.metrics import summarize
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.releases.run import ReleaseCheck
from hyperloom_assets.core.report.markdown import ReportInputs, render_markdown, run_measurement_warnings
from hyperloom_assets.core.roofline.roofline import Achieved

SECTIONS = ("# Optimization report", "## Roofline", "## Trials", "## Stack", "## Concurrency sweep", "## Reproduce",
            "## Launch evidence", "## Environment", "## Warnings")


def measurement(throughput: float, saturated: bool = False):
    repeat = RepeatMetrics(output_throughput=throughput, request_throughput=1.0, ttft_p50_ms=10, ttft_p99_ms=20,
                           tpot_p50_ms=2.0, itl_p50_ms=2.0, e2el_p50_ms=100, completed=8, duration_s=1.0)
    return summarize([repeat, repeat.model_copy(update={"output_throughput": throughput * 1.01})],
                     client_saturated=saturated)


def inputs(**extra) -> ReportInputs:
    cap = Variant(name="max-num-seqs=16", add_args=["--max-num-seqs", "16"], provenance="seed_grid", reason="cap")
    trial = TrialRecord(index=1, name=cap.name, fingerprint="abc123", variant=cap, against="baseline",
                        decision=Decision(outcome=Outcome.KEEP, gain_pct=80.0, ci_low_pct=70.0, ci_high_pct=90.0,
                                          reason="kept"), measurements=2, launches=[[180.0, 181.0], [179.0, 182.0]],
                        best_launches=[[100.0, 101.0]])
    reached = Achieved(achieved_tok_s=100.0, ceiling_tok_s=1000.0, achieved_pct=10.0, achieved_pct_ci_low=9.0,
                       achieved_pct_ci_high=11.0, binding="memory")
    row = {"config": "baseline", "concurrency": 4, "output_throughput": 100.0, "tpot_p50_ms": 2.0,
           "interactivity": 500.0, "ttft_p50_ms": 10.0}
    fields = dict(target="t", baseline=measurement(100.0), baseline_argv=["python", "-m", "vllm", "--max-num-seqs", "2"],
                  baseline_env={"A": "1"}, baseline_run_id="run-1", launch_evidence={"max_num_seqs": 2},
                  final_output_throughput=180.5, validated_gain_pct=80.5, validated_gain_ci_low=75.0,
                  validated_gain_ci_high=86.0, validated=True, final_argv=["python", "-m", "vllm", "--max-num-seqs", "16"],
                  final_env={"A": "1"}, stop_reason="target_reached", roofline_before=reached,
                  roofline_after=reached.model_copy(update={"achieved_tok_s": 180.5, "achieved_pct": 18.05}),
                  roofline_explanation="memory-bound", trials=[trial], keepers=[cap.name], conflicts=[],
                  sweep_rows=[row, {**row, "config": "stack"}], plots=["p.png"], environment={"engine": "vllm"},
                  warnings=[])
    fields.update(extra)
    return ReportInputs(**fields)


def test_every_section_and_the_given_numbers() -> None:
    text = render_markdown(inputs())
    for section in SECTIONS:
        assert section in text
    assert "**100.5 → 180.5 output tok/s**" in text and "+80.50%" in text and "[+75.00%, +86.00%]" in text
    assert "| 2 + 1 best |" in text, "a trial's launches count the best's relaunches beside it"
    assert "abc123" in text and "--max-num-seqs 16" in text and "A=1 python -m vllm --max-num-seqs 2" in text
    assert "`target_reached`" in text


def test_release_section_only_on_a_release_run() -> None:
    assert "## Release" not in render_markdown(inputs())
    check = ReleaseCheck(release="vllm==0.33.0", holds=False, summary="regression: ... -3.00% ...", gain_pct=-3.0,
                         ci_low=-4.0, ci_high=-2.0, previous_gain_pct=10.0)
    assert "REGRESSION" in render_markdown(inputs(release_check=check))


def test_flagged_measurements_of_the_run_are_warned_and_others_not() -> None:
    rows = [
        {"id": 1, "run_id": "r", "kind": "validation", "fingerprint": None, "measurement": measurement(100, True).model_dump()},
        {"id": 2, "run_id": "r", "kind": "sweep", "fingerprint": None, "measurement": measurement(100).model_dump()},
        {"id": 3, "run_id": "other", "kind": "trial", "fingerprint": "f", "measurement": measurement(100, True).model_dump()},
        {"id": 4, "run_id": "r", "kind": "trial", "fingerprint": "f", "measurement": None},
    ]
    warnings = run_measurement_warnings(rows, "r")
    assert warnings == ["validation measurement 1: the benchmark client was saturated; the server may be faster than measured"]


def test_the_profile_section_shows_the_shares_and_top_ops_or_why_there_is_none() -> None:
    from pathlib import Path

    from hyperloom_assets.core.profile.trace import reduce_trace
    from hyperloom_assets.core.results import ProfileResult

    trace = Path(__file__).parents[1] / "fixtures" / "profiles" / "vllm_cpu_tiny.pt.trace.json.gz"
    profile = ProfileResult(engine="vllm", taken=True, summary=reduce_trace(trace), trace_path=str(trace))
    text = render_markdown(inputs(profile=profile))
    section = text[text.index("## Where the time goes"):text.index("## Trials")]
    assert "vllm's torch profiler" in section and str(trace) in section
    assert f"| gemm | {profile.summary.shares_pct['gemm']:.2f}% |" in section
    assert "`_C::onednn_mm`" in section and section.count("| `") == 10, "the top ten ops"
    missing = render_markdown(inputs(profile=ProfileResult(engine="sim", taken=False, reason="no trace written")))
    assert "No profile was taken: no trace written" in missing
    assert "## Where the time goes" not in render_markdown(inputs()), "no profile asset, no section"


def test_a_release_regression_needs_the_intervals_apart() -> None:
    from hyperloom_assets.core.releases.run import stack_verdict
    before = (330.3, 290.0, 372.0)
    assert stack_verdict(before, 286.1, 251.4, 324.3)[0], "overlapping intervals: noise, the stack holds"
    holds, sentence = stack_verdict(before, 200.0, 180.0, 230.0)
    assert not holds and "gains less" in sentence and "[+290.00%, +372.00%] before" in sentence
    holds, sentence = stack_verdict(before, -3.0, -4.0, -2.0)
    assert not holds and "slower than the baseline" in sentence
