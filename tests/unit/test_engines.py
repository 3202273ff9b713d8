"""Engines: argv, served model name, timeouts, identity, the registry."""

import subprocess
import sys
from pathlib import Path

import pytest

from hyperloom_assets.core.engines import UnknownEngine, engine_for, engine_names
from hyperloom_assets.core.engines.spec import Installed
from hyperloom_assets.resources.hosts.engines import identity, installed_in, server_argv

PY = Path("/venv/bin/python")
MODEL = Path("/models/tiny")


def test_vllm_argv_runs_the_api_server_module_with_the_operator_args_last():
    argv = engine_for("vllm").build_argv(PY, MODEL, 8123, ["--max-num-seqs", "4", "--enforce-eager"])
    assert argv == [
        "/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/tiny",
        "--port", "8123", "--host", "127.0.0.1", "--max-num-seqs", "4", "--enforce-eager",
    ]


def test_sim_argv_runs_the_hyperloom_subcommand():
    argv = engine_for("sim").build_argv(PY, MODEL, 9000, ["--gpu", "H100", "--flavor", "sglang"])
    assert argv == [
        "/venv/bin/python", "-m", "hyperloom_assets.cli", "sim-serve", "--model", "/models/tiny",
        "--port", "9000", "--host", "127.0.0.1", "--gpu", "H100", "--flavor", "sglang",
    ]


def test_sim_atom_flavor_takes_its_http_port_as_atom_does():
    argv = engine_for("sim").build_argv(PY, MODEL, 9001, ["--gpu", "MI300X", "--flavor", "atom"])
    assert argv[4:8] == ["--model", "/models/tiny", "--server-port", "9001"]


def test_sglang_and_atom_use_their_own_model_and_port_flags():
    sglang = engine_for("sglang").build_argv(PY, MODEL, 30000, [])
    assert sglang[2:8] == ["sglang.launch_server", "--model-path", "/models/tiny", "--port", "30000", "--host"]
    atom = engine_for("atom").build_argv(PY, MODEL, 8888, ["--enable_prefix_caching"])
    assert atom[2:7] == ["atom.entrypoints.openai_server", "--model", "/models/tiny", "--server-port", "8888"]
    assert atom[-1] == "--enable_prefix_caching"


def test_served_model_is_the_served_model_name_when_given():
    vllm = engine_for("vllm")
    assert vllm.served_model(MODEL, []) == "/models/tiny"
    assert vllm.served_model(MODEL, ["--served-model-name", "tiny"]) == "tiny"
    assert vllm.served_model(MODEL, ["--served-model-name=tiny2"]) == "tiny2"


def test_unknown_engine_names_the_known_ones():
    with pytest.raises(UnknownEngine, match="expected one of vllm, sglang, atom, sim"):
        engine_for("trt")
    assert engine_names() == ("vllm", "sglang", "atom", "sim")


def test_vllm_startup_timeout_is_shorter_once_compile_caches_exist(tmp_path):
    vllm = engine_for("vllm")
    env = {"VLLM_CACHE_ROOT": str(tmp_path)}
    cold = vllm.startup.timeout_s(env)
    (tmp_path / "torch_compile_cache" / "abc").mkdir(parents=True)
    warm = vllm.startup.timeout_s(env)
    assert cold == 300.0 and warm < cold


@pytest.mark.parametrize("engine, cache", [("sglang", ".cache/sglang"), ("atom", ".cache/atom")])
def test_jit_engines_get_the_reference_budget_while_their_caches_are_cold(tmp_path, engine, cache):
    spec = engine_for(engine)
    env = {"HOME": str(tmp_path)}
    assert spec.startup.timeout_s(env) == 9000.0
    (tmp_path / cache / "kernels").mkdir(parents=True)
    assert spec.startup.timeout_s(env) == 900.0


def test_evidence_dispatch_per_engine():
    vllm_line = "INFO non-default args: {'max_num_seqs': 4}"
    sglang_line = "[t] server_args=ServerArgs(disable_radix_cache=True)"
    assert engine_for("vllm").parse_evidence(vllm_line) == {"max_num_seqs": 4}
    assert engine_for("sglang").parse_evidence(sglang_line) == {"disable_radix_cache": True}
    assert engine_for("sim").parse_evidence(sglang_line) == {"disable_radix_cache": True}
    assert engine_for("atom").parse_evidence(vllm_line) is None


def test_identity_reads_the_serving_environment():
    vllm = engine_for("vllm")
    found = installed_in(vllm, Path(sys.executable))
    text = identity(vllm, found)
    assert text is not None and text.startswith("vllm")
    assert found.genuine and found.distribution == text.split()[0] and found.version == text.split()[1]
    assert installed_in(engine_for("atom"), Path(sys.executable)) is None


