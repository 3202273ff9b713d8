"""`hyperloom sim-calibrate`: fit the sim's efficiency parameters for one GPU to the calibration cases.

Reads the published fixed-batch latencies of benchmarks/calibration/cases.yaml (or
`--cases FILE`) measured on `--gpu`, fits the parameters those cases can identify
(sim/calibrate.py), and writes a calibration profile (sim/calibration.py) with each
case's error and its leave-one-out error. The sim reads it with `--calibration FILE`
(or, for a profile packaged in hyperloom_assets/sim/profiles/, by its name or GPU).

`--results FILE...` adds a user's own serving benchmarks of that GPU (sim/serving_cases.py:
closed-loop runs of `vllm bench serve`, SGLang's bench_serving or AIPerf) on `--model DIR`
at `--tp N` with `--engine-args`; `--store-target NAME` adds the result store's
measurements of a target, each with its launch's own engine args; `--no-cases` fits
these alone.
"""

from __future__ import annotations

import argparse
import hashlib
import shlex
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hyperloom_assets.sim.cases import CASES_FILE, REPO

StoreRows = Callable[[str], "list[dict[str, Any]]"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hyperloom sim-calibrate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=Path, default=CASES_FILE, help="the calibration cases (default: the repository's)")
    p.add_argument("--gpu", required=True, help="fit the cases measured on this GPU (e.g. MI300X)")
    p.add_argument("--out", type=Path, required=True, help="the profile to write (YAML)")
    p.add_argument("--engine", default="vllm", help="the engine the cases ran, recorded in the profile (default vllm)")
    p.add_argument("--fit", default=None, metavar="P1,P2",
                   help="the parameters to fit (default: those the cases identify, at most --max-parameters)")
    p.add_argument("--max-parameters", type=int, default=4, help="at most this many fitted by default (default 4)")
    p.add_argument("--no-leave-one-out", action="store_true", help="skip the leave-one-out refits")
    p.add_argument("--results", type=Path, nargs="+", default=[], metavar="FILE",
                   help="serving result files measured on --gpu (vllm bench serve --save-result JSON, SGLang "
                        "bench_serving JSONL, AIPerf profile_export_aiperf.json), closed-loop runs, fitted too")
    p.add_argument("--model", type=Path, default=None, metavar="DIR",
                   help="with --results: the model folder (config.json) the results served")
    p.add_argument("--tp", type=int, default=1, help="with --results: the tensor-parallel size they ran at (default 1)")
    p.add_argument("--engine-version", default=None, metavar="X.Y.Z",
                   help="with --results or --store-target: the engine's version, which picks its CPU overhead "
                        "(sim/physics.py; default: the newest row)")
    p.add_argument("--engine-args", default="", metavar="ARGS",
                   help="with --results: the server's engine args, one shell-quoted string (default: none)")
    p.add_argument("--store-target", default=None, metavar="NAME",
                   help="the result store's measurements of this target (a real engine's, on --gpu, serving --model "
                        "at --tp) fitted too, each with the engine args its launch ran")
    p.add_argument("--no-cases", action="store_true",
                   help="fit the --results and --store-target alone, without the published cases")
    p.add_argument("--note", action="append", default=[], metavar="TEXT",
                   help="a line the profile keeps with its fit: what it rests on, where it may not carry (repeatable)")
    return p


def _display(path: Path) -> str:
    resolved = path.resolve()
    return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(path)


def _published_cases(args: argparse.Namespace, gpu: str) -> list:
    from hyperloom_assets.sim.calibrate import fit_case
    from hyperloom_assets.sim.cases import load_cases
    from hyperloom_assets.sim.predict import fixed_batch_schedule

    if args.no_cases:
        return []
    calibration = load_cases(args.cases)
    cases = []
    for case in calibration.predictable(gpu):
        model, steps = fixed_batch_schedule(case.sim_shape(), case.gpu, calibration.sim_engine_args(case), case.batch,
                                            case.input_len, case.output_len, tp=case.tp,
                                            engine_version=calibration.engine_version(case))
        cases.append(fit_case(case.id, case.seconds, model, steps))
    return cases


def _closed_loop_case(case, shape, gpu: str, engine_args: list[str], args: argparse.Namespace):  # noqa: ANN001, ANN202
    """A serving case (serving_cases.py) as a fit case: its run scheduled once on the model it served."""
    from hyperloom_assets.sim.calibrate import fit_case
    from hyperloom_assets.sim.predict import closed_loop_schedule

    model, steps = closed_loop_schedule(shape, gpu, engine_args, case.concurrency, case.prompts, case.input_len,
                                        case.output_len, flavor=args.engine, tp=args.tp,
                                        engine_version=args.engine_version)
    return fit_case(case.id, case.measured_s, model, steps)


