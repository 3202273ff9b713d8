"""The proposer's column: how much of the gain the climb finds at fixed launch budgets, by who proposes.

One sim target (Llama-3-8B on an H100, random 512/128 at concurrency 32, a poor operator
config: a sequence cap of 8 and a 2048-token budget) runs the graph up to `trials`
(baseline, roofline, profile, candidates, trials) through `execute_in_process`, with
`max_trials` as the budget, once per proposer:
- `rules`: no model, the rule planner alone;
- `vllm-tiny` (the floor): the openai SDK against vLLM CPU serving the tiny random Llama
  of tests/conftest.py; its replies are noise, so each round falls back to the rules;
- `scripted` (the upper bound): the openai SDK against tests/proposer/scripted_llm.py,
  which answers with the changes that lift this target most (a written oracle, not a model);
- `real` with `--provider anthropic|openai --model M`: a real provider, through its
  SDK's own variables (ANTHROPIC_API_KEY / OPENAI_API_KEY, *_BASE_URL), never read here.

Per run: the climb's measured best gain, the noise-free gain of its final stack (both
sides by `sim-predict` without noise), the launches it spent (every server the run
started, the baseline's and the profile's included), the model's calls and whether a
round fell back. The results go to benchmarks/results/proposer_sim.json.

Run: .venv/bin/python benchmarks/proposer_sim.py [--budgets 2 4 8] [--proposers rules vllm-tiny scripted]
     [--provider anthropic --model claude-sonnet-4-5 --proposers real --add]   # adds a `real` column
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402
import yaml  # noqa: E402

from benchmarks.support.llm_servers import environment, scripted, vllm_tiny  # noqa: E402
from benchmarks.support.results import RESULTS_DIR, RunStart, start_run, write_results  # noqa: E402
from hyperloom_assets.core.config.targets import Workload  # noqa: E402
from hyperloom_assets.core.engines.registry import harness_flags_for  # noqa: E402
from hyperloom_assets.core.planning.variants import compose  # noqa: E402
from hyperloom_assets.definitions import build_defs  # noqa: E402
from hyperloom_assets.resources.hosts.local import LocalHost  # noqa: E402
from hyperloom_assets.resources.proposer.providers import LlmProviders  # noqa: E402
from hyperloom_assets.resources.store.llm_calls import LlmCallLog  # noqa: E402
from hyperloom_assets.resources.store.results import ResultStore  # noqa: E402
from hyperloom_assets.sim.engine_args import split_harness_args  # noqa: E402
from hyperloom_assets.sim.predict import predict  # noqa: E402
from tests.proposer.proposals import APPROVE, change  # noqa: E402

# The source paths whose code this benchmark measures: its result is stale once one changes
# (benchmarks/support/staleness.py).
EXERCISES = ("hyperloom_assets/", "benchmarks/support/llm_servers.py", "tests/proposer/")

MODEL = ROOT / "models" / "llama-3-8b"
HARNESS = ["--gpu", "H100", "--time-scale", "50"]
OPERATOR = ["--max-num-seqs", "8", "--max-num-batched-tokens", "2048"]
WORKLOAD = {"kind": "random", "isl": 512, "osl": 128, "concurrency": 32, "num_prompts": 96}
SELECTION = ["baseline", "roofline", "profile", "candidates", "trials"]
# The upper bound's script: the cap to the concurrency with room for its prefills, then the budget.
ORACLE = [change("cap to the concurrency, room for its prefills", ["--max-num-seqs", "32", "--max-num-batched-tokens", "8192"],
                 rationale="the cap of 8 binds under 32 streams and 2048 tokens starve the prefills"),
          change("cap to the concurrency", ["--max-num-seqs", "32"], rationale="the cap of 8 binds under 32 streams")]
SCRIPT = {"proposer": [json.dumps({"proposals": ORACLE}), json.dumps({"proposals": []})], "critic": [APPROVE]}


def true_gain_pct(final_args: list[str]) -> float:
    """The final stack against the operator's config, both predicted without noise."""
    workload = Workload(**WORKLOAD)

    def rate(args: list[str]) -> float:
        _, engine_args = split_harness_args(args)
        return predict(MODEL, "H100", engine_args, workload, flavor="vllm").output_throughput
    return 100.0 * (rate(final_args) / rate(HARNESS + OPERATOR) - 1.0)


