"""benchmarks/demo_time.py reads the demo's own words and its report, not a typed figure."""

from __future__ import annotations

from benchmarks.demo_time import BUDGET_S, read_demo

LOG = ('  2026-12-05 04:24:47 +0000 - dagster - DEBUG - optimize_job - c364 - 14482 - profile - STEP_SUCCESS - '
       'Finished execution of step "profile" in 2m4s.\n'
       "optimize_job for tiny-llama-cpu: succeeded in 947 s\n\n"
       "tiny-llama-cpu: 580.5 -> 2467.1 output tok/s (+296.9%), stop reason: budget_exhausted, 12 server launches\n")
REPORT = {"launches": {"baseline": 1, "profile": 1, "trial": 4, "best_relaunch": 2, "validate": 4},
          "validated_gain_pct": 296.9, "validated_gain_ci_low": 189.1, "validated_gain_ci_high": 445.0,
          "stop_reason": "budget_exhausted"}


def test_the_job_time_headline_and_launches_come_from_the_run() -> None:
    result = read_demo(LOG, REPORT)
    assert result["job_s"] == 947 > BUDGET_S and result["within_budget"] is False
    assert result["headline"].startswith("tiny-llama-cpu: 580.5 -> 2467.1") and result["launch_count"] == 12
    assert result["step_times"] == {"profile": "2m4s"} and result["validated_gain_ci"] == [189.1, 445.0]
