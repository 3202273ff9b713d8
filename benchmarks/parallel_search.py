"""Parallel search: how soon a climb over 1, 2, 4 and 8 slots reaches the attainable gain, on sim spaces.

Each scenario is a search-quality space (benchmarks/support/quality_scenarios.py: its grid,
its noise-free truths, cached). The climb is the trials asset's (run_offline_climb, every
plan narrowed to the space) with `slots` slots (core/decisions/parallel.py), on the space's
noisy launches (search_space.Launches) until LAUNCHES launches are spent. Time is a GPU
host's, on a virtual clock, not this machine's: a launch takes STARTUP_S (a large model's
start, 3-10 minutes on real GPUs) plus its warm-up and measured rounds (the sim's predicted
round durations), and is measured by sleeping SCALE real seconds per virtual second, so
launches on several slots overlap as they would on a host and the climb's own thinking
counts too (scaled up: a few virtual seconds per plan). The clock starts when the baseline's
launch ends, where the climb starts: the baseline, like the validation, the sweep and the
report, is one launch at a time whatever the slots, so it is the search the slots speed up.
The stack counts from the moment the trial that made it settles.

Per scenario and slots, over SEEDS seeds: the virtual hours of search to reach 95% of the
attainable gain (the seed's median; a seed that never reaches it counts as never), its ratio
to one slot's, and the share of the attainable gain at equal launches (10, 20 and 40, the
baseline's included). `baseline_hours` is the baseline's launch, before the clock starts. The goal
(`target_met`): with 4 slots, a median share at 40 launches within 0.05 of one slot's, in at
most 40% of one slot's time to 95%, on every scenario where one slot reaches 95%.

The real-graph row (`graph`, benchmarks/support/parallel_graph.py) runs the assets themselves on a
sim host that declares 4 devices, at least 8 trials: the `trials` step's wall time with
`parallel_trials` 4 against 1, and each run's validated gain with its 95% interval. Its goal: 4
slots finish the trials step in at most half the serial wall time, each run's validated gain
within the other's interval. On a small machine the CPU bounds it (the launches' starts and
clients); `--graph-time-scale` sets the sim's clock, low enough that the servers mostly wait.

    .venv/bin/python benchmarks/parallel_search.py [--seeds 3] [--scenarios 2] [--graph with|only|without]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from benchmarks.support.offline_climb import run_offline_climb  # noqa: E402
from benchmarks.support.parallel_graph import HALF, MIN_TRIALS, TIME_SCALE, graph_row  # noqa: E402
from benchmarks.support.quality_scenarios import cached_space, grid_scenarios, synthetic_trace_file  # noqa: E402
from benchmarks.support.results import start_run, write_results  # noqa: E402
from benchmarks.support.search_space import LaunchBudgetSpent, Launches, Noise, Space  # noqa: E402
from benchmarks.support.staleness import OFFLINE_CLIMB  # noqa: E402
from hyperloom_assets.core.decisions.climb import launched_changes  # noqa: E402
from hyperloom_assets.core.decisions.trial_record import TrialRecord  # noqa: E402
from hyperloom_assets.core.planning.stack import composition  # noqa: E402
from hyperloom_assets.core.planning.variants import Variant  # noqa: E402
from hyperloom_assets.sim.perf_model import SimConfigError  # noqa: E402

# The source paths whose code this benchmark measures: its result is stale once one changes
# (benchmarks/support/staleness.py).
EXERCISES = OFFLINE_CLIMB + (
    "benchmarks/support/quality_scenarios.py", "benchmarks/support/search_space.py", "benchmarks/support/sim_grid.py",
    "benchmarks/support/launch_noise.py",
    # the real-graph row: the assets, the hosts and slots, the client, the sim server
    "hyperloom_assets/assets/", "hyperloom_assets/resources/hosts/", "hyperloom_assets/resources/bench/", "hyperloom_assets/resources/measure.py",
    "hyperloom_assets/core/fleet/", "hyperloom_assets/sim/", "benchmarks/support/parallel_graph.py")

SLOTS = (1, 2, 4, 8)
LAUNCHES = 40
BUDGETS = (10, 20, 40)
STARTUP_S = 300.0
SCALE = 2e-3  # real seconds per virtual second: a 2000 s launch sleeps 4 s, a plan's 0.05 s reads 25 s
SHARE_GOAL, TIME_GOAL, SHARE_SLACK = 0.95, 0.40, 0.05


class ClockedLaunches(Launches):
    """The space's launches from several threads at once, each taking its time on the virtual clock:
    a real sleep of SCALE seconds per virtual second, so concurrent launches overlap as on a host."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()
        self.climb_started: float | None = None  # when the baseline's launch (or launches) ended
        self.baseline_s = 0.0  # the first launch, on the virtual clock

    def start_climb(self) -> None:
        self.climb_started = time.monotonic()

    def measurement(self, argv: list[str]):
        with self.lock:
            try:
                m = super().measurement(argv)
            except SimConfigError:
                refused = True
            else:
                refused = False
        took_s = STARTUP_S if refused else launch_s(m)
        time.sleep(SCALE * took_s)
        if self.baseline_s == 0.0:
            self.baseline_s = took_s
        if refused:
            raise SimConfigError(f"the engine refuses {' '.join(argv)}")
        return m


