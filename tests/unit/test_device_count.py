"""One device count per launch (core/fleet/slots.py, devices_per_launch), whatever the engine
spells its size flags: the roofline's hardware, tok/s per GPU and the slot agree; the roofline
of tensor x pipeline x data parallel; and a TP8 measurement is not above a TP8 ceiling."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hyperloom_assets.assets.checks import no_measurement_above_roofline
from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.fleet.slots import devices_per_launch
from hyperloom_assets.core.measurement.measurement import RequestRecord
from hyperloom_assets.core.measurement.metrics import latency_of
from hyperloom_assets.core.report.pareto import run_frontier
from hyperloom_assets.core.roofline.gpus import gpu_spec
from hyperloom_assets.core.roofline.model_shape import load_shape
from hyperloom_assets.core.roofline.position import positions
from hyperloom_assets.core.roofline.roofline import decode_roofline, gpu_hardware, workload_roofline
from hyperloom_assets.resources.hosts.hardware import target_hardware
from hyperloom_assets.sim.predict import predict
from tests.conftest import SIM_MODEL

LAYOUTS = [
    ("sglang", ["--tp-size", "8"], 8),
    ("vllm", ["-tp", "4"], 4),
    ("atom", ["-tp", "8"], 8),
    ("vllm", ["--tensor-parallel-size", "2", "--pipeline-parallel-size", "2"], 4),
    ("sglang", ["--tp-size", "2", "--pp-size", "2"], 4),
    ("vllm", ["--data-parallel-size", "4"], 4),
    ("atom", ["-dp", "4"], 4),
]


class H100Host:
    """A GPU host as the roofline asks it: the cards it detects."""

    def gpu_names(self) -> list[str]:
        return ["NVIDIA H100 80GB HBM3"]


def measured_row(tok_s: float, args: list[str], concurrency: int = 8) -> dict:
    records = [RequestRecord(ok=True, prompt_tokens=8, output_tokens=5, ttft_s=0.05, e2el_s=0.09, itl_s=[0.01] * 4)
               for _ in range(20)]
    latency = latency_of(records)
    return {"id": 1, "kind": "baseline", "fingerprint": None, "argv": args,
            "measurement": {"output_throughput": tok_s, "tpot_p50_ms": latency.tpot_ms.p50,
                            "workload": {"concurrency": concurrency}, "latency": latency.model_dump(mode="json")}}


@pytest.mark.parametrize("engine, args, devices", LAYOUTS)
def test_the_roofline_and_tok_s_per_gpu_count_every_device_a_launch_takes(engine, args, devices) -> None:
    hardware, warnings = target_hardware(SimpleNamespace(engine=engine, server_args=args), H100Host(), "bfloat16")
    assert warnings == [] and hardware.devices == devices == devices_per_launch(engine, args)
    assert hardware.mem_bw_gbps == pytest.approx(gpu_spec("H100").mem_bw_gbps * devices)
    found = run_frontier([measured_row(8000.0, args)], engine, args, keepers=[], trials=[])
    assert found.devices == devices and found.points[0].tok_s_per_gpu == pytest.approx(8000.0 / devices)


def test_data_parallel_replicas_and_pipeline_micro_batches_each_read_the_weights() -> None:
    shape = load_shape(SIM_MODEL)

    def ceiling(hardware, batch: int) -> float:
        return decode_roofline(shape, hardware, batch, 320.0).ceiling_tok_s

    one, tp2, tp4 = gpu_hardware("H100"), gpu_hardware("H100", 2), gpu_hardware("H100", 4)
    dp4 = gpu_hardware("H100", 1, data_parallel=4)
    assert (dp4.devices, dp4.weight_passes, dp4.name) == (4, 4, "H100 x4 (DP4)")
    assert ceiling(dp4, 64) == pytest.approx(4 * ceiling(one, 16)), "four replicas, a quarter of the batch each"
    assert ceiling(dp4, 2) == pytest.approx(2 * ceiling(one, 1)), "two replicas have a sequence, two are idle"
    pp = gpu_hardware("H100", 2, pipeline_parallel=2)
    assert ceiling(pp, 64) == pytest.approx(2 * ceiling(tp2, 32)), "two micro-batches, each through both stages"
    assert ceiling(tp2, 64) < ceiling(pp, 64) < ceiling(tp4, 64), "memory-bound: PP re-reads what TP splits"
    tp8 = gpu_hardware("H100", 8)
    assert tp8.weight_passes == 1 and ceiling(tp8, 64) == pytest.approx(
        decode_roofline(shape, one, 64, 320.0).memory_bound_tok_s * 8), "TP splits each weight: one pass, 8x bandwidth"


@pytest.mark.parametrize("engine, args", [
    ("sglang", ["--tp-size", "8"]),                                  # a real SGLang on a host of H100s
    ("sim", ["--gpu", "H100", "--tp", "8", "--flavor", "sglang"]),  # the sim flavoured as SGLang
])
def test_a_tp8_measurement_is_held_to_a_tp8_ceiling(engine, args) -> None:
    # The measurement: what the sim's model says TP8 serves on H100s, 2.3x what one H100 allows.
    workload = Workload(kind="random", isl=256, osl=128, concurrency=64, num_prompts=128)
    measured = predict(SIM_MODEL, "H100", [], workload, flavor="sglang", tp=8).output_throughput
    shape = load_shape(SIM_MODEL)
    assert measured > workload_roofline(shape, gpu_hardware("H100", 1, shape.dtype), workload).ceiling_tok_s
    hardware, _ = target_hardware(SimpleNamespace(engine=engine, server_args=args), H100Host(), shape.dtype)
    check = no_measurement_above_roofline(*positions([measured_row(measured, args, 64)], shape, hardware,
                                                     workload_roofline(shape, hardware, workload)))
    assert check.passed, check.description
