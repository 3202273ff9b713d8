"""Calibrating the sim from a user's own serving benchmarks: result files of closed-loop runs,
read as the peers' formats, scheduled once and fitted like the published fixed batches."""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone
from pathlib import Path

import pytest

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.cli.main import main as cli_main
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.resources.store.results import ResultStore, default_store_url
from hyperloom_assets.sim.calibrate_cli import main as calibrate_main
from hyperloom_assets.sim.calibration import CalibrationError, load_profile
from hyperloom_assets.sim.perf_model import SimCalibration
from hyperloom_assets.sim.predict import predict
from hyperloom_assets.sim.serving_cases import serving_cases
from tests.unit.test_peer_results import PEERS
from tests.unit.test_sim_calibration import LLAMA_8B

# GEMVs further below the datasheet bandwidth, and GEMMs further below the peak, than the defaults.
TRUTH = SimCalibration(bw_efficiency=0.62, compute_scale=0.6)
RUNS = [(concurrency, isl) for concurrency in (1, 16, 128) for isl in (128, 2048)]


def test_a_vllm_bench_serve_file_is_one_closed_loop_case() -> None:
    [case] = serving_cases(PEERS / "vllm_bench_serve_random.json")
    assert (case.concurrency, case.prompts, case.output_len) == (4, 16, 32)
    assert case.input_len == round(2049 / 16) and case.measured_s == pytest.approx(0.89375, rel=1e-4)


def test_an_open_loop_or_uncapped_run_is_refused_naming_the_file(tmp_path) -> None:
    raw = json.loads((PEERS / "vllm_bench_serve_random.json").read_text())
    rated = tmp_path / "rated.json"
    rated.write_text(json.dumps({**raw, "request_rate": 4.0}))
    with pytest.raises(CalibrationError, match=r"rated.json: request_rate 4.0 is an open-loop run"):
        serving_cases(rated)
    uncapped = tmp_path / "uncapped.json"
    uncapped.write_text(json.dumps({k: v for k, v in raw.items() if k != "max_concurrency"}))
    with pytest.raises(CalibrationError, match=r"uncapped.json: no max_concurrency"):
        serving_cases(uncapped)


def bench_serve_file(path, concurrency: int, isl: int, noise: float) -> None:
    """What `vllm bench serve --save-result` writes for a run the truth's sim served, its duration noisy."""
    workload = Workload(kind="random", isl=isl, osl=64, concurrency=concurrency, num_prompts=4 * concurrency)
    run = predict(LLAMA_8B, "H100", [], workload, warmups=0, calibration=TRUTH).repeats[0]
    path.write_text(json.dumps({
        "backend": "vllm", "num_prompts": run.completed, "request_rate": "inf", "max_concurrency": concurrency,
        "duration": run.duration_s * noise, "completed": run.completed, "failed": 0,
        "total_input_tokens": run.total_input_tokens, "total_output_tokens": run.total_output_tokens,
        "request_throughput": run.request_throughput, "output_throughput": run.output_throughput,
        "median_ttft_ms": run.ttft_p50_ms, "p99_ttft_ms": run.ttft_p99_ms, "median_tpot_ms": run.tpot_p50_ms,
        "median_itl_ms": run.itl_p50_ms, "median_e2el_ms": run.e2el_p50_ms}))


def test_sim_calibrate_recovers_the_parameters_behind_noisy_serving_results(tmp_path, capsys) -> None:
    rng = random.Random(7)
    files = []
    for concurrency, isl in RUNS:
        files.append(tmp_path / f"c{concurrency}-i{isl}.json")
        bench_serve_file(files[-1], concurrency, isl, rng.gauss(1.0, 0.02))
    out = tmp_path / "mine.yaml"
    assert calibrate_main(["--gpu", "H100", "--out", str(out), "--no-cases", "--results", *map(str, files),
                           "--model", str(LLAMA_8B), "--fit", "bw_efficiency,compute_scale"]) == 0
    profile = load_profile(out)
    assert profile.parameters.bw_efficiency == pytest.approx(TRUTH.bw_efficiency, rel=0.05)
    assert profile.parameters.compute_scale == pytest.approx(TRUTH.compute_scale, rel=0.05)
    assert profile.fit.cases_file is None and set(profile.fit.results) == {str(f) for f in files}
    assert all(0.95 <= case.ratio <= 1.05 for case in profile.fit.cases), "each run within its noise"