def _result_cases(args: argparse.Namespace, gpu: str) -> list:
    """The serving result files' closed-loop runs, with the --engine-args given."""
    from hyperloom_assets.core.roofline.model_shape import load_shape
    from hyperloom_assets.sim.serving_cases import serving_cases

    if not args.results:
        return []
    shape, engine_args = load_shape(args.model), shlex.split(args.engine_args)
    return [_closed_loop_case(case, shape, gpu, engine_args, args) for path in args.results
            for case in serving_cases(path)]


def _stored_cases(args: argparse.Namespace, gpu: str, store_rows: StoreRows | None) -> list:
    """The store's measurements of --store-target, each scheduled with the engine args its launch ran."""
    from hyperloom_assets.core.engines import engine_for
    from hyperloom_assets.core.roofline.model_shape import load_shape
    from hyperloom_assets.sim.calibration import CalibrationError
    from hyperloom_assets.sim.perf_model import SimConfigError
    from hyperloom_assets.sim.predict import SimArgError
    from hyperloom_assets.sim.serving_cases import store_cases

    if args.store_target is None:
        return []
    if store_rows is None:
        raise CalibrationError("--store-target: no store to read here (run it as `hyperloom sim-calibrate`)")
    found, skipped = store_cases(store_rows(args.store_target), engine_for(args.engine).server_args_of)
    shape, cases = load_shape(args.model), []
    for case in found:
        try:
            cases.append(_closed_loop_case(case, shape, gpu, case.engine_args or [], args))
        except (SimArgError, SimConfigError) as exc:
            skipped.append(f"{case.id}: the sim cannot serve its args ({exc})")
    for reason in skipped:
        print(f"left out: {reason}", file=sys.stderr)
    return cases


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if (args.results or args.store_target) and args.model is None:
        parser.error("argument --model: required with --results or --store-target (the model folder they served)")
    for path in args.results:
        if not path.is_file():
            parser.error(f"argument --results: {path}: no such file")
    if args.no_cases and not (args.results or args.store_target):
        parser.error("argument --no-cases: needs --results or --store-target, or nothing is left to fit")


def main(argv: list[str], store_rows: StoreRows | None = None) -> int:
    """`store_rows(target)`: the result store's measurement rows of a target (the CLI layer reads
    the store: this package reads none)."""
    p = parser()
    args = p.parse_args(argv)
    _check(p, args)
    from hyperloom_assets.core.roofline.gpus import gpu_spec
    from hyperloom_assets.sim.calibrate import BOUNDS, case_fits, fit, identifiable
    from hyperloom_assets.sim.calibration import CalibrationError, CalibrationProfile, FitReport, write_profile
    from hyperloom_assets.sim.perf_model import SimCalibration

    gpu = gpu_spec(args.gpu).name
    try:
        cases = _published_cases(args, gpu) + _result_cases(args, gpu) + _stored_cases(args, gpu, store_rows)
    except CalibrationError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    if not cases:
        print(f"ERROR: nothing to fit: no case of {args.cases} on {gpu} with a model folder here, no --results "
              "and no stored measurement to use", file=sys.stderr)
        return 1
    start = SimCalibration()
    names = args.fit.split(",") if args.fit else identifiable(cases, start, min(args.max_parameters, len(cases) - 1))
    unknown = sorted(set(names) - set(BOUNDS))
    if unknown:
        print(f"ERROR: --fit: unknown parameters {', '.join(unknown)}; known: {', '.join(BOUNDS)}", file=sys.stderr)
        return 2
    fitted = fit(cases, names, start)
    rows = case_fits(cases, names, fitted, leave_one_out=not args.no_leave_one_out)
    report = FitReport(
        cases_file=None if args.no_cases else _display(args.cases),
        cases_sha256=None if args.no_cases else hashlib.sha256(args.cases.read_bytes()).hexdigest(),
        results={_display(path): hashlib.sha256(path.read_bytes()).hexdigest() for path in args.results},
        store_target=args.store_target,
        method="least squares on log(predicted / measured), bounded (scipy trf)",
        fitted=list(names), held=[n for n in BOUNDS if n not in names], cases=rows, notes=args.note)
    write_profile(CalibrationProfile(gpu=gpu, engine=args.engine, parameters=fitted, fit=report), args.out)
    print_fit(report, fitted)
    print(f"wrote {args.out}")
    return 0


def print_fit(report, parameters) -> None:  # noqa: ANN001
    for name in report.fitted:
        print(f"fitted {name} = {getattr(parameters, name):.6g}")
    print(f"held at their defaults: {', '.join(report.held)}")
    print(f"{'case':<40} {'measured s':>10} {'predicted s':>11} {'ratio':>6} {'LOO ratio':>9}")
    for row in report.cases:
        loo = f"{row.loo_ratio:>9.3f}" if row.loo_ratio is not None else f"{'-':>9}"
        print(f"{row.id:<40} {row.measured_s:>10.3f} {row.predicted_s:>11.3f} {row.ratio:>6.3f} {loo}")
    ratios = [row.ratio for row in report.cases]
    print(f"ratio over {len(ratios)} cases: median {statistics.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f}")
