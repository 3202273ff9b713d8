"""The policy gate every proposal passes before a critic sees it or a server runs it. Pure code.

Each rule has a name, and a refused proposal carries every rule that fired (the first
is the one reported). The checks that need the outside world, the engine's own parser
over the argv, and `git apply --check` and git's account of the paths over the patch, are run
by the resources and handed in as their verdicts; the rest is decided here from the engine's module and the
target's allowlist (core/proposer/allowlist.py: only the knobs of the grid, the rules and the
target's search_space; the deny rules stay beside it, as defence in depth).
A model's numbers about its own gains are cut from the rationale: only measurements
count.
"""

from __future__ import annotations

import re

from hyperloom_assets.core.engines.spec import EngineSpec
from hyperloom_assets.core.models import Frozen, Strict
from hyperloom_assets.core.patches.diff_text import DiffError
from hyperloom_assets.core.patches.git_paths import GitPaths, refusal, text_paths
from hyperloom_assets.core.planning.variants import canonical_flag, setting_key, split_args
from hyperloom_assets.core.proposer.allowlist import Allowlist, reads_as_option
from hyperloom_assets.core.proposer.replies import ProposedChange

SHELL_CHARACTERS = re.compile(r"[;&|`$<>\n\r]")
# The served model and where the server listens are the harness's: a model that moves
# them would measure another model, or a port the harness is not watching.
IDENTITY_FLAGS = frozenset({"--model", "--model-path", "--served-model-name", "--tokenizer", "--tokenizer-path",
                            "--revision", "--tokenizer-revision", "--code-revision", "--host", "--port",
                            "--server-port"})
PATH_SUFFIXES = ("-dir", "-file", "-path")
DENIED_ENV_NAMES = frozenset({"PYTHONPATH", "PATH"})
DENIED_ENV_WORDS = ("KEY", "TOKEN", "SECRET")
PATCH_MAX_BYTES = 20_000
_GAIN_CLAIM = re.compile(r"[+-]?\d+(?:\.\d+)?\s*(?:%|percent\b|x\b|×|tok/s|tokens?/s)", re.IGNORECASE)

# In the order they are checked; a refusal reports the first that fired.
RULES: dict[str, str] = {
    "empty_proposal": "a proposal changes no arg, env or source",
    "shell_metacharacter": "shell metacharacters ;&|`$<> and newlines are denied in args and env",
    "flag_identity": "model, tokenizer, revision, host and port flags (and any abbreviation of one) are the harness's",
    "flag_path": "flags ending in -dir, -file or -path are denied",
    "harness_flag": "the harness's own flags never become candidates (docs/design.md, invariant 3)",
    "env_denied": "LD_*, PYTHONPATH, PATH and anything holding KEY, TOKEN or SECRET are denied",
    "env_prefix": "env keys must carry one of the engine's prefixes",
    "env_duplicate": "an env name is given once",
    "argv_unparsed": "every argv token must parse with the engine's own parser",
    "flag_not_allowed": "a flag must be a knob of the engine's seed grid, its rules or the target's search_space, "
                        "spelled out in full as the engine's parser registers it (an abbreviation is another flag; "
                        "an alias counts as the flag it stands for)",
    "env_not_allowed": "an env name must be a knob of the engine's seed grid or the target's search_space",
    "patch_too_large": f"a patch stays under {PATCH_MAX_BYTES} bytes",
    "patch_outside_package": "a patch touches only files of the engine's package (every path git names: "
                             "edited, created, deleted, renamed or copied from and to)",
    "patch_file_mode": "a patch edits regular text files only: no symlink (mode 120000), submodule, binary data "
                       "or change of a file's kind",
    "patch_not_applying": "a patch must pass git apply --check against the engine's tree",
}


class Refusal(Frozen):
    rule: str  # a key of RULES
    detail: str


class GuardInputs(Strict):
    """What the resources found: the engine parser's verdict and `git apply --check`'s."""
    parser_error: str | None = None
    patch_apply_error: str | None = None
    package_prefix: str  # the engine package's folder inside the tree the patch applies to
    # git's account of the patch's paths and modes (`git apply --numstat -z --summary`, with the tree's
    # modes); None: git was not asked, and the strict text reader (core/patches/diff_text.py) decides.
    patch_paths: GitPaths | None = None
    # The env prefixes of the engine the target speaks (a stand-in's flavor); None: the engine's own.
    env_prefixes: tuple[str, ...] | None = None
    # What the model may set (core/proposer/allowlist.py); the default allows nothing, so a
    # caller that passes none refuses every flag and env name rather than letting them through.
    allowed: Allowlist = Allowlist()


class Guarded(Strict):
    proposal: ProposedChange
    refusals: list[Refusal]
    claims_discarded: int = 0

    @property
    def passed(self) -> bool:
        return not self.refusals

    @property
    def rule(self) -> str | None:
        return self.refusals[0].rule if self.refusals else None


def _abbreviates(key: str, identity: set[str]) -> str | None:
    """The identity flag a long flag is a proper prefix of: argparse takes it for that flag where it is
    not an option of its own, so it is refused even where an allowlist happens to hold it."""
    if not key.startswith("--") or len(key) <= 2:
        return None
    return next((flag for flag in sorted(identity) if flag != key and flag.startswith(key)), None)


