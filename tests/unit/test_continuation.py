"""The anytime continuation: past the rule plan, Optuna's sampler proposes configs the climb judges."""

from __future__ import annotations

import itertools
import random
from types import SimpleNamespace

import pytest

from hyperloom_assets.assets.stops import record_stop
from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.decisions.climb import Budget, Checks, TrialMeasurement, climb, launched_changes
from hyperloom_assets.core.decisions.ledger import MemoryLedger
from hyperloom_assets.core.engines.registry import engine_flags_for, grid_engine, harness_flags_for
from hyperloom_assets.core.planning.continuation import Continuation
from hyperloom_assets.core.planning.continuation_space import knob_space, point_of, point_variant
from hyperloom_assets.core.planning.planner import PlanEvidence, base_for
from hyperloom_assets.core.planning.seed_grids import load_grids
from hyperloom_assets.core.planning.variants import compose, effective_settings, setting_key
from hyperloom_assets.resources.store.results import ResultStore

OPERATOR = ["--max-num-seqs", "16", "--max-num-batched-tokens", "2048", "--enforce-eager",
            "--gpu-memory-utilization", "0.85"]
WORKLOAD = Workload(kind="random", isl=1024, osl=256, concurrency=128, num_prompts=384)
BASE = [100.0, 101.0, 99.0]


@pytest.fixture(scope="module")
def space():
    grid = load_grids()[grid_engine("sim", "vllm")]
    base = base_for(grid, OPERATOR, {}, WORKLOAD, PlanEvidence())
    return knob_space(base, {setting_key(f) for f in harness_flags_for("sim")}, engine_flags_for("sim", "vllm"))


def argv_of(keepers, variant) -> list[str]:
    return compose(OPERATOR, {}, launched_changes(keepers, variant)).argv


def level(argv: list[str]) -> float:
    """A landscape with an interaction: the token budget pays only once the cap is raised."""
    settings = effective_settings(argv)
    cap = int(settings.get("--max-num-seqs", ("", "256"))[1] or 256)
    budget = int(settings.get("--max-num-batched-tokens", ("", "8192"))[1] or 8192)
    eager = "--enforce-eager" in settings
    value = 100.0 * min(cap, 128) / 16 ** 0.5 / 128 ** 0.5 * 4
    if cap >= 64:
        value *= 1 + 0.1 * min(budget, 8192) / 8192
    return value * (0.9 if eager else 1.0)


def physics(flat: bool = False):
    draws = itertools.count()

    def measure(keepers, variant) -> TrialMeasurement:
        argv = argv_of(keepers, variant)
        rng = random.Random(next(draws))
        mean = 100.0 if flat else level(argv)
        offset = rng.gauss(0, 0.01)
        return TrialMeasurement(throughputs=[mean * (1 + offset + rng.gauss(0, 0.005)) for _ in range(3)],
                                measuring_s=1.0, argv=argv)

    return measure


def one_variant_plan(space):
    cap = next(o for knob in space.knobs for o in knob.options if o.name == "max-num-seqs=32")
    return lambda keepers, tried: [cap] if not keepers else []


def run(space, measure, max_trials: int, ledger: MemoryLedger | None = None, more: bool = True):
    checks = Checks(more=Continuation(space, "tpe") if more else None)
    return climb(BASE, 1.0, Budget(max_trials=max_trials, target_gain_pct=1e6), one_variant_plan(space), measure,
                 ledger or MemoryLedger(), checks=checks)


def test_a_point_launched_on_the_running_best_reads_back_as_that_point(space) -> None:
    rng = random.Random(3)
    sizes = [len(k.options) + 1 for k in space.knobs]
    assert len(space.knobs) >= 5
    for _ in range(30):
        current, target = (tuple(rng.randrange(n) for n in sizes) for _ in range(2))
        if current == target:
            continue
        here = compose(OPERATOR, {}, [point_variant(space, (0,) * len(sizes), current, "tpe", "")]).argv \
            if any(current) else list(OPERATOR)
        assert point_of(space, here, {}) == current
        there = compose(here, {}, [point_variant(space, current, target, "tpe", "")]).argv
        assert point_of(space, there, {}) == target


def test_the_continuation_takes_the_climb_past_the_spent_plan(space) -> None:
    plain = run(space, physics(), max_trials=10, more=False)
    assert [t.name for t in plain.trials] == ["max-num-seqs=32"] and plain.stop_reason == "no_more_candidates"
    result = run(space, physics(), max_trials=10)
    assert len(result.trials) == 10 and result.stop_reason == "budget_exhausted"
    assert result.trials[0].variant.trial_provenance() == "rules"
    assert {t.variant.trial_provenance() for t in result.trials[1:]} == {"continuation:tpe"}
    assert all(t.name.startswith("continuation:tpe: ") and "warm-started with" in t.variant.reason
               for t in result.trials[1:])
    assert result.best_gain_pct() > plain.best_gain_pct() + 10
    points = [point_of(space, t.argv, {}) for t in result.trials]
    assert len(set(points)) == len(points) and point_of(space, OPERATOR, {}) not in points, "every proposal is new"


