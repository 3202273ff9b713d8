"""Serving from a tree: the env that makes a server import the engine from it, and the proof.

The launcher adds the tree's import root (and the origin reporter, a sitecustomize) to
the server's PYTHONPATH; the server writes where its engine package came from into its
log; a launch whose engine came from anywhere else fails, before a request is measured.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Mapping

from hyperloom_assets.core.engines.spec import EngineSpec
from hyperloom_assets.core.measurement.serving import ServerError, ServerSpec

REPORTER_DIR = Path(__file__).parent / "engine_origin_site"
_REPORT = re.compile(r"hyperloom-engine-origin: (\S+) (.+?) pid=(\d+)\s*$", re.MULTILINE)
IMPORT_CHECK_TIMEOUT_S = 300


def tree_launch_env(engine: EngineSpec, tree: Path, env: Mapping[str, str]) -> dict[str, str]:
    """`env` plus what makes a server import the engine from `tree` (its import root, the origin reporter)."""
    return {**env, **engine.tree_env(tree, env.get("PYTHONPATH"), REPORTER_DIR)}


def reported_origins(log_text: str, package: str) -> list[str]:
    """Every file the server's processes said the package came from, in log order."""
    return [m.group(2) for m in _REPORT.finditer(log_text) if m.group(1) == package]


def _inside(path: str, folder: Path) -> bool:
    resolved, root = Path(path).resolve(), folder.resolve()
    return resolved == root or root in resolved.parents


def origin_problem(origins: list[str], engine: EngineSpec, tree: Path) -> str | None:
    """Why the launch did not serve the tree's engine, or None when every process did."""
    package_dir = engine.import_root(tree) / engine.package
    if not origins:
        return f"the server never reported where its {engine.package!r} package came from"
    elsewhere = [o for o in origins if o == "None" or not _inside(o, package_dir)]
    if elsewhere:
        return f"the server imported {engine.package!r} from {elsewhere[0]}, not from the tree ({package_dir})"
    return None


def served_engine_path(spec: ServerSpec, engine: EngineSpec, log_text: str, argv: list[str]) -> str | None:
    """The engine file the server reported; ServerError when a tree launch ran other code."""
    origins = reported_origins(log_text, engine.package)
    if spec.framework_tree is None:
        return origins[0] if origins else None
    problem = origin_problem(origins, engine, spec.framework_tree)
    if problem:
        raise ServerError("engine_not_from_tree", problem, argv=argv)
    return origins[0]


def check_tree_imports(engine: EngineSpec, tree: Path, python: Path, env: Mapping[str, str]) -> str:
    """Import the engine's package from the tree under the serving interpreter, before any launch.

    Returns the file it came from; ServerError("preflight") carries the import's own error.
    """
    launch_env = tree_launch_env(engine, tree, env)
    code = f"import {engine.package} as m; print(m.__file__)"
    done = subprocess.run([str(python), "-c", code], env=launch_env, capture_output=True, text=True,
                          timeout=IMPORT_CHECK_TIMEOUT_S)
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        raise ServerError("preflight", f"framework_tree {tree}: the {engine.name} engine does not import: "
                                       f"{lines[-1] if lines else 'exit code %d' % done.returncode}",
                          log_tail="\n".join(lines[-20:]))
    problem = origin_problem(reported_origins(done.stderr, engine.package), engine, tree)
    if problem:
        raise ServerError("preflight", f"framework_tree {tree}: {problem}")
    return done.stdout.strip().splitlines()[-1]