def launch_s(m) -> float:
    """A launch on the virtual clock: the start, then a warm-up as long as a round, then its rounds."""
    rounds = [r.duration_s for r in m.repeats]
    return STARTUP_S + sum(rounds) * (len(rounds) + 1) / len(rounds)


class Timeline(list):
    """The climb's settled trials (its history), each noted with the virtual time since the climb
    started (the baseline's launch ended) and the launches spent, the baseline's included."""

    def __init__(self, space: Space, launches: ClockedLaunches):
        super().__init__()
        self.space, self.launches = space, launches
        self.keepers: list[Variant] = []
        self.points = [(0.0, 1, space.share(space.baseline_argv))]

    def append(self, trial: TrialRecord) -> None:
        super().append(trial)
        if trial.outcome == "KEEP":
            self.keepers.append(trial.variant)
        at = (time.monotonic() - self.launches.climb_started) / SCALE
        argv = composition(self.space.scenario.target(), self.keepers).argv
        self.points.append((at, self.launches.count, self.space.share(argv)))


def one_climb(space: Space, noise: Noise, seed: int, slots: int) -> tuple[list[tuple[float, int, float]], float]:
    """The climb's (virtual seconds of search, launches, share) after each settled trial; the baseline's seconds."""
    scenario = space.scenario.model_copy(update={"max_trials": 10_000, "target_gain_pct": 1e9})
    target = scenario.target()
    launches = ClockedLaunches(space, noise, seed, LAUNCHES)

    def admits(keepers: list[Variant], variant: Variant) -> bool:
        return space.contains(composition(target, launched_changes(keepers, variant)).argv)

    history = Timeline(space, launches)
    try:
        run_offline_climb(scenario, seed, launcher=lambda _, argv, __: launches.measurement(argv), admits=admits,
                          history=history, slots=slots, on_climb=launches.start_climb)
    except LaunchBudgetSpent:
        pass  # the trials in flight when the budget ran out decided nothing
    return history.points, launches.baseline_s


def reached_at(points: list[tuple[float, int, float]], goal: float = SHARE_GOAL) -> float | None:
    return next((at for at, _, share in points if share >= goal), None)


def share_within(points: list[tuple[float, int, float]], budget: int) -> float:
    return [share for _, spent, share in points if spent <= budget][-1]


def scenario_row(space: Space, noise: Noise, seeds: int) -> dict:
    row: dict = {"scenario": space.scenario.name, "slots": {},
                 "baseline_hours": None}
    for slots in SLOTS:
        climbs = [one_climb(space, noise, seed, slots) for seed in range(seeds)]
        runs = [points for points, _ in climbs]
        row["baseline_hours"] = round(statistics.median(b for _, b in climbs) / 3600, 2)
        times = [reached_at(points) for points in runs]
        hours = sorted(t / 3600 if t is not None else float("inf") for t in times)
        row["slots"][str(slots)] = {
            "hours_to_95": [round(h, 2) if h != float("inf") else None for h in hours],
            "median_hours_to_95": _finite(statistics.median(hours)),
            "median_share_at": {str(b): round(statistics.median(share_within(p, b) for p in runs), 3)
                                for b in BUDGETS},
            "hours_total": round(statistics.median(points[-1][0] / 3600 for points in runs), 2),
        }
    one = row["slots"]["1"]["median_hours_to_95"]
    for slots in SLOTS:
        cell = row["slots"][str(slots)]
        cell["time_ratio_to_1"] = round(cell["median_hours_to_95"] / one, 3) if one and cell["median_hours_to_95"] else None
    four = row["slots"]["4"]
    row["target_met"] = None if one is None else bool(
        four["time_ratio_to_1"] is not None and four["time_ratio_to_1"] <= TIME_GOAL
        and four["median_share_at"]["40"] >= row["slots"]["1"]["median_share_at"]["40"] - SHARE_SLACK)
    return row


