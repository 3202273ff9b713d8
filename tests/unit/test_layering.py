"""The layers of docs/design.md hold: pure code never reaches Dagster or the outside world,
and the sim is an engine like any other outside its own spec and package.

Pure code is `hyperloom_assets.core` and the sim. The static check follows every import
statement, so a pure module that reaches Dagster or a resource through another module is
named with the chain that leads there; the runtime check imports all of pure code in a
fresh interpreter and looks at what got loaded, which also catches imports the static
walk cannot see.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import hyperloom_assets

PACKAGE_DIR = Path(hyperloom_assets.__file__).parent
PURE_PACKAGES = ("hyperloom_assets.core", "hyperloom_assets.sim")
# Modules pure code may never reach: Dagster, and everything that acts or orchestrates.
FORBIDDEN = ("dagster", "hyperloom_assets.resources", "hyperloom_assets.assets", "hyperloom_assets.sensors",
             "hyperloom_assets.jobs", "hyperloom_assets.definitions", "hyperloom_assets.cli", "sqlalchemy")

# The sim's package, and the only modules that may know an engine is the sim: the engine
# specs (core/engines: the sim's spec hands its behaviour to the harness) and the sim itself.
SIM_PACKAGE = "hyperloom_assets.sim"
KNOWS_THE_SIM = ("hyperloom_assets.core.engines", SIM_PACKAGE)
# The one module that reads a target's `parallel_trials` and says what `auto` means: `targets check`,
# the fleet resource and the pool take its decision, so they cannot disagree on a run's slots.
DECIDES_SLOTS = "hyperloom_assets.core.fleet.run_slots"


def module_files() -> dict[str, Path]:
    """Every module of the package."""
    found = {}
    paths = [Path(root) / name for root, _, names in os.walk(PACKAGE_DIR)
             for name in names if name.endswith(".py")]
    for path in paths:
        parts = path.relative_to(PACKAGE_DIR).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(("hyperloom_assets", *parts))] = path
    return found


def imports_of(path: Path, module: str) -> set[str]:
    """Every module name an import statement in `path` names (top-level and in functions)."""
    names: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def forbidden(name: str) -> bool:
    return within(name, FORBIDDEN)


def sim_special_cases(path: Path, module: str) -> list[str]:
    """Where a module imports the sim's package or branches on an engine being `.simulated`."""
    found = [f"imports {name}" for name in sorted(imports_of(path, module)) if within(name, (SIM_PACKAGE,))]
    found += [f"line {node.lineno}: .simulated" for node in ast.walk(ast.parse(path.read_text()))
              if isinstance(node, ast.Attribute) and node.attr == "simulated"]
    return found


