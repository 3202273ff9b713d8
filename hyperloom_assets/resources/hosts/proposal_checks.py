"""The host-side checks of a model's proposals: the engine's parser, `git apply --check`, git's paths.

Both run where the engine serves (in-process for the local host, through `hyperloom
host-agent proposal_checks` for an SSH host): the parser is the serving interpreter's
own engine (parser_probe.py runs in it), and a patch is checked against the tree that
engine would be imported from: the target's framework_tree, else the installed
package's folder. git's own account of the paths each patch touches (`git apply --numstat
-z --summary`, with the modes the tree's files have) goes back beside git's verdict, for
the guard to judge (core/patches/git_paths.py).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from hyperloom_assets.core.engines import speaking
from hyperloom_assets.core.engines.spec import EngineSpec
from hyperloom_assets.resources.hosts import host_side, parser_probe
from hyperloom_assets.resources.trees.patch_paths import PatchPathsError, git_patch_paths, with_file_modes

PROBE_SOURCE = Path(parser_probe.__file__).read_text()
PROBE_TIMEOUT_S = 180.0  # importing a real engine's arg module (vLLM pulls torch) on a busy host
GIT_TIMEOUT_S = 30.0


def checks_request(spec: EngineSpec, server_args: list[str], python: str, argvs: list[list[str]], *,
                   patches: list[str] = (), tree: str | None = None, source_files: list[str] = (),
                   max_source_bytes: int = 0) -> dict:
    """The request `proposal_checks` takes: the engine's parser (a stand-in's for its flavor) over `argvs`."""
    parser = spec.cli_parser
    probe = {"parser_class": parser.parser_class if parser else "argparse:ArgumentParser",
             "builder": parser.builder if parser else "", "package": spec.package,
             "builder_args": [speaking(spec.name, server_args).name] if spec.flavor_of else [],
             "prefix": [spec.model_flag, "m"], "argvs": argvs,
             "source_files": list(source_files), "max_source_bytes": max_source_bytes}
    return {"python": python, "probe": probe, "patches": list(patches), "tree": tree, "engine": spec.name}


def git_apply_check(tree: Path, patch: str) -> str | None:
    """None when the patch applies cleanly to `tree`, else git's words."""
    with tempfile.NamedTemporaryFile("w", suffix=".patch", delete=False) as handle:
        handle.write(patch if patch.endswith("\n") else patch + "\n")
    try:
        done = subprocess.run(["git", "apply", "--check", "--verbose", handle.name], cwd=tree,
                              capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"git apply --check did not run: {exc}"
    finally:
        Path(handle.name).unlink(missing_ok=True)
    if done.returncode == 0:
        return None
    return (done.stderr or done.stdout).strip() or f"git apply --check exited {done.returncode}"


def git_paths_of(tree: Path, patch: str) -> dict | None:
    """git's account of the paths the patch touches, as GitPaths' JSON; None when git cannot read it
    (git apply --check then says why, and the guard's text reader decides)."""
    try:
        return with_file_modes(tree, git_patch_paths(tree, patch)).model_dump(mode="json")
    except PatchPathsError:
        return None


def proposal_checks(req: dict) -> dict:
    """{"probe": parser_probe's reply, "patch_errors": [None or git's words per patch], "patch_paths": [git's
    account per patch, or None], "tree": str}."""
    try:
        # The probe imports the engine: it gets a server's allowlisted environment, never the run's credentials.
        done = subprocess.run([req["python"], "-c", PROBE_SOURCE, json.dumps(req["probe"])], capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_S, check=False,
                              env=host_side.server_env(req.get("engine"), {}, []))
        probe = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout.strip() \
            else {"parser_error": (done.stderr.strip().splitlines() or ["the probe failed"])[-1]}
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        probe = {"parser_error": f"the parser probe did not run: {exc}"}
    tree = req.get("tree") or probe.get("package_root")
    patches = req.get("patches", [])
    if tree is None:
        errors = ["no tree to check against: no framework_tree and the engine package was not found"] * len(patches)
        paths = [None] * len(patches)
    else:
        errors = [git_apply_check(Path(tree), text) for text in patches]
        paths = [git_paths_of(Path(tree), text) for text in patches]
    return {"probe": probe, "patch_errors": errors, "patch_paths": paths, "tree": tree}