def stored(store, concurrency: int, isl: int, args: list[str], rng: random.Random) -> None:
    """A baseline the store holds of a 'real' vLLM launch with these args: the truth's sim, two noisy rounds."""
    workload = Workload(kind="random", isl=isl, osl=64, concurrency=concurrency, num_prompts=4 * concurrency)
    measured = predict(LLAMA_8B, "H100", args, workload, warmups=0, repeats=2, calibration=TRUTH)
    rounds = [run.model_copy(update={"duration_s": run.duration_s * rng.gauss(1.0, 0.02)}) for run in measured.repeats]
    argv = engine_for("vllm").build_argv(Path("/usr/bin/python3"), LLAMA_8B, 8000 + concurrency, args)
    store.record_measurement(target="real", kind="baseline", argv=argv, env={}, started_at=datetime.now(timezone.utc),
                             measurement=measured.model_copy(update={"repeats": rounds}).model_dump(mode="json"))


def test_the_stores_measurements_of_a_target_calibrate_each_with_its_launchs_args(store, tmp_path, capsys) -> None:
    rng = random.Random(11)
    for concurrency, isl in RUNS:
        stored(store, concurrency, isl, ["--max-num-batched-tokens", "4096"] if isl > 1024 else [], rng)
    argv = engine_for("vllm").build_argv(Path("/usr/bin/python3"), LLAMA_8B, 8100, [])
    store.record_measurement(target="real", kind="trial", argv=argv, env={}, started_at=datetime.now(timezone.utc),
                             error="the server exited")
    out = tmp_path / "mine.yaml"
    assert calibrate_main(["--gpu", "H100", "--out", str(out), "--no-cases", "--store-target", "real",
                           "--model", str(LLAMA_8B), "--fit", "bw_efficiency,compute_scale"],
                          store_rows=store.measurements) == 0
    profile = load_profile(out)
    assert profile.parameters.bw_efficiency == pytest.approx(TRUTH.bw_efficiency, rel=0.05)
    assert profile.parameters.compute_scale == pytest.approx(TRUTH.compute_scale, rel=0.05)
    assert profile.fit.store_target == "real" and len(profile.fit.cases) == 2 * len(RUNS), "a case per round"
    assert "left out: real trial #7: no measurement (the launch failed)" in capsys.readouterr().err


def test_the_operators_args_come_back_from_each_engines_launch_command() -> None:
    args = ["--max-num-seqs", "8", "--enforce-eager"]
    for name in ("vllm", "sglang", "atom", "sim"):
        spec = engine_for(name)
        argv = ["taskset", "-c", "0", *spec.build_argv(Path("/usr/bin/python3"), LLAMA_8B, 8000, args)]
        assert spec.server_args_of(argv) == args, name
    assert engine_for("vllm").server_args_of(["python3", "-m", "elsewhere", *args]) is None


def test_hyperloom_sim_calibrate_reads_the_store_every_command_uses(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.delenv("HYPERLOOM_POSTGRES_URL", raising=False)
    store = ResultStore(url=default_store_url())
    rng = random.Random(3)
    for concurrency, isl in RUNS[:2]:
        stored(store, concurrency, isl, [], rng)
    out = tmp_path / "mine.yaml"
    assert cli_main(["sim-calibrate", "--gpu", "H100", "--out", str(out), "--no-cases", "--store-target", "real",
                     "--model", str(LLAMA_8B), "--fit", "bw_efficiency", "--no-leave-one-out"]) == 0
    assert len(load_profile(out).fit.cases) == 4, "both stored baselines, two rounds each"
    assert calibrate_main(["--gpu", "H100", "--out", str(out), "--no-cases", "--store-target", "real",
                           "--model", str(LLAMA_8B)]) == 2, "the pure entry alone has no store: refused"