def parallel_trials_reads(path: Path) -> list[str]:
    """Where a module reads a target's `parallel_trials` (an attribute, or getattr by name)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr == "parallel_trials":
            found.append(f"line {node.lineno}: .parallel_trials")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
              and any(isinstance(arg, ast.Constant) and arg.value == "parallel_trials" for arg in node.args)):
            found.append(f"line {node.lineno}: getattr parallel_trials")
    return found


def chain_to_forbidden(start: str, files: dict[str, Path]) -> list[str] | None:
    """The import chain from `start` to a forbidden module, or None."""
    seen = {start}
    frontier = [[start]]
    while frontier:
        path = frontier.pop(0)
        for name in sorted(imports_of(files[path[-1]], path[-1])):
            if forbidden(name):
                return [*path, name]
            if name in files and name not in seen:
                seen.add(name)
                frontier.append([*path, name])
    return None


def pure_modules(files: dict[str, Path]) -> list[str]:
    return sorted(m for m in files if m.startswith(PURE_PACKAGES) and not m.endswith("__main__"))


def test_no_pure_module_reaches_dagster_or_a_resource_statically() -> None:
    files = module_files()
    assert len(pure_modules(files)) > 30  # the walk found pure code at all
    problems = [" -> ".join(chain) for module in pure_modules(files) if (chain := chain_to_forbidden(module, files))]
    assert problems == []


def test_the_static_walk_sees_a_chain_through_another_module(tmp_path) -> None:
    files = {"hyperloom_assets.core.a": tmp_path / "a.py", "hyperloom_assets.core.b": tmp_path / "b.py"}
    files["hyperloom_assets.core.a"].write_text("from hyperloom_assets.core import b\n")
    files["hyperloom_assets.core.b"].write_text("def f():\n    import dagster\n")
    assert chain_to_forbidden("hyperloom_assets.core.a", files) == [
        "hyperloom_assets.core.a", "hyperloom_assets.core.b", "dagster"]


def test_importing_all_pure_code_loads_no_dagster_and_no_resource() -> None:
    modules = pure_modules(module_files())
    probe = ("import importlib, json, sys\n"
             "for name in sys.argv[1:]:\n"
             "    importlib.import_module(name)\n"
             "print(json.dumps(sorted(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", probe, *modules], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert [name for name in loaded if forbidden(name)] == []


def test_resources_sensors_and_jobs_install_under_the_project_namespace(tmp_path) -> None:
    """From another directory the bare names do not import, and nothing can shadow them."""
    for bare in ("resources", "sensors", "jobs"):
        done = subprocess.run([sys.executable, "-c", f"import {bare}"], capture_output=True, text=True, cwd=tmp_path)
        assert "ModuleNotFoundError" in done.stderr, bare
    shadow = tmp_path / "resources"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise SystemExit('shadowed')\n")
    done = subprocess.run([sys.executable, "-c", "import hyperloom_assets.resources.store.results as s; print(s.__name__)"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0 and "hyperloom_assets.resources.store.results" in done.stdout, done.stderr


def test_every_module_has_one_address_and_the_repository_no_link() -> None:
    """A path-reading tool and a plain grep see each module where its import says it is."""
    listed = subprocess.run(["git", "ls-files", "-s"], capture_output=True, text=True, cwd=PACKAGE_DIR.parent, check=True)
    links = [line.split("\t", 1)[1] for line in listed.stdout.splitlines() if line.startswith("120000 ")]
    assert links == []
    assert all(not path.is_symlink() for path in PACKAGE_DIR.rglob("*") if "__pycache__" not in path.parts)


def test_no_module_imports_the_bare_top_level_names() -> None:
    files = module_files()
    offenders = [f"{module}: {name}" for module, path in files.items() for name in imports_of(path, module)
                 if name.split(".")[0] in ("resources", "sensors", "jobs")]
    assert offenders == []


def test_only_the_engine_specs_and_the_sim_know_an_engine_is_the_sim() -> None:
    offenders = {module: found for module, path in module_files().items()
                 if not within(module, KNOWS_THE_SIM) and (found := sim_special_cases(path, module))}
    assert offenders == {}


def test_a_module_that_imports_or_branches_on_the_sim_is_named(tmp_path) -> None:
    path = tmp_path / "measure.py"
    path.write_text("from hyperloom_assets.sim.timescale import time_scale_of\n"
                    "from hyperloom_assets import sim\n"
                    "def scale(spec, args):\n"
                    "    return time_scale_of(args) if spec.simulated else 1.0\n")
    assert sim_special_cases(path, "hyperloom_assets.resources.measure") == [
        "imports hyperloom_assets.sim", "imports hyperloom_assets.sim.timescale",
        "imports hyperloom_assets.sim.timescale.time_scale_of", "line 4: .simulated"]


def test_only_the_slot_decision_reads_parallel_trials() -> None:
    files = module_files()
    assert DECIDES_SLOTS in files and parallel_trials_reads(files[DECIDES_SLOTS]), "the decision reads it"
    offenders = {module: found for module, path in files.items()
                 if module != DECIDES_SLOTS and (found := parallel_trials_reads(path))}
    assert offenders == {}


def test_a_module_that_reinterprets_auto_is_named(tmp_path) -> None:
    path = tmp_path / "fleet.py"
    path.write_text("def wanted(target, gpus, count):\n"
                    "    parallel = target.parallel_trials\n"
                    "    return len(gpus) // count if parallel == 'auto' else parallel\n"
                    "def auto(target):\n"
                    "    return getattr(target, 'parallel_trials') == 'auto'\n")
    assert parallel_trials_reads(path) == ["line 2: .parallel_trials", "line 5: getattr parallel_trials"]
