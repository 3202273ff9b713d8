"""The offline critic (`critic_provider: rules`): the critic prompt's rules, decided from the change. Pure code.

It answers what a model critic answers (a CriticReply), and never calls a provider. Each
reason that rejects names its rule:

- `sensitive_code`: Python added or removed that handles errors (try, except, finally,
  raise, suppress) or security (auth, TLS, secrets, tokens) (critic_v1: "touches error
  handling, security, networking or file access"). Performance patches change arithmetic
  and scheduling; a patch that also changes what happens on failure is a different change
  than the one measured.
- `denied_import`, `dynamic_import`, `dynamic_code`, `dynamic_attribute`,
  `environment_access`, `file_access`, `network_access`, `process_control`: Python that
  reaches the outside world, or reaches code or names the critic cannot read; decided on
  the syntax tree (code_rules.py), never by matching a line's text, so a spelling such as
  `__import__("o"+"s")` or `getattr(mod, name)` is refused for what it is.
- `unparseable_python`: a change the critic cannot parse soundly (code_regions.py: in its
  hunk, else in the whole file when the caller has the tree), refused rather than guessed.
- `unreadable_patch`: a diff that is more than text edits of regular files (a rename,
  copy, mode, symlink or binary header; core/patches/diff_text.py).
- `sensitive_file`: a patch of the engine's serving layer (its entrypoints, HTTP server,
  API protocol): the harness measures through it, so a change there can change the
  measurement instead of the engine.
- `unstated_accuracy_risk`: a change the engine's risk table marks as able to change the
  answers (dtype, quantization, KV precision), whose rationale does not say so.

What approves also says why: the files a patch touches, and that the accuracy gate checks
the answers of a risky change before it can be kept.
"""

from __future__ import annotations

import re
from typing import Literal

from hyperloom_assets.core.engines.spec import EngineSpec
from hyperloom_assets.core.models import Frozen
from hyperloom_assets.core.patches.diff_text import DiffError, read_diff, section_paths
from hyperloom_assets.core.planning.seed_grids import accuracy_risk
from hyperloom_assets.core.proposer.code_regions import PYTHON_SUFFIXES, python_reasons
from hyperloom_assets.core.proposer.code_rules import DENIED_MODULES
from hyperloom_assets.core.proposer.replies import CriticReply

RULES: dict[str, str] = {
    "sensitive_code": "a patch must not change error handling (try, except, finally, raise, suppress) or security "
                      "(auth, TLS, secrets, tokens)",
    "denied_import": "a patch must not import os, subprocess, socket, shutil, ctypes, importlib, pickle, marshal, "
                     "multiprocessing, http, urllib, requests, aiohttp or another module that reaches processes, "
                     f"files, the network or code by name ({len(DENIED_MODULES)} in all, core/proposer/code_rules.py)",
    "dynamic_import": "no __import__, importlib, sys.modules or sys.path, star import or helper that imports by name",
    "dynamic_code": "no exec, eval, compile, breakpoint, pickle, marshal, ctypes or torch.load: code the critic "
                    "cannot read",
    "dynamic_attribute": "no getattr, setattr or delattr on a module, on a call's result or with a computed name; "
                         "no vars(), globals(), locals(), __dict__, __builtins__, frames or module handed on as a value",
    "environment_access": "no os.environ, os.getenv, putenv or any `environ`: the environment is the harness's",
    "file_access": "no open(), io.open, Path(...).read_text/read_bytes/write_*/open/unlink, os file calls or shutil",
    "network_access": "no socket, urllib, http.client, requests, aiohttp or other network call",
    "process_control": "no subprocess, os.system, os.popen, os.exec*/spawn*/fork/kill, multiprocessing, signal or exit",
    "unparseable_python": "every changed Python region parses soundly: in its hunk, or, with the tree at hand, in "
                          "the patched file",
    "unreadable_patch": "a patch is a plain unified diff of regular text files: no rename, copy, mode, symlink or "
                        "binary header",
    "sensitive_file": "a patch must not change the engine's serving layer (entrypoints, HTTP server, API protocol)",
    "unstated_accuracy_risk": "a change that can change the answers says so in its rationale",
}

SERVING_PATHS = re.compile(r"(^|/)(entrypoints|serving|openai|http_server|api_server|protocol)(/|\.py$|_)|"
                           r"(^|/)server\.py$")
RISK_WORDS = re.compile(r"accura|precision|dtype|quantiz|numeric|answers?\b|outputs? change|fp8|int8|int4", re.I)


class CriticChange(Frozen):
    """What the critic reviews: a model's proposal, or a planned patch with its header as rationale."""
    name: str
    server_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    patch: str | None = None
    rationale: str = ""
    # (path, text before, text after) of Python files the patch changes, where the caller has the tree: the
    # critic reads a file whole where a hunk alone cannot be read soundly (code_regions.py).
    patched: tuple[tuple[str, str, str], ...] = ()


def _patch_reasons(patch: str, patched: tuple[tuple[str, str, str], ...]) -> tuple[list[str], list[str]]:
    """(rejecting reasons, approving reasons) for a patch's files and code."""
    try:
        files = read_diff(patch)
    except DiffError as exc:
        return [f"unreadable_patch: {exc}"], []
    paths = section_paths(files)
    rejects = [f"sensitive_file: {path} is the engine's serving layer" for path in paths if SERVING_PATHS.search(path)]
    rejects += python_reasons(files, {path: (before, after) for path, before, after in patched})
    unread = [path for path in paths if not path.lower().endswith(PYTHON_SUFFIXES)]
    return rejects, [f"the patch touches {', '.join(paths) or 'no file'}; its Python, parsed, handles no error, "
                     "security, environment, file, network, process or dynamic import"
                     + (f"; not Python, so not judged: {', '.join(unread)}" if unread else "")]


def review(change: CriticChange, spec: EngineSpec) -> CriticReply:
    """The rules' verdict on one change, with every reason that decided it."""
    rejects: list[str] = []
    approves: list[str] = []
    if change.patch:
        rejects_patch, approves_patch = _patch_reasons(change.patch, change.patched)
        rejects += rejects_patch
        approves += approves_patch
    risk = accuracy_risk(spec, list(change.server_args), dict(change.env))
    if risk is not None and not RISK_WORDS.search(change.rationale):
        rejects.append(f"unstated_accuracy_risk: {risk}; the rationale does not say the answers can change")
    elif risk is not None or change.patch:
        approves.append("the accuracy gate checks its answers against the baseline's before it can be kept")
    if rejects:
        return CriticReply(verdict="reject", reasons=rejects)
    return CriticReply(verdict="approve", reasons=approves or ["no rule of the critic applies to it"])


class Review(Frozen):
    """A critic's word on one change, as the trial's row and the report show it."""
    critic: str  # "rules", or the model critic's `llm:<provider>/<model>`
    verdict: Literal["approve", "reject", "skipped"]  # skipped: the model critic failed and the target skips
    reasons: tuple[str, ...] = ()
    fallback: str | None = None  # the model critic's failure, when the rules decided or the change was skipped

    @property
    def approved(self) -> bool:
        return self.verdict == "approve"

    def text(self) -> str:
        said = f"{self.critic} {self.verdict}: {'; '.join(self.reasons) or 'no reason given'}"
        return f"{said} ({self.fallback})" if self.fallback else said


def rules_review(change: CriticChange, spec: EngineSpec, fallback: str | None = None) -> Review:
    reply = review(change, spec)
    return Review(critic="rules", verdict=reply.verdict, reasons=tuple(reply.reasons), fallback=fallback)
