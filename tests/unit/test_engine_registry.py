"""Adding an engine means adding one module, its grid and its tests: nothing else to edit."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import hyperloom_assets.core.engines as engines_package
from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.decisions.guards import prefix_cache_refusal
from hyperloom_assets.core.engines import engine_for, known_engines
from hyperloom_assets.core.planning.seed_grids import GRIDS_DIR, load_grids
from hyperloom_assets.resources.hosts.preflight import is_serving_cmdline

MODULE = '''
from hyperloom_assets.core.engines.spec import Distribution, EngineSpec, Entry, Startup

def prefix_cache_off(server_args, evidence, version):
    return "--no-prefix-cache asked" if "--no-prefix-cache" in server_args else None

ENGINE = EngineSpec(
    name="toy", listed_at=9, entry=Entry(module="toy.serve"), model_flag="--model", port_flag="--port",
    distributions=(Distribution(name="toy-engine", ships="toy/serve.py"),), release_distribution="toy-engine",
    source_import_root="src", package="toy", prefix_cache_off=prefix_cache_off, fatal_markers=("toy died",),
    startup=Startup(cold_s=30.0), env_prefixes=("TOY_",), grid="toy.yaml",
)
'''
GRID = '''engine: toy
sequence_cap_flag: --max-batch
entries:
  - name: max-batch
    rule: sequence_cap
    flag: --max-batch
    ladder: {concurrency_multipliers: [1, 2]}
'''


@pytest.fixture
def toy_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    extra = tmp_path / "engines"
    extra.mkdir()
    (extra / "toy.py").write_text(MODULE)
    monkeypatch.setattr(engines_package, "__path__", [*engines_package.__path__, str(extra)])
    known_engines.cache_clear()
    yield tmp_path
    known_engines.cache_clear()


def test_one_module_makes_an_engine_known_everywhere(toy_engine: Path, tmp_path: Path) -> None:
    assert list(known_engines())[-1] == "toy" and engine_for("toy").fatal("... toy died ...")
    model = tmp_path / "model"
    model.mkdir()
    target = Target.model_validate({"engine": "toy", "model": str(model), "workload": {"kind": "random", "isl": 8,
                                                                                        "osl": 8, "concurrency": 1}})
    assert target.engine == "toy"
    assert is_serving_cmdline(["python", "-m", "toy.serve", "--model", "m"])
    refusal = prefix_cache_refusal("toy", ["--no-prefix-cache"], None, "agentic")
    assert refusal is not None and "toy" in refusal.message()
    grids = tmp_path / "grids"
    shutil.copytree(GRIDS_DIR, grids)
    (grids / "toy.yaml").write_text(GRID)
    assert load_grids(grids)["toy"].sequence_cap_flag == "--max-batch"


def test_without_the_module_the_engine_is_unknown() -> None:
    with pytest.raises(ValueError, match="unknown engine 'toy'; expected one of vllm, sglang, atom, sim"):
        engine_for("toy")