def test_a_re_executed_run_replays_every_continuation_trial_from_the_ledger(space) -> None:
    ledger = MemoryLedger()
    first = run(space, physics(), max_trials=6, ledger=ledger)

    def never(keepers, variant):
        raise AssertionError("a replayed run measured again")

    again = run(space, never, max_trials=6, ledger=ledger)
    assert [t.fingerprint for t in again.trials] == [t.fingerprint for t in first.trials]
    assert all(t.replayed for t in again.trials)


@pytest.mark.stop_reason("expected_gain_below_noise", case="regret_bound")
def test_on_a_flat_space_the_climb_stops_on_evidence(space, tmp_path) -> None:
    result = run(space, physics(flat=True), max_trials=60)
    assert result.stop_reason == "expected_gain_below_noise", result.stop_reason
    assert 11 <= len(result.trials) < 60  # the baseline and 11 trials: 12 configs
    context = SimpleNamespace(partition_key="sim", run=SimpleNamespace(run_id="flat"),
                              log=SimpleNamespace(info=lambda *a: None, warning=lambda *a: None))
    # Stored as the trials asset stores its climb's stop (assets/trials.py: record_stop).
    record_stop(context, ResultStore(url=f"sqlite:///{tmp_path / 'results.db'}"), result.stop_reason,
                f"{len(result.trials)} trial(s)")


def test_an_unknown_sampler_is_refused_by_name(space) -> None:
    with pytest.raises(ValueError, match="'bo'.*tpe, gp"):
        Continuation(space, "bo")


def test_the_parallel_climb_goes_on_past_its_plan_too(space) -> None:
    from hyperloom_assets.core.decisions.parallel import climb_parallel

    result = climb_parallel(BASE, 1.0, Budget(max_trials=4, target_gain_pct=1e6), one_variant_plan(space), physics(),
                            MemoryLedger(), slots=2, checks=Checks(more=Continuation(space, "tpe")))
    assert len(result.trials) == 4 and result.stop_reason == "budget_exhausted"
    assert [t.variant.trial_provenance() for t in result.trials] == ["rules"] + ["continuation:tpe"] * 3


def test_a_gp_continuation_without_torch_is_refused_by_field(monkeypatch) -> None:
    import importlib.util

    from pydantic import ValidationError

    from hyperloom_assets.core.config.targets import Target

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    fields = dict(engine="sim", model="models/llama-3-8b", workload=WORKLOAD.model_dump())
    with pytest.raises(ValidationError, match="continuation: gp needs torch"):
        Target(**fields, continuation="gp")
    assert Target(**fields, continuation="tpe").continuation == "tpe"
    assert Target(**fields, continuation=False).continuation == "off", "YAML's bare off"


def test_when_the_plans_moves_keep_breaking_an_slo_the_best_breaks_the_continuation_goes_first(space) -> None:
    # TPOT holds only with the cap raised and eager mode dropped together: no single move from the
    # operator's config meets it. After three such moves broke it, the sampler proposes first.
    from hyperloom_assets.core.config.targets import TargetSlo
    from hyperloom_assets.core.decisions.climb import SloCheck
    from tests.unit.test_climb_slo import latency

    slo = TargetSlo(tpot_ms=30, percentile=95)
    base = physics()

    def measure(keepers, variant) -> TrialMeasurement:
        found = base(keepers, variant)
        settings = effective_settings(found.argv)
        meets = "--enforce-eager" not in settings and settings.get("--max-num-seqs", ("", "256"))[1] != "16"
        return found.model_copy(update={"latency": latency(20.0 if meets else 60.0)})

    singles = [o for knob in space.knobs for o in knob.options][:8]
    more = Continuation(space, "tpe", slo, latency(60.0))
    result = climb(BASE, 1.0, Budget(max_trials=12, target_gain_pct=1e6), lambda keepers, tried: singles, measure,
                   MemoryLedger(), checks=Checks(slo=SloCheck(slo, latency(60.0)), more=more))
    provenance = [t.variant.trial_provenance() for t in result.trials]
    assert provenance[:3] == ["rules"] * 3 and all(t.decision.reason.startswith("slo_missed") for t in result.trials[:3])
    assert provenance[3] == "continuation:tpe", "the plan had five moves left"
    kept = [t for t in result.trials if t.outcome == "KEEP"]
    assert kept and kept[0].decision.reason.startswith("slo_reached"), [t.decision.reason[:60] for t in result.trials]
