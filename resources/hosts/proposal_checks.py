"""The host-side checks of a model's proposals: the engine's parser, `git apply --check`.

Both run where the engine serves (in-process for the local host, through `hyperloom
host-agent proposal_checks` for an SSH host): the parser is the serving interpreter's
own engine (parser_probe.py runs in it), and a patch is checked against the tree that
engine would be imported from: the target's framework_tree, else the installed
package's folder.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from hyperloom_assets.core.engines import speaking
from hyperloom_assets.core.engines.spec import EngineSpec
from hyperloom_assets.resources.hosts import parser_probe

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
    return {"python": python, "probe": probe, "patches": list(patches), "tree": tree}


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


def proposal_checks(req: dict) -> dict:
    """{"probe": parser_probe's reply, "patch_errors": [None or git's words per patch], "tree": str}."""
    try:
        done = subprocess.run([req["python"], "-c", PROBE_SOURCE, json.dumps(req["probe"])], capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_S, check=False)
        probe = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout.strip() \
            else {"parser_error": (done.stderr.strip().splitlines() or ["the probe failed"])[-1]}
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        probe = {"parser_error": f"the parser probe did not run: {exc}"}
    tree = req.get("tree") or probe.get("package_root")
    patches = req.get("patches", [])
    if tree is None:
        errors = ["no tree to check against: no framework_tree and the engine package was not found"] * len(patches)
    else:
        errors = [git_apply_check(Path(tree), text) for text in patches]
    return {"probe": probe, "patch_errors": errors, "tree": tree}
