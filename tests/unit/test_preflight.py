"""Preflight parsers on real GPU tool outputs; foreign-server detection; ports."""

import socket
from pathlib import Path

import pytest

from hyperloom_assets.resources.hosts.preflight import (
    GpuToolOutputError,
    allocate_port,
    busy_gpus,
    is_serving_cmdline,
    parse_amd_smi,
    parse_nvidia_smi,
    parse_rocm_smi,
    port_free,
    read_gpu_memory,
)

TOOLS = Path(__file__).parents[1] / "fixtures" / "gpu_tools"


def test_nvidia_smi_with_header_units_and_extra_columns():
    gpus = parse_nvidia_smi((TOOLS / "nvidia_smi_rtx4090_csv.txt").read_text())
    assert len(gpus) == 1
    assert (gpus[0].index, gpus[0].name, gpus[0].used_mib, gpus[0].total_mib) == (1, "NVIDIA GeForce RTX 4090", 18324, 24564)
    assert busy_gpus(gpus) == gpus


def test_nvidia_smi_noheader_nounits_rows():
    gpus = parse_nvidia_smi("0, NVIDIA H100 80GB HBM3, 1, 81559\n1, NVIDIA H100 80GB HBM3, 40960, 81559\n")
    assert [gpu.index for gpu in busy_gpus(gpus)] == [1]


def test_nvidia_smi_garbage_is_an_error_not_an_idle_gpu():
    with pytest.raises(GpuToolOutputError):
        parse_nvidia_smi("0, H100, [N/A], 81559\n")


def test_rocm_smi_json():
    gpus = parse_rocm_smi((TOOLS / "rocm_smi_rx7900xt_meminfo_vram.json").read_text())
    assert len(gpus) == 1 and gpus[0].index == 0 and gpus[0].name == "Radeon RX 7900 XT"
    assert gpus[0].total_mib == pytest.approx(21458059264 / 2**20)
    assert gpus[0].used_mib == pytest.approx(27856896 / 2**20)
    assert busy_gpus(gpus) == []  # 0.13% in use


def test_rocm_smi_ignores_the_system_entry_and_banner():
    text = 'WARNING: something\n{"card1": {"VRAM Total Memory (B)": "100", "VRAM Total Used Memory (B)": "50"}, "system": {"Driver version": "6"}}'
    gpus = parse_rocm_smi(text)
    assert [(gpu.index, gpu.used_fraction) for gpu in gpus] == [(1, 0.5)]


def test_amd_smi_list_form():
    gpus = parse_amd_smi((TOOLS / "amd_smi_metric_rx6600_list.json").read_text())
    assert [(gpu.index, gpu.used_mib, gpu.total_mib) for gpu in gpus] == [(0, 202, 8176)]
    assert busy_gpus(gpus) == gpus  # 2.5% in use


def test_amd_smi_gpu_data_form():
    gpus = parse_amd_smi((TOOLS / "amd_smi_metric_gpu_data.json").read_text())
    assert [(gpu.index, gpu.used_mib, gpu.total_mib) for gpu in gpus] == [(0, 20450, 30576)]


def test_amd_smi_without_mem_usage_is_an_error():
    with pytest.raises(GpuToolOutputError):
        parse_amd_smi('[{"gpu": 0, "usage": {}}]')


def test_read_gpu_memory_picks_the_tool_the_host_has():
    sample = (TOOLS / "rocm_smi_rx7900xt_meminfo_vram.json").read_text()
    calls = []

    def run(argv):
        calls.append(argv)
        return sample

    tool, gpus = read_gpu_memory(run=run, which=lambda name: "/opt/rocm/bin/rocm-smi" if name == "rocm-smi" else None)
    assert tool == "rocm-smi" and calls[0][:3] == ["rocm-smi", "--showmeminfo", "vram"]
    assert gpus[0].name == "Radeon RX 7900 XT"
    assert read_gpu_memory(run=run, which=lambda name: None) is None


@pytest.mark.parametrize("cmdline", [
    ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"],
    ["/v/bin/vllm", "serve", "m"],
    ["python3", "-m", "sglang.launch_server", "--model-path", "m"],
    ["python", "-m", "atom.entrypoints.openai_server", "--model", "m"],
    ["/v/bin/python", "-m", "hyperloom_assets.cli", "sim-serve", "--model", "m"],
    ["/v/bin/hyperloom", "sim-serve", "--model", "m"],
])
def test_serving_processes_are_recognised(cmdline):
    assert is_serving_cmdline(cmdline)


@pytest.mark.parametrize("cmdline", [
    ["pytest", "-k", "sim-serve"],
    ["grep", "vllm.entrypoints"],
    ["/v/bin/hyperloom", "bench", "--base-url", "x"],
    ["python", "-m", "vllm.entrypoints.cli.main", "bench", "serve"],
    ["/v/bin/vllm", "bench", "serve"],
    [],
])
def test_other_processes_are_not_servers(cmdline):
    assert not is_serving_cmdline(cmdline)


def test_port_checks():
    port = allocate_port()
    assert port_free(port)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        assert not port_free(port)


def test_host_preflight_names_a_foreign_server_and_a_busy_port(tmp_path):
    import subprocess
    import sys
    import time

    from hyperloom_assets.core.measurement.serving import ServerError
    from hyperloom_assets.resources.hosts.local import LocalHost

    host = LocalHost(state_dir=str(tmp_path))
    assert host.gpu_names() == [] or all(host.gpu_names())
    # A process whose argv looks like a sim server (it only sleeps), alive for a moment.
    look_alike = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)",
                                   "hyperloom_assets.cli", "sim-serve", "--model", "m"])
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy_port = holder.getsockname()[1]
        time.sleep(0.1)
        with pytest.raises(ServerError) as caught:
            host.preflight(busy_port)
    finally:
        look_alike.kill()
        look_alike.wait()
        holder.close()
    assert caught.value.error_class == "preflight"
    assert f"pid {look_alike.pid}" in str(caught.value)
    assert f"port {busy_port} is in use" in str(caught.value)
