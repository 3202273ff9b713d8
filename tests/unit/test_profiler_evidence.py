"""Each engine shares the baseline's server with its profile only on committed evidence.

`Profiler.free_when_idle` lets the baseline's own server carry the profiler, saving a
launch; benchmarks/profiler_configured.py measures whether a configured, idle profiler
slows the measured rounds. These tests hold every engine's flag to the verdict its
committed result states, and that verdict to the rule the benchmark applies.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.profiler_configured import MARGIN_PCT, verdict_of
from hyperloom_assets.core.engines.registry import engine_for, engine_names

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def committed_verdicts() -> dict[str, list[dict]]:
    """engine name -> its profiler_configured results."""
    by_engine: dict[str, list[dict]] = {}
    for path in sorted(RESULTS.glob("profiler_configured_*.json")):
        results = json.loads(path.read_text())["results"]
        by_engine.setdefault(results["engine"], []).append(results)
    return by_engine


@pytest.mark.parametrize("name", engine_names())
def test_free_when_idle_only_where_a_committed_result_says_not_slowed(name):
    profiler = engine_for(name).profiler
    if profiler is None:
        pytest.skip(f"{name} has no profiler")
    results = committed_verdicts().get(name, [])
    shown_free = bool(results) and all(r["verdict"] == "not slowed" for r in results)
    assert profiler.free_when_idle == shown_free, (
        f"{name}: free_when_idle={profiler.free_when_idle} but its committed results say "
        f"{[r['verdict'] for r in results] or 'nothing'}")


def test_committed_verdicts_follow_the_benchmarks_rule():
    for engine, results in committed_verdicts().items():
        for r in results:
            assert r["margin_pct"] == MARGIN_PCT, engine
            assert r["verdict"] == verdict_of(r["ci_low_pct"], r["ci_high_pct"]), engine


def test_non_inferiority_needs_the_whole_interval_above_the_margin():
    assert verdict_of(-1.5, 1.4) == "not slowed"
    assert verdict_of(-44.0, 32.0) == "inconclusive"  # wide: a 44% slowdown is not ruled out
    assert verdict_of(-12.0, -2.0) == "slowed"
    assert verdict_of(-MARGIN_PCT, 3.0) == "inconclusive"
