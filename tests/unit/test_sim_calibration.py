"""Calibrating the sim: a fit recovers the parameters that made its measurements, and a profile reaches the model."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import yaml

from hyperloom_assets.core.roofline.model_shape import load_shape
from hyperloom_assets.sim.calibrate import FitCase, case_fits, fit, fit_case, identifiable
from hyperloom_assets.sim.calibration import (
    PROFILES_DIR,
    CalibrationError,
    CalibrationProfile,
    load_profile,
    write_profile,
)
from hyperloom_assets.sim.cli import predict_main, serve_main
from hyperloom_assets.sim.perf_model import SimCalibration
from hyperloom_assets.sim.predict import fixed_batch_latency, fixed_batch_schedule

REPO = Path(__file__).resolve().parents[2]
LLAMA_8B = REPO / "models" / "llama-3-8b"
# Costs the default model lacks: small kernels per layer, and all-reduces three times slower than the table.
TRUTH = SimCalibration(layer_fixed_s=30e-6, allreduce_scale=3.0)


def measured_grid(truth: SimCalibration, noise: float, seed: int) -> list[FitCase]:
    """Fixed-batch latencies of Llama-3-8B on H100 at TP 1-8, batch 1-64, two prompt lengths, by `truth`."""
    shape, rng, cases = load_shape(LLAMA_8B), random.Random(seed), []
    for tp in (1, 2, 4, 8):
        for batch in (1, 4, 16, 64):
            for input_len in (128, 1024):
                model, steps = fixed_batch_schedule(shape, "H100", [], batch, input_len, 64, tp=tp)
                exact = fit_case("x", 1.0, model, steps).predict(truth)
                cases.append(fit_case(f"tp{tp}-b{batch}-in{input_len}", exact * math.exp(rng.gauss(0, noise)),
                                      model, steps))
    return cases


def test_the_replayed_schedule_times_exactly_what_the_simulation_does() -> None:
    shape = load_shape(LLAMA_8B)
    model, steps = fixed_batch_schedule(shape, "H100", [], 32, 1024, 256, tp=2)
    case = fit_case("x", 1.0, model, steps)
    assert len(case.runs) < len(steps) / 10  # the decode steps collapse into runs
    for calibration in (SimCalibration(), TRUTH, SimCalibration(bw_efficiency=0.4, compute_scale=0.2)):
        simulated = fixed_batch_latency(shape, "H100", [], 32, 1024, 256, tp=2, calibration=calibration)
        assert case.predict(calibration) == pytest.approx(simulated, rel=1e-9)


def test_a_fit_without_noise_recovers_the_parameters_exactly() -> None:
    cases = measured_grid(TRUTH, 0.0, 0)
    fitted = fit(cases, ["layer_fixed_s", "allreduce_scale", "bw_efficiency"], SimCalibration())
    assert fitted.layer_fixed_s == pytest.approx(30e-6, rel=0.01)
    assert fitted.allreduce_scale == pytest.approx(3.0, rel=0.01)
    assert fitted.bw_efficiency == pytest.approx(0.80, rel=0.01)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_fit_recovers_perturbed_parameters_through_2pct_noise(seed) -> None:
    cases = measured_grid(TRUTH, 0.02, seed)
    names = identifiable(cases, SimCalibration(), 4)
    assert {"layer_fixed_s", "allreduce_scale", "bw_efficiency"} <= set(names)
    fitted = fit(cases, names, SimCalibration())
    # 32 cases at 2% noise pin the per-layer cost and the all-reduce scale to about a quarter
    # (the defaults, 0 and 1, lie far outside), the bandwidth share to a few percent.
    assert fitted.layer_fixed_s == pytest.approx(30e-6, rel=0.3)
    assert fitted.allreduce_scale == pytest.approx(3.0, rel=0.3)
    assert fitted.bw_efficiency == pytest.approx(0.80, rel=0.05)


def test_costs_one_tp_size_cannot_tell_apart_are_held() -> None:
    tp8 = [case for case in measured_grid(TRUTH, 0.0, 0) if case.id.startswith("tp8-")]
    names = identifiable(tp8, SimCalibration(), 4)
    # The weights' bandwidth and the per-layer cost are both a fixed time per step for one model
    # and TP size; the all-reduce is not, since its measured time grows with the batch's message.
    assert "layer_fixed_s" in names and "bw_efficiency" not in names
    assert "allreduce_scale" in names


def test_leave_one_out_refits_without_the_case() -> None:
    cases = measured_grid(TRUTH, 0.02, 1)[:8]  # TP1: no all-reduce
    names = ["layer_fixed_s", "bw_efficiency"]
    fitted = fit(cases, names, SimCalibration())
    rows = case_fits(cases, names, fitted)
    assert all(row.loo_ratio is not None and 0.9 < row.loo_ratio < 1.1 for row in rows)
    assert any(row.loo_ratio != row.ratio for row in rows)


def profile(**parameters) -> CalibrationProfile:
    return CalibrationProfile(gpu="H100", engine="vllm", parameters=SimCalibration(**parameters))


def test_a_profile_round_trips_through_yaml(tmp_path) -> None:
    path = tmp_path / "h100.yaml"
    original = profile(layer_fixed_s=12e-6, bw_efficiency=0.7)
    write_profile(original, path)
    assert load_profile(path) == original
    assert yaml.safe_load(path.read_text())["parameters"]["layer_fixed_s"] == 12e-6


@pytest.mark.parametrize(("parameters", "field"), [
    ({"bw_efficency": 0.7}, "parameters.bw_efficency: Extra inputs are not permitted"),
    ({"bw_efficiency": 1.5}, "parameters.bw_efficiency: Input should be less than or equal to 1"),
    ({"layer_fixed_s": -1e-6}, "parameters.layer_fixed_s: Input should be greater than or equal to 0"),
])
def test_a_bad_profile_is_refused_naming_the_file_and_field(tmp_path, parameters, field) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"gpu": "H100", "engine": "vllm", "parameters": parameters}))
    with pytest.raises(CalibrationError, match=f"{path}: {field}"):
        load_profile(path)


def test_every_packaged_profile_loads() -> None:
    paths = sorted(PROFILES_DIR.glob("*.yaml"))
    assert paths
    for path in paths:
        assert load_profile(path).fit is not None


def predicted_tpot(capsys, *extra: str) -> float:
    argv = ["--model", str(LLAMA_8B), "--gpu", "H100", "--isl", "128", "--osl", "64", "--num-prompts", "4",
            "--warmups", "0", *extra]
    assert predict_main(argv) == 0
    return json.loads(capsys.readouterr().out)["tpot_p50_ms"]


def test_the_calibration_flag_reaches_the_perf_model(tmp_path, capsys) -> None:
    slow = tmp_path / "slow.yaml"
    write_profile(profile(layer_fixed_s=50e-6), slow)
    plain = predicted_tpot(capsys)
    calibrated = predicted_tpot(capsys, "--calibration", str(slow))
    # 32 layers x 50 µs per decode step, on top of the default step
    assert calibrated - plain == pytest.approx(32 * 50e-3, rel=0.02)


def test_a_bad_or_foreign_profile_stops_the_server_before_it_starts(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpu: H100\nengine: vllm\nparameters: {allreduce_scale: 0}\n")
    with pytest.raises(SystemExit) as exit_info:
        serve_main(["--model", str(LLAMA_8B), "--gpu", "H100", "--port", "1", "--calibration", str(bad)])
    assert exit_info.value.code == 2
    assert f"{bad}: parameters.allreduce_scale" in capsys.readouterr().err
    other = tmp_path / "mi300x.yaml"
    write_profile(CalibrationProfile(gpu="MI300X", engine="vllm"), other)
    with pytest.raises(SystemExit):
        serve_main(["--model", str(LLAMA_8B), "--gpu", "H100", "--port", "1", "--calibration", str(other)])
    assert "is for MI300X, not --gpu H100" in capsys.readouterr().err
