"""Engine adapters: argv, served model name, timeouts, identity."""

import sys
from pathlib import Path

import pytest

from hyperloom_assets.resources.hosts.engines import adapter_for

PY = Path("/venv/bin/python")
MODEL = Path("/models/tiny")


def test_vllm_argv_runs_the_api_server_module_with_the_operator_args_last():
    argv = adapter_for("vllm").build_argv(PY, MODEL, 8123, ["--max-num-seqs", "4", "--enforce-eager"])
    assert argv == [
        "/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/tiny",
        "--port", "8123", "--host", "127.0.0.1", "--max-num-seqs", "4", "--enforce-eager",
    ]


def test_sim_argv_runs_the_hyperloom_subcommand():
    argv = adapter_for("sim").build_argv(PY, MODEL, 9000, ["--gpu", "H100", "--flavor", "sglang"])
    assert argv == [
        "/venv/bin/python", "-m", "hyperloom_assets.cli", "sim-serve", "--model", "/models/tiny",
        "--port", "9000", "--host", "127.0.0.1", "--gpu", "H100", "--flavor", "sglang",
    ]


def test_sglang_and_atom_use_their_own_model_and_port_flags():
    sglang = adapter_for("sglang").build_argv(PY, MODEL, 30000, [])
    assert sglang[2:8] == ["sglang.launch_server", "--model-path", "/models/tiny", "--port", "30000", "--host"]
    atom = adapter_for("atom").build_argv(PY, MODEL, 8888, ["--enable_prefix_caching"])
    assert atom[2:7] == ["atom.entrypoints.openai_server", "--model", "/models/tiny", "--server-port", "8888"]
    assert atom[-1] == "--enable_prefix_caching"


def test_served_model_is_the_served_model_name_when_given():
    vllm = adapter_for("vllm")
    assert vllm.served_model(MODEL, []) == "/models/tiny"
    assert vllm.served_model(MODEL, ["--served-model-name", "tiny"]) == "tiny"
    assert vllm.served_model(MODEL, ["--served-model-name=tiny2"]) == "tiny2"


def test_unknown_engine_names_the_known_ones():
    with pytest.raises(ValueError, match="atom"):
        adapter_for("trt")


def test_vllm_startup_timeout_is_shorter_once_compile_caches_exist(tmp_path):
    vllm = adapter_for("vllm")
    env = {"VLLM_CACHE_ROOT": str(tmp_path)}
    cold = vllm.startup_timeout_s(env)
    (tmp_path / "torch_compile_cache" / "abc").mkdir(parents=True)
    warm = vllm.startup_timeout_s(env)
    assert cold == 300.0 and warm < cold


def test_evidence_dispatch_per_engine():
    vllm_line = "INFO non-default args: {'max_num_seqs': 4}"
    sglang_line = "[t] server_args=ServerArgs(disable_radix_cache=True)"
    assert adapter_for("vllm").parse_evidence(vllm_line) == {"max_num_seqs": 4}
    assert adapter_for("sglang").parse_evidence(sglang_line) == {"disable_radix_cache": True}
    assert adapter_for("sim").parse_evidence(sglang_line) == {"disable_radix_cache": True}
    assert adapter_for("atom").parse_evidence(vllm_line) is None


def test_identity_reads_the_serving_environment():
    vllm = adapter_for("vllm")
    identity = vllm.identity(Path(sys.executable))
    assert identity is not None and identity.startswith("vllm")
    assert vllm.distribution(Path(sys.executable)) == identity.split()[0]
    assert vllm.version(Path(sys.executable)) == identity.split()[1]
    assert adapter_for("atom").identity(Path(sys.executable)) is None
    assert adapter_for("atom").distribution() == "atom"