def _venv_with(tmp_path: Path, files: dict[str, str]) -> Path:
    """A throwaway venv whose site-packages hold the given files (dist-info included)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python*/site-packages"))
    for relative, text in files.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_text(text)
    return venv / "bin" / "python"


def _atom_dist(version: str, files: list[str]) -> dict[str, str]:
    info = f"atom-{version}.dist-info"
    record = "\n".join([*files, f"{info}/METADATA,,", f"{info}/RECORD,,"]) + "\n"
    return {**{f: "" for f in files}, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: atom\nVersion: {version}\n",
            f"{info}/RECORD": record}


def test_a_namesake_distribution_is_not_taken_for_the_engine(tmp_path):
    # PyPI's `atom` (nucleic's) installs an `atom` package too, but not ROCm's server module.
    python = _venv_with(tmp_path, _atom_dist("0.13.0", ["atom/__init__.py", "atom/api.py"]))
    found = installed_in(engine_for("atom"), python)
    assert found == Installed(distribution="atom", version="0.13.0", genuine=False)
    assert identity(engine_for("atom"), found) == (
        "atom 0.13.0 (not the atom engine: it lacks atom/entrypoints/openai_server.py)")


def test_the_engine_is_recognised_by_the_file_it_ships(tmp_path):
    python = _venv_with(tmp_path, _atom_dist("0.1.5", ["atom/__init__.py", "atom/entrypoints/openai_server.py"]))
    found = installed_in(engine_for("atom"), python)
    assert found == Installed(distribution="atom", version="0.1.5", genuine=True)
    assert server_argv(engine_for("atom"), python, MODEL, 8000, [], found)[2] == "atom.entrypoints.openai_server"


def test_a_release_of_the_sim_starts_from_its_own_module():
    installed = Installed(distribution="hyperloom-sim-engine", version="9.0.0", genuine=True)
    argv = server_argv(engine_for("sim"), PY, MODEL, 9000, ["--gpu", "H100"], installed)
    assert argv[2:4] == ["hyperloom_sim_engine", "--model"]
    assert server_argv(engine_for("sim"), PY, MODEL, 9000, [], None)[2:4] == ["hyperloom_assets.cli", "sim-serve"]


def test_a_namesake_is_refused_before_any_server_starts(tmp_path, host):
    from hyperloom_assets.core.measurement.serving import ServerError, ServerSpec
    from hyperloom_assets.resources.hosts.process_group import read_pidfiles

    python = _venv_with(tmp_path, _atom_dist("0.13.0", ["atom/__init__.py"]))
    spec = ServerSpec(engine="atom", model=MODEL, python=python)
    with pytest.raises(ServerError, match="preflight: .*atom 0.13.0 \\(not the atom engine"):
        with host.serve(spec, tmp_path / "run"):
            pass
    assert not (tmp_path / "run" / "server.log").exists() and read_pidfiles(host.pid_dir()) == []


def test_every_env_knob_of_a_grid_carries_its_engines_prefix():
    from hyperloom_assets.core.planning.seed_grids import load_grids

    for engine, grid in load_grids().items():
        names = {e.env_var for e in grid.entries if e.env_var} | {n for e in grid.entries for n in e.set_env}
        names |= {k for k in grid.ablation_rules if not k.startswith("-")}
        prefixes = engine_for(engine).env_prefixes
        assert prefixes and all(name.startswith(prefixes) for name in names), (engine, names)


def test_the_final_command_leaves_out_the_profiler_the_baseline_carried_unless_the_operator_set_it() -> None:
    """With no keeper the final command is the baseline's launch, which carried our profiler."""
    from hyperloom_assets.core.config.targets import Target
    from hyperloom_assets.core.engines.vllm import profiler_args
    from hyperloom_assets.core.planning.stack import final_command

    ours = profiler_args("/tmp/trace")
    launched = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m", "--max-num-seqs", "4", *ours]
    target = Target.model_validate({"engine": "vllm", "model": "m", "server_args": ["--max-num-seqs", "4"],
                                    "workload": {"kind": "random", "isl": 8, "osl": 8, "concurrency": 1}})
    assert "--profiler-config" not in final_command(target, launched)
    assert final_command(target, launched)[-2:] == ["--max-num-seqs", "4"]
    operators = target.model_copy(update={"server_args": ["--max-num-seqs", "4", *ours]})
    assert "--profiler-config" in final_command(operators, launched), "the operator's own profiler flag stays"
