"""The scripted proposals: the refused ones, each with the rule that must refuse it, and the good one."""

from __future__ import annotations

import difflib
import json

from tests.conftest import REPO

PERF_MODEL = "hyperloom_assets/sim/perf_model.py"


def _diff(path: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))


def applying_patch() -> str:
    text = (REPO / PERF_MODEL).read_text()
    return _diff(PERF_MODEL, text, text.replace("from dataclasses import dataclass",
                                                "from dataclasses import dataclass  # patched", 1))


def stale_patch() -> str:
    return _diff(PERF_MODEL, "this line is not in the file\n", "nor is this one\n")


def outside_patch() -> str:
    return _diff("setup.cfg", "[metadata]\n", "[metadata]\nname = evil\n")


def mode_only_patch() -> str:
    """A diff git applies (a mode change of a package file) with no hunk: nothing to launch or gate."""
    return f"diff --git a/{PERF_MODEL} b/{PERF_MODEL}\nold mode 100644\nnew mode 100755\n"


def change(name: str, args=(), env=None, patch=None, rationale="the evidence says so") -> dict:
    return {"name": name, "server_args": list(args), "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
            "patch": patch, "rationale": rationale}


# name -> the rule that must refuse it
REFUSED = {
    "download-dir": ("flag_path", change("download-dir", ["--download-dir", "/tmp/models"])),
    "shell": ("shell_metacharacter", change("shell", ["--max-num-seqs", "8;rm -rf /"])),
    "preload": ("env_denied", change("preload", env={"LD_PRELOAD": "/tmp/evil.so"})),
    "port": ("flag_identity", change("port", ["--port", "9"])),
    "unknown-flag": ("argv_unparsed", change("unknown-flag", ["--bogus-knob", "1"])),
    "outside-patch": ("patch_outside_package", change("outside-patch", patch=outside_patch())),
    "stale-patch": ("patch_not_applying", change("stale-patch", patch=stale_patch())),
    "mode-only-patch": ("patch_not_applying", change("mode-only-patch", patch=mode_only_patch())),
    # The allowlist (issue 48, point 3): argparse reads `--hos` as --host and the probe's parser takes
    # `--max-num-seq` for --max-num-seqs; an env name the grid and the target do not list is refused.
    "abbreviated-host": ("flag_identity", change("abbreviated-host", ["--hos", "0.0.0.0"])),
    "abbreviated-cap": ("flag_not_allowed", change("abbreviated-cap", ["--max-num-seq", "8"])),
    "insecure-env": ("env_not_allowed", change("insecure-env", env={"VLLM_ALLOW_INSECURE_SERIALIZATION": "1"})),
}
# The env knob is one of the grid's (the sim serves it and models no effect of it).
GOOD = change("raise the cap", ["--max-num-seqs", "32"], env={"VLLM_CPU_KVCACHE_SPACE": "4"},
              rationale="the cap (4) binds under concurrency 16; this will gain 300% and reach 2x tok/s")
HELD = change("tag the perf model", patch=applying_patch())


def first_reply() -> str:
    return json.dumps({"proposals": [GOOD, *(c for _, c in REFUSED.values()), HELD]})


APPROVE = json.dumps({"verdict": "approve", "reasons": ["the cap binds: it follows the evidence"]})
