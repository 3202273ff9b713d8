"""Slots (core/fleet/slots.py): how many devices a launch takes, which ones, which CPUs go with them."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperloom_assets.core.fleet.slots import (
    SlotError,
    choose_devices,
    device_env,
    devices_per_launch,
    parse_nvidia_topo,
    plan_slot,
    slot_cpus,
    vendor_of,
)

TOOLS = Path(__file__).parents[1] / "fixtures" / "gpu_tools"


@pytest.mark.parametrize("engine, args, devices", [
    ("vllm", [], 1),
    ("vllm", ["--tensor-parallel-size", "4"], 4),
    ("vllm", ["-tp", "2", "--pipeline-parallel-size=2"], 4),
    ("vllm", ["-tp", "2", "-dp", "2", "--max-num-seqs", "8"], 4),
    ("sglang", ["--tp-size", "2", "--pp-size", "2"], 4),
    ("sglang", ["--tp-size", "2", "--dp-size", "2"], 4),
    ("sglang", ["--tp-size", "4", "--dp-size", "2", "--enable-dp-attention"], 4),  # DP attention splits TP's GPUs
    ("atom", ["-tp", "8"], 8),
    ("atom", ["--tensor-parallel-size", "2", "--data-parallel-size", "2"], 4),
    ("sim", ["--gpu", "H100", "--tp", "2"], 2),
])
def test_a_launch_takes_tensor_x_pipeline_x_data_parallel_devices_from_its_engines_own_flags(engine, args,
                                                                                               devices) -> None:
    assert devices_per_launch(engine, args) == devices


def test_a_size_that_is_not_a_positive_number_names_its_flag() -> None:
    with pytest.raises(SlotError, match=r"server_args --tensor-parallel-size 'two'"):
        devices_per_launch("vllm", ["--tensor-parallel-size", "two"])
    with pytest.raises(SlotError, match="--tp '0'"):
        devices_per_launch("sim", ["--tp", "0"])


def test_the_topology_matrix_reads_gpu_pairs_and_ignores_nics_and_affinity() -> None:
    pcie = parse_nvidia_topo((TOOLS / "nvidia_smi_topo_6gpu_pcie.txt").read_text())
    assert len(pcie) == 6 * 5 and pcie[(0, 1)] == "PIX" and pcie[(1, 2)] == "NODE" and pcie[(3, 4)] == "SYS"
    nvswitch = parse_nvidia_topo((TOOLS / "nvidia_smi_topo_8gpu_nvswitch_trimmed.txt").read_text())
    assert len(nvswitch) == 8 * 7 and set(nvswitch.values()) == {"NV18"}
    assert parse_nvidia_topo("No devices were found") == {}


def test_a_slot_takes_the_devices_behind_one_bridge_before_lower_ids() -> None:
    links = parse_nvidia_topo((TOOLS / "nvidia_smi_topo_6gpu_pcie.txt").read_text())
    assert choose_devices([0, 1, 2, 3, 4, 5], 2, links) == (0, 1)
    assert choose_devices([1, 2, 3, 4, 5], 2, links) == (2, 3), "1-2 cross host bridges (NODE); 2-3 share one"
    assert choose_devices([0, 2, 4, 5], 2, links) == (4, 5), "0-2 is NODE, 4-5 PIX"
    assert choose_devices([0, 1, 2, 3, 4, 5], 4, links) == (0, 1, 2, 3), "one NUMA node rather than SYS"
    assert choose_devices([1, 3], 2, links) == (1, 3) and choose_devices([1], 2, links) is None
    assert choose_devices([5, 2, 7], 2) == (2, 5), "no topology: the lowest ids"


def test_each_device_owns_an_equal_share_of_the_cpus_and_slots_never_share_one() -> None:
    assert slot_cpus([0, 1], [0, 1], (0,)) == (0,) and slot_cpus([0, 1], [0, 1], (1,)) == (1,)
    assert slot_cpus(list(range(16)), [0, 1, 2, 3], (2, 3)) == tuple(range(8, 16))
    assert slot_cpus(list(range(10)), [0, 1, 2, 3], (0,)) == (0, 1, 2), "the first shares one CPU longer"
    shares = [set(slot_cpus(list(range(10)), [4, 5, 6, 7], (d,))) for d in (4, 5, 6, 7)]
    assert set().union(*shares) == set(range(10)) and sum(map(len, shares)) == 10
    assert slot_cpus([0], [0, 1], (1,)) == (0,), "fewer CPUs than devices: they share round-robin"


def test_the_server_sees_its_devices_through_its_vendors_variable() -> None:
    assert device_env("nvidia", (2, 3)) == {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert device_env("amd", (0,)) == {"HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "0"}
    assert [vendor_of(tool) for tool in ("nvidia-smi", "amd-smi", "rocm-smi", None)] == ["nvidia", "amd", "amd", "none"]


def test_a_slot_is_planned_among_free_devices_and_a_launch_larger_than_the_host_is_refused() -> None:
    slot = plan_slot("gpu-a", [0, 1, 2, 3], {0}, 2, [0, 1, 2, 3, 4, 5, 6, 7])
    assert slot.devices == (1, 2) and slot.cpus == (2, 3, 4, 5)
    assert plan_slot("gpu-a", [0, 1, 2, 3], {0, 1, 2}, 2, [0, 1]) is None, "none free now: the run waits"
    with pytest.raises(SlotError, match=r"a launch needs 8 devices .* host 'gpu-a' declares 4 in gpus"):
        plan_slot("gpu-a", [0, 1, 2, 3], set(), 8, [0, 1])