def _finite(value: float) -> float | None:
    return None if value == float("inf") else round(value, 2)


def print_table(rows: list[dict]) -> None:
    print(f"{'scenario':40} {'slots':>5} {'h to 95%':>9} {'ratio':>6} {'share@10':>8} {'@20':>6} {'@40':>6}")
    for row in rows:
        for slots, cell in row["slots"].items():
            shares = cell["median_share_at"]
            print(f"{row['scenario']:40} {slots:>5} {str(cell['median_hours_to_95']):>9} "
                  f"{str(cell['time_ratio_to_1']):>6} {shares['10']:>8} {shares['20']:>6} {shares['40']:>6}")
        print(f"{'':40} target met: {row['target_met']}")


def print_graph(row: dict) -> None:
    print(f"\n{row['scenario']}")
    for run in (row["serial"], row["parallel"]):
        low, high = run["validated_gain_ci"]
        print(f"  parallel_trials {run['parallel_trials']}: trials step {run['trials_s']} s ({run['trials']} trials, "
              f"{run['climb_launches']} launches), validated gain {run['validated_gain_pct']}% [{low}, {high}]")
    print(f"  ratio {row['trials_time_ratio']}, same gain within its interval: {row['same_gain_within_interval']}, "
          f"target met: {row['target_met']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--scenarios", type=int, default=2, help="the first N grid scenarios")
    parser.add_argument("--workers", type=int, default=2, help="processes for a space's truths when not cached")
    parser.add_argument("--launch-sd", type=float, default=0.05, help="as search_quality.py's")
    parser.add_argument("--repeat-sd", type=float, default=0.03, help="as search_quality.py's")
    parser.add_argument("--graph", choices=("with", "only", "without"), default="with",
                        help="the real-graph row beside the offline rows, alone, or not at all")
    parser.add_argument("--graph-slots", type=int, default=4, help="the real-graph row's parallel_trials")
    parser.add_argument("--graph-time-scale", type=float, default=TIME_SCALE, help="the real-graph row's sim clock")
    args, run = start_run(parser)
    noise = Noise(launch_sd=args.launch_sd, repeat_sd=args.repeat_sd)
    rows = [] if args.graph == "only" else [
        scenario_row(cached_space(scenario, args.workers), noise, args.seeds)
        for scenario in grid_scenarios(synthetic_trace_file())[:args.scenarios]]
    print_table(rows)
    graph = None if args.graph == "without" else graph_row(args.graph_slots, args.graph_time_scale)
    if graph is not None:
        print_graph(graph)
    met = [row["target_met"] for row in [*rows, *([graph] if graph else [])] if row["target_met"] is not None]
    write_results("parallel_search", {
        "settings": {"seeds": args.seeds, "launches": LAUNCHES, "launch_sd": args.launch_sd,
                     "repeat_sd": args.repeat_sd, "startup_s": STARTUP_S, "slots": list(SLOTS),
                     "graph_slots": args.graph_slots, "graph_time_scale": args.graph_time_scale},
        "parallel_goal": f"4 slots: median share at 40 launches within {SHARE_SLACK} of 1 slot's, median time to "
                         f"{SHARE_GOAL:.0%} of the attainable gain at most {TIME_GOAL:.0%} of 1 slot's; the real "
                         f"graph's trials step in at most {HALF:.0%} of the serial run's wall time, on at least "
                         f"{MIN_TRIALS} trials, each run's validated gain within the other's 95% interval",
        "rows": rows, "graph": graph, "target_met": bool(met) and all(met)}, run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