def run_one(folder: Path, budget: int, proposer: dict | None, providers: LlmProviders) -> dict:
    targets = folder / "targets"
    targets.mkdir(parents=True)
    body = {"engine": "sim", "model": str(MODEL), "server_args": HARNESS + OPERATOR, "workload": WORKLOAD,
            "repeats": 2, "max_trials": budget, "target_gain_pct": 1000, "proposer": proposer}
    (targets / "sim.yaml").write_text(yaml.safe_dump(body))
    host = LocalHost(state_dir=str(folder / "state"), check_foreign_processes=False)
    store = ResultStore(url=f"sqlite:///{folder / 'results.db'}")
    defs = build_defs(targets, host=host, store=store, llm=providers)
    job = dg.define_asset_job("to_trials", selection=SELECTION).resolve(asset_graph=defs.resolve_asset_graph())
    started = time.monotonic()
    (folder / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(folder / "dagster")) as instance:
        result = job.execute_in_process(partition_key="sim", instance=instance)
    climb = result.asset_value("trials").climb
    final = compose(HARNESS + OPERATOR, {}, climb.keepers, harness_flags_for("sim")).argv
    launches = len(list((folder / "state" / "runs").rglob("teardown.json")))
    log = LlmCallLog(store)
    rounds = log.rounds("sim")
    return {"budget": budget, "measured_gain_pct": round(climb.best_gain_pct(), 2),
            "true_gain_pct": round(true_gain_pct(final), 2), "launches": launches,
            "trials": len(climb.trials), "kept": [k.name for k in climb.keepers],
            "llm_calls": len(log.calls("sim")), "rounds_fell_back": sum(bool(r["fell_back"]) for r in rounds),
            "rounds": len(rounds), "stop_reason": climb.stop_reason, "wall_s": round(time.monotonic() - started, 1)}


def column(name: str, folder: Path, args: argparse.Namespace, stack: ExitStack) -> tuple[dict | None, LlmProviders]:
    """The target's proposer and the providers for one run; a model server lives as long as `stack`."""
    if name == "rules":
        return None, LlmProviders()
    if name == "real":
        return {"provider": args.provider, "model": args.model, "max_rounds": 2}, LlmProviders()
    server = stack.enter_context(vllm_tiny(folder) if name == "vllm-tiny" else scripted(SCRIPT))
    stack.enter_context(environment(server.env))
    return {**server.proposer, "max_rounds": 2}, LlmProviders(max_tokens=server.max_tokens)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--proposers", nargs="+", default=["rules", "vllm-tiny", "scripted"],
                        choices=["rules", "vllm-tiny", "scripted", "real"])
    parser.add_argument("--provider", choices=["anthropic", "openai"])
    parser.add_argument("--model")
    parser.add_argument("--add", action="store_true",
                        help="keep the other proposers' rows of the results file (to add a column)")
    args, bench_run = start_run(parser)
    if args.provider or args.model:
        if not (args.provider and args.model):
            parser.error("--provider and --model go together")
        args.proposers = [*args.proposers, "real"] if "real" not in args.proposers else args.proposers
    rows = [row for row in previous_rows() if row["proposer"] not in args.proposers] if args.add else []
    with tempfile.TemporaryDirectory(prefix="proposer-sim-") as tmp:
        for name in args.proposers:
            with ExitStack() as shared:
                # vLLM's tiny model serves every budget; the script restarts with each run.
                if name == "vllm-tiny":
                    proposer, providers = column(name, Path(tmp) / name, args, shared)
                for budget in args.budgets:
                    with ExitStack() as per_run:
                        if name != "vllm-tiny":
                            proposer, providers = column(name, Path(tmp) / name, args, per_run)
                        row = {"proposer": name,
                               **run_one(Path(tmp) / name / f"b{budget}", budget, proposer, providers)}
                    print(f"{name:10s} budget {budget}: true gain {row['true_gain_pct']:+7.2f}%  measured "
                          f"{row['measured_gain_pct']:+7.2f}%  launches {row['launches']:2d}  calls {row['llm_calls']} "
                          f"(fell back {row['rounds_fell_back']}/{row['rounds']})  kept {row['kept']}", flush=True)
                    rows.append(row)
                    save(rows, bench_run)  # each row as it lands: a later column that fails loses nothing
    return 0


def save(rows: list[dict], bench_run: RunStart) -> None:
    write_results("proposer_sim", {"scenario": {"model": "llama-3-8b", "gpu": "H100", "workload": WORKLOAD,
                                                "operator_args": OPERATOR, "harness": HARNESS},
                                   "budget": "max_trials (candidate measurements)", "rows": rows}, bench_run)


def previous_rows() -> list[dict]:
    path = RESULTS_DIR / "proposer_sim.json"
    return json.loads(path.read_text())["results"]["rows"] if path.is_file() else []


if __name__ == "__main__":
    sys.exit(main())
