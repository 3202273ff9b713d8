"""Naming a calibration profile: by file, by name or GPU from the packaged folder, or `auto`;
and the description that run metadata and reports carry of what predicted a sim's numbers."""

from __future__ import annotations

import hashlib
import json

import pytest

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.sim.calibration import (
    PROFILES_DIR,
    CalibrationError,
    CalibrationProfile,
    describe_calibration,
    find_profile,
    load_profile,
    write_profile,
)
from hyperloom_assets.sim.cases import CASES_FILE, load_cases
from hyperloom_assets.sim.cli import predict_main
from hyperloom_assets.sim.perf_model import SimCalibration
from hyperloom_assets.sim.predict import fixed_batch_latency
from tests.unit.test_sim_calibration import LLAMA_8B

PACKAGED_MI300X = PROFILES_DIR / "mi300x-vllm.yaml"


@pytest.fixture
def folder(tmp_path):
    for gpu, engine in (("H100", "vllm"), ("H100", "sglang"), ("MI300X", "vllm")):
        write_profile(CalibrationProfile(gpu=gpu, engine=engine, parameters=SimCalibration()),
                      tmp_path / f"{gpu.lower()}-{engine}.yaml")
    return tmp_path


def test_a_file_is_itself_and_a_name_or_gpu_finds_the_engines_profile(folder) -> None:
    assert find_profile("elsewhere/mine.yaml", "H100", "vllm", folder).as_posix() == "elsewhere/mine.yaml"
    assert find_profile("h100-sglang", "H100", "vllm", folder) == folder / "h100-sglang.yaml", "a name is exact"
    assert find_profile("h100", "H100", "sglang", folder) == folder / "h100-sglang.yaml", "a GPU: this engine's"
    assert find_profile("H100", "H100", "vllm", folder) == folder / "h100-vllm.yaml"


def test_auto_is_the_profile_for_the_gpu_and_engine_or_none(folder) -> None:
    assert find_profile("auto", "MI300X", "vllm", folder) == folder / "mi300x-vllm.yaml"
    assert find_profile("auto", "MI300X", "sglang", folder) is None, "no profile: the perf model's constants"


def test_an_unknown_name_is_refused_naming_it_and_what_the_folder_holds(folder) -> None:
    with pytest.raises(CalibrationError, match=r"'MI300X'.*engine atom.*h100-sglang \(H100, sglang\)"):
        find_profile("MI300X", "MI300X", "atom", folder)


def predicted(capsys, *calibration: str) -> float:
    argv = ["--model", str(LLAMA_8B), "--gpu", "MI300X", "--isl", "128", "--osl", "32", "--num-prompts", "4",
            "--warmups", "0", *calibration]
    assert predict_main(argv) == 0
    return json.loads(capsys.readouterr().out)["tpot_p50_ms"]


def test_the_packaged_profile_by_gpu_name_or_auto_is_the_one_the_file_gives(capsys) -> None:
    by_file = predicted(capsys, "--calibration", str(PACKAGED_MI300X))
    assert predicted(capsys, "--calibration", "MI300X") == by_file
    assert predicted(capsys, "--calibration", "auto") == by_file
    assert predicted(capsys) != by_file, "the profile changes what the sim predicts"


def test_the_sim_says_which_profile_predicts_and_a_real_engine_says_nothing() -> None:
    digest = hashlib.sha256(PACKAGED_MI300X.read_bytes()).hexdigest()[:12]
    said = engine_for("sim").predictor_of(["--gpu", "mi300x", "--calibration", "auto", "--max-num-seqs", "8"])
    assert "calibration profile mi300x-vllm.yaml (MI300X, vllm;" in said and digest in said
    assert said == describe_calibration(str(PACKAGED_MI300X), "MI300X", "vllm") + (
        "; CPU overhead per step: vLLM V1 (sim/physics.py)")
    old = engine_for("sim").predictor_of(["--gpu", "H100", "--engine-version", "0.2.7"])
    assert old.endswith("; CPU overhead per step: vLLM V0 before 0.6 (sim/physics.py)"), "the row the version picks"
    assert "uncalibrated" in engine_for("sim").predictor_of(["--gpu", "H100"])
    assert "no packaged profile for H100 and sglang" in engine_for("sim").predictor_of(
        ["--flavor", "sglang", "--gpu", "H100", "--calibration", "auto"])
    assert engine_for("vllm").predictor_of(["--max-num-seqs", "8"]) is None


@pytest.mark.parametrize("path", sorted(PROFILES_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_a_packaged_profile_predicts_each_of_its_gpus_cases_within_the_target(path) -> None:
    """Recomputed, not read back: the profile against today's perf model and today's cases file."""
    profile = load_profile(path)
    cases = load_cases()
    assert profile.fit.cases_sha256 == hashlib.sha256(CASES_FILE.read_bytes()).hexdigest(), \
        f"{path.name} was fitted on another version of the cases: run hyperloom sim-calibrate again"
    mine = cases.predictable(profile.gpu)
    assert {case.id for case in mine} == {fit.id for fit in profile.fit.cases}, "fitted on every case of its GPU"
    for case in mine:
        predicted = fixed_batch_latency(case.sim_shape(), case.gpu, cases.sim_engine_args(case), case.batch,
                                        case.input_len, case.output_len, tp=case.tp, calibration=profile.parameters)
        assert 0.8 <= predicted / case.seconds <= 1.25, f"{case.id}: {predicted / case.seconds:.3f}"
