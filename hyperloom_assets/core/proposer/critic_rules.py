"""The offline critic (`critic_provider: rules`): the critic prompt's rules, decided from the change. Pure code.

It answers what a model critic answers (a CriticReply), and never calls a provider. Each
reason that rejects names its rule:

- `sensitive_code`: a patch line added or removed that handles errors, security,
  networking, files or processes (critic_v1: "touches error handling, security,
  networking or file access"). Performance patches change arithmetic and scheduling; a
  patch that also changes what happens on failure or what reaches the outside is a
  different change than the one measured.
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
from hyperloom_assets.core.patches.patch import touched_files
from hyperloom_assets.core.planning.seed_grids import accuracy_risk
from hyperloom_assets.core.proposer.replies import CriticReply

RULES: dict[str, str] = {
    "sensitive_code": "a patch must not change error handling, security, networking, file access or processes",
    "sensitive_file": "a patch must not change the engine's serving layer (entrypoints, HTTP server, API protocol)",
    "unstated_accuracy_risk": "a change that can change the answers says so in its rationale",
}

# (what it is, a pattern over one changed line of Python)
SENSITIVE_CODE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("error handling", re.compile(r"^\s*(try\s*:|except\b|finally\s*:|raise\b)|\bsuppress\(")),
    ("security", re.compile(r"\b(ssl|tls|auth\w*|password|secret|api_key|token_urlsafe|hmac|verify\s*=)\b", re.I)),
    ("networking", re.compile(r"\b(socket|urllib|requests|http\.client|aiohttp|httpx|zmq)\b")),
    ("file access", re.compile(r"\bopen\(|\bos\.(remove|unlink|rename|makedirs|chmod)\b|\bshutil\.|\.write_(text|bytes)\(|"
                               r"\.unlink\(")),
    ("processes", re.compile(r"\bsubprocess\b|\bos\.(system|popen|exec\w*|kill)\b|\beval\(|\bexec\(|\bpickle\.loads?\(")),
)
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


def changed_lines(patch: str) -> list[tuple[str, str]]:
    """(file, line) for each line a unified diff adds or removes."""
    found, current = [], ""
    for line in patch.splitlines():
        if line.startswith(("+++ ", "--- ")):
            name = line[4:].strip()
            current = name[2:] if name.startswith(("a/", "b/")) else name
        elif line[:1] in "+-" and not line.startswith(("+++", "---")):
            found.append((current, line[1:]))
    return found


def _patch_reasons(patch: str) -> tuple[list[str], list[str]]:
    """(rejecting reasons, approving reasons) for a patch's files and lines."""
    rejects = [f"sensitive_file: {path} is the engine's serving layer" for path in touched_files(patch)
               if SERVING_PATHS.search(path)]
    for path, line in changed_lines(patch):
        for what, pattern in SENSITIVE_CODE:
            if pattern.search(line):
                rejects.append(f"sensitive_code: {path} changes {what}: {line.strip()[:120]!r}")
                break
    files = ", ".join(touched_files(patch)) or "no file"
    return rejects, [f"the patch touches {files}; no error handling, security, networking, file access or "
                     "process line changes"]


def review(change: CriticChange, spec: EngineSpec) -> CriticReply:
    """The rules' verdict on one change, with every reason that decided it."""
    rejects: list[str] = []
    approves: list[str] = []
    if change.patch:
        rejects_patch, approves_patch = _patch_reasons(change.patch)
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