def _flag_refusals(proposal: ProposedChange, spec: EngineSpec, harness: frozenset[str],
                   allowed: Allowlist) -> list[Refusal]:
    refusals = []
    identity = {setting_key(f) for f in IDENTITY_FLAGS | spec.launcher_flags()}
    harness_keys = {setting_key(f) for f in harness}
    for token in proposal.server_args:
        # Every token argparse reads as an option, a value slot's `-inf` included.
        if not reads_as_option(token):
            continue
        written = token.split("=", 1)[0]
        flag = canonical_flag(written)
        if setting_key(flag) in identity or setting_key(allowed.resolve(written)) in identity:
            refusals.append(Refusal(rule="flag_identity", detail=f"{flag} is set by the harness"))
        elif abbreviated := _abbreviates(setting_key(flag), identity):
            refusals.append(Refusal(rule="flag_identity",
                                    detail=f"{flag} is an abbreviation argparse reads as {abbreviated}, set by the harness"))
        elif flag.endswith(PATH_SUFFIXES):
            refusals.append(Refusal(rule="flag_path", detail=f"{flag} names a path on the host"))
        elif setting_key(flag) in harness_keys:
            refusals.append(Refusal(rule="harness_flag", detail=f"{flag} drives the harness, not the engine"))
        if (why := allowed.flag_refusal(written)) is not None:  # on its own: each layer refuses alone
            refusals.append(Refusal(rule="flag_not_allowed", detail=why))
    return refusals


def _env_refusals(proposal: ProposedChange, prefixes: tuple[str, ...], allowed: Allowlist) -> list[Refusal]:
    refusals = []
    names = [setting.name for setting in proposal.env]
    for key in dict.fromkeys(names):
        if names.count(key) > 1:
            refusals.append(Refusal(rule="env_duplicate", detail=f"{key} is given {names.count(key)} times"))
        upper = key.upper()
        if upper.startswith("LD_") or upper in DENIED_ENV_NAMES or any(w in upper for w in DENIED_ENV_WORDS):
            refusals.append(Refusal(rule="env_denied", detail=f"{key} is denied"))
        elif not key.startswith(prefixes or ("\0",)):
            said = ", ".join(prefixes) or "none: this engine reads no environment"
            refusals.append(Refusal(rule="env_prefix", detail=f"{key} lacks the engine's prefixes ({said})"))
        if (why := allowed.env_refusal(key)) is not None:
            refusals.append(Refusal(rule="env_not_allowed", detail=why))
    return refusals


def _patch_refusals(patch: str, inputs: GuardInputs) -> list[Refusal]:
    size = len(patch.encode())
    if size > PATCH_MAX_BYTES:
        return [Refusal(rule="patch_too_large", detail=f"{size} bytes, over {PATCH_MAX_BYTES}")]
    try:
        read, unreadable = text_paths(patch), None
    except DiffError as exc:
        read, unreadable = None, exc
    found = inputs.patch_paths or read
    if found is None:  # no git, and the text reader does not understand it: refused, never guessed
        rule = "patch_file_mode" if unreadable.file_kind else "patch_outside_package"
        return [Refusal(rule=rule, detail=f"git was not asked and the text reader cannot tell what it touches: "
                                          f"{unreadable}")]
    if read is not None and inputs.patch_paths is not None and set(read.paths) != set(found.paths):
        return [Refusal(rule="patch_outside_package", detail=(
            f"git reads {', '.join(found.paths)}, the text reader {', '.join(read.paths)}"))]
    if (refused := refusal(found, inputs.package_prefix)) is not None:
        return [Refusal(rule=refused[0], detail=refused[1])]
    if inputs.patch_apply_error is not None:
        return [Refusal(rule="patch_not_applying", detail=inputs.patch_apply_error.strip()[:500])]
    return []


def discard_claims(rationale: str) -> tuple[str, int]:
    """The rationale with every number about gains cut out, and how many were cut."""
    return _GAIN_CLAIM.subn("[claim discarded]", rationale)


def guard(proposal: ProposedChange, spec: EngineSpec, harness: frozenset[str], inputs: GuardInputs) -> Guarded:
    """Every rule that refuses the proposal, in RULES order (none: it may go to the critic)."""
    refusals: list[Refusal] = []
    if not proposal.server_args and not proposal.env and not proposal.patch:
        refusals.append(Refusal(rule="empty_proposal", detail="nothing to change"))
    texts = [*proposal.server_args, *(text for s in proposal.env for text in (s.name, s.value))]
    shell = [t for t in texts if SHELL_CHARACTERS.search(t)]
    if shell:
        refusals.append(Refusal(rule="shell_metacharacter", detail=f"in {shell[0]!r}"))
    refusals += _flag_refusals(proposal, spec, harness, inputs.allowed) + _env_refusals(
        proposal, spec.env_prefixes if inputs.env_prefixes is None else inputs.env_prefixes, inputs.allowed)
    if proposal.server_args and inputs.parser_error is not None:
        refusals.append(Refusal(rule="argv_unparsed", detail=inputs.parser_error.strip()[:500]))
    if proposal.patch:
        refusals += _patch_refusals(proposal.patch, inputs)
    order = list(RULES)
    refusals.sort(key=lambda r: order.index(r.rule))
    rationale, claims = discard_claims(proposal.rationale)
    return Guarded(proposal=proposal.model_copy(update={"rationale": rationale}), refusals=refusals,
                   claims_discarded=claims)


def argv_shape_error(server_args: list[str]) -> str | None:
    """A token list that is not flags with values (checked before the engine's parser sees it)."""
    settings = split_args(server_args)
    stray = [s.value for s in settings if not s.flag]
    return f"a value without its flag: {stray[0]!r}" if stray else None
