"""What a stand-in engine decides for the harness, asked through its spec: its time scale,
the GPU its flags name, what its launch noise depends on, how its profile is taken and named."""

from __future__ import annotations

from types import SimpleNamespace

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.profile.trace import ProfileSummary
from hyperloom_assets.core.results import ProfileResult
from hyperloom_assets.core.roofline.roofline import gpu_hardware
from hyperloom_assets.resources.hosts.hardware import target_hardware

SIM_ARGS = ["--gpu", "MI300X", "--tp", "2", "--time-scale", "20", "--flavor", "sglang", "--max-running-requests", "8"]


def test_the_sim_names_its_gpu_and_a_real_engine_names_none() -> None:
    assert engine_for("sim").named_gpu(SIM_ARGS) == ("MI300X", 2)
    assert engine_for("sim").named_gpu([]) == ("H100", 1)
    assert engine_for("vllm").named_gpu(["--tensor-parallel-size", "2"]) is None


def test_a_named_gpu_is_the_roofline_hardware_without_asking_the_host() -> None:
    target = SimpleNamespace(engine="sim", server_args=SIM_ARGS)
    hardware, warnings = target_hardware(target, host=None, weight_dtype="bfloat16")
    assert (hardware, warnings) == (gpu_hardware("MI300X", 2, "bfloat16"), [])


def test_the_sim_s_launch_noise_identity_holds_its_harness_flags() -> None:
    sim = engine_for("sim").noise_identity("hyperloom-assets 0.1", SIM_ARGS)
    assert sim == "hyperloom-assets 0.1 --flavor=sglang --gpu=MI300X --time-scale=20 --tp=2"
    assert engine_for("sim").noise_identity("v", []) == "v ", "no harness flags: the key earlier runs wrote"
    assert engine_for("vllm").noise_identity("vllm 0.9", ["--max-num-seqs", "8"]) == "vllm 0.9"


def test_the_sim_s_profile_needs_no_warm_up_and_speaks_of_its_model() -> None:
    sim, vllm = engine_for("sim"), engine_for("vllm")
    assert (sim.profiler.warms_up, vllm.profiler.warms_up) == (False, True)
    summary = ProfileSummary(time_base="device", window_ms=1.0, category_ms={}, shares_pct={}, top_ops=[], events=0)
    evidence = ProfileResult(engine="sim", taken=True, summary=summary, source=sim.profile_source()).evidence()
    assert evidence["source"] == "sim performance model"
    real = ProfileResult(engine="vllm", taken=True, summary=summary, source=vllm.profile_source()).evidence()
    assert real["source"] == "vllm torch profiler"
    assert sim.profile_source().time_unit == "simulated ms" and vllm.profile_source().time_unit == "ms"
