"""The sim's measured-cost tables (sim/physics.py) and how the perf model reads them."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import pytest

from hyperloom_assets.core.roofline.gpus import GPUS, gpu_spec
from hyperloom_assets.core.roofline.model_shape import load_shape
from hyperloom_assets.sim.calibrate_cli import _published_cases
from hyperloom_assets.sim.cases import CASES_FILE
from hyperloom_assets.sim.cli import predict_main
from hyperloom_assets.sim.perf_model import PerfModel, SimCalibration, StepShape
from hyperloom_assets.sim.physics import KIB, MIB, engine_overhead, gpu_physics, parse_version, piecewise

REPO = Path(__file__).resolve().parents[2]
LLAMA_8B = REPO / "models" / "llama-3-8b"
LLAMA_70B = REPO / "models" / "llama-3-70b"


def test_a_table_interpolates_inside_holds_below_and_extends_its_last_slope_above() -> None:
    points = [(1.0, 10.0), (3.0, 20.0), (5.0, 40.0)]
    assert piecewise(points, 0.5) == 10.0
    assert piecewise(points, 2.0) == pytest.approx(15.0)
    assert piecewise(points, 5.0) == 40.0
    assert piecewise(points, 7.0) == pytest.approx(60.0)  # the bandwidth of the largest measured transfers


def test_an_all_reduce_reads_its_tp_sizes_row_or_the_nearest_measured_one() -> None:
    h100 = gpu_physics("H100").allreduce
    assert h100.seconds(8, 2 * MIB) == pytest.approx(22.1e-6)
    assert h100.seconds(2, 1 * MIB) == pytest.approx(7.9e-6)
    mi300x = gpu_physics("MI300X").allreduce
    assert mi300x.seconds(8, 16 * KIB) == mi300x.seconds(4, 16 * KIB) == pytest.approx(7.26e-6)
    assert h100.seconds(16, 2 * MIB) == h100.seconds(8, 2 * MIB)  # beyond the table: its largest TP size


def test_every_gpu_of_the_gpu_table_has_collective_and_gemm_data() -> None:
    for name in GPUS:
        physics = gpu_physics(name)
        assert set(physics.gemm) == {"bf16", "fp8"}
        assert physics.allreduce.by_tp and physics.allreduce.source
    with pytest.raises(KeyError, match="no collective or GEMM data for GPU 'A100'"):
        gpu_physics("A100")


@pytest.mark.parametrize(("version", "label"), [
    ("0.2.7", "vLLM V0 before 0.6"), ("0.6.3", "vLLM V0 0.6-0.7"), ("0.10.0", "vLLM V1"), ("v0.32.0", "vLLM V1"),
    (None, "vLLM V1"),
])
def test_the_engine_version_picks_its_cpu_overhead_row(version, label) -> None:
    assert engine_overhead("vllm", version).label == label


def test_a_version_that_is_not_dotted_numbers_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="engine version '0.10-rc1': expected dotted numbers"):
        parse_version("0.10-rc1")
    with pytest.raises(ValueError, match="no CPU overhead data for engine 'trt'"):
        engine_overhead("trt")


def model(shape_dir: Path = LLAMA_8B, tp: int = 1, **fields) -> PerfModel:
    return PerfModel(shape=load_shape(shape_dir), gpu=gpu_spec("H100"), tp=tp, kv_bytes_per_elem=2.0, block_size=16,
                     cuda_graphs=True, graph_max_tokens=512, graph_decode_only=False, cpu_overhead_hidden=False,
                     **fields)


def test_the_all_reduce_grows_with_the_steps_message_as_the_table_does() -> None:
    tp8 = model(LLAMA_70B, tp=8)
    table = gpu_physics("H100").allreduce
    for tokens in (1, 128):
        step = StepShape(decode_seqs=tokens, decode_context=tokens * 512)
        message = tokens * tp8.shape.hidden * 2
        assert tp8.step_breakdown(step)["all_reduce"] == pytest.approx(2 * 80 * table.seconds(8, message))
    doubled = replace(tp8, calibration=SimCalibration(allreduce_scale=2.0))
    step = StepShape(decode_seqs=64, decode_context=64 * 512)
    assert doubled.step_breakdown(step)["all_reduce"] == pytest.approx(2 * tp8.step_breakdown(step)["all_reduce"])
    assert model(LLAMA_70B, tp=1).step_breakdown(step)["all_reduce"] == 0.0


def test_an_older_engine_spends_more_cpu_per_step_and_per_sequence() -> None:
    step = StepShape(decode_seqs=64, decode_context=64 * 512)
    v1, v0 = model(), model(engine=engine_overhead("vllm", "0.2.7"))
    cpu = lambda m: m.step_breakdown(step)["sampling"] + m.step_breakdown(step)["scheduling"]  # noqa: E731
    assert cpu(v1) == pytest.approx(0.4e-3 + 64 * 5e-6)
    assert cpu(v0) == pytest.approx(1.5e-3 + 64 * 40e-6)
    assert cpu(replace(v0, calibration=SimCalibration(cpu_scale=0.5))) == pytest.approx(cpu(v0) / 2)
    assert cpu(replace(v0, cpu_overhead_hidden=True)) == 0.0


def test_the_attention_kernels_work_per_sequence_weighs_most_on_short_contexts() -> None:
    plain, costly = model(), model(calibration=SimCalibration(attention_seq_layer_s=1e-6))
    for context in (128, 8192):
        step = StepShape(decode_seqs=32, decode_context=32 * context)
        extra = costly.step_breakdown(step)["attention"] - plain.step_breakdown(step)["attention"]
        assert extra == pytest.approx(32 * 32 * 1e-6)
    short, long = (StepShape(decode_seqs=32, decode_context=32 * c) for c in (128, 8192))
    growth = [costly.step_time(s) / plain.step_time(s) for s in (short, long)]
    assert growth[0] > growth[1] > 1.0


def test_fp8_gemms_need_more_tokens_to_fill_the_tensor_cores() -> None:
    h100 = gpu_physics("H100")
    assert h100.gemm["fp8"].fraction(64) < h100.gemm["bf16"].fraction(64)
    assert h100.gemm_for(1).half_tokens == 128 and h100.gemm_for(2).half_tokens == 64


def predicted_tpot(capsys, *extra: str) -> float:
    argv = ["--model", str(LLAMA_8B), "--gpu", "H100", "--isl", "128", "--osl", "64", "--num-prompts", "8",
            "--concurrency", "8", "--warmups", "0", *extra]
    assert predict_main(argv) == 0
    return json.loads(capsys.readouterr().out)["tpot_p50_ms"]


def test_the_engine_version_flag_reaches_the_perf_model_and_a_bad_one_stops_it(capsys) -> None:
    newest, v0 = predicted_tpot(capsys), predicted_tpot(capsys, "--engine-version", "0.2.7")
    assert v0 - newest == pytest.approx((1.5e-3 - 0.4e-3 + 8 * (40e-6 - 5e-6)) * 1e3, rel=0.05)
    with pytest.raises(SystemExit) as exit_info:
        predict_main(["--model", str(LLAMA_8B), "--gpu", "H100", "--engine-version", "latest"])
    assert exit_info.value.code == 2
    assert "argument --engine-version: engine version 'latest'" in capsys.readouterr().err


def test_a_bad_engine_version_in_a_targets_args_is_a_problem_before_any_launch() -> None:
    from hyperloom_assets.core.engines import engine_for

    sim = engine_for("sim")
    assert sim.harness_problems(["--gpu", "H100", "--engine-version", "0.10.0"]) == []
    assert sim.harness_problems(["--gpu", "H100", "--engine-version", "v1-beta"]) == [
        "--engine-version: engine version 'v1-beta': expected dotted numbers such as 0.10.0"]


def test_each_published_case_is_timed_with_its_sources_engine_version() -> None:
    args = argparse.Namespace(no_cases=False, cases=CASES_FILE)
    labels = {case.id: case.model.engine.label for case in _published_cases(args, "H100")}
    assert labels and set(labels.values()) == {"vLLM V0 before 0.6"}  # pull request 2542, January 2024
    assert {case.model.engine.label for case in _published_cases(args, "MI300X")} == {"vLLM V1"}  # 0.10.0
