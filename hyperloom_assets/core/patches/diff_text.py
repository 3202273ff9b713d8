"""A unified diff read as `git apply` reads it, refusing whatever is more than a text edit. Pure code.

The reader follows git's own scan (apply.c's find_header and parse_fragment): text before,
between and after file sections is skipped where git skips it, a `diff --git` section's
extended header lines are the ones git recognises, a hunk is read by the counts in its
`@@` line, and a path loses its first component as under git's default `-p1`. It accepts
only what it understands in full: plain edits, creations and deletions of regular files,
named without quoting or whitespace. A rename, a copy, a mode line, a symlink or submodule
mode, a binary patch or a section without a hunk is a DiffError, so a place that cannot
ask git itself (resources/trees/patch_paths.py) errs to refusal; `file_kind` says the
error is about what kind of file a patch makes (a mode, a symlink, binary data).
"""

from __future__ import annotations

import re

from hyperloom_assets.core.models import Frozen

REGULAR_MODES = ("100644", "100755")
DEV_NULL = "/dev/null"
HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_INDEX = re.compile(r"^index [0-9a-f]+\.\.[0-9a-f]+(?: (\d+))?$")
_GIT_NAMES = re.compile(r"^diff --git a/(\S+) b/(\S+)$")
# The extended header lines git reads that say more than "this file's text changes".
_NOT_TEXT_EDITS = ("old mode ", "new mode ", "copy from ", "copy to ", "rename old ", "rename new ", "rename from ",
                   "rename to ", "similarity index ", "dissimilarity index ")
_MODE_LINES = ("old mode ", "new mode ")
_BINARY = ("GIT binary patch", "Binary files ")


class DiffError(ValueError):
    """A diff the reader does not understand in full; `file_kind`: it is about the kind of file (mode, binary)."""

    def __init__(self, message: str, file_kind: bool = False):
        super().__init__(message)
        self.file_kind = file_kind


class Hunk(Frozen):
    old_start: int
    new_start: int
    lines: tuple[str, ...]  # each with its mark: " " context, "-" removed, "+" added

    def side(self, mark: str) -> tuple[list[str], set[int]]:
        """One side's lines (the old one for "-", the new one for "+") and the indexes among them that changed."""
        kept = [line for line in self.lines if line[:1] in (" ", mark)]
        return [line[1:] for line in kept], {i for i, line in enumerate(kept) if line[:1] == mark}


class FileDiff(Frozen):
    old: str | None  # None: the file is created
    new: str | None  # None: the file is deleted
    hunks: tuple[Hunk, ...]

    @property
    def path(self) -> str:
        return self.new or self.old or ""


def section_paths(sections: list[FileDiff] | tuple[FileDiff, ...]) -> list[str]:
    """The tree paths the sections touch (old and new names), in order, once each."""
    return list(dict.fromkeys(name for section in sections for name in (section.old, section.new) if name))


def _lines(text: str) -> list[str]:
    lines = text.split("\n")  # git's lines: only "\n" ends one
    return lines[:-1] if lines and lines[-1] == "" else lines


def _plain_name(raw: str, where: str) -> str | None:
    """A `---`/`+++` name as git -p1 reads it (its first component stripped); None for /dev/null."""
    name = raw.split("\t", 1)[0]
    if name == DEV_NULL:
        return None
    if not name or any(c.isspace() or c in "\"\\" for c in name):
        raise DiffError(f"{where}: a path quoted or with whitespace ({raw!r}) is not read")
    if "/" not in name:
        raise DiffError(f"{where}: {name!r} has no leading directory for git's -p1 to strip")
    return name.split("/", 1)[1]


def _read_hunk(lines: list[str], at: int, where: str) -> tuple[Hunk, int]:
    match = HUNK_HEADER.match(lines[at])
    if match is None:
        raise DiffError(f"{where}: a malformed hunk header {lines[at][:80]!r}")
    old_left = 1 if match.group(2) is None else int(match.group(2))
    new_left = 1 if match.group(4) is None else int(match.group(4))
    body: list[str] = []
    at += 1
    while old_left or new_left:
        if at >= len(lines):
            raise DiffError(f"{where}: a hunk ends before its counts ({lines[at - 1][:60]!r} is the last line)")
        line = lines[at] or " "  # git reads an empty line as an empty context line
        mark = line[0]
        if mark == "\\":
            if len(line) < 11:
                raise DiffError(f"{where}: a `\\` line that is not `\\ No newline at end of file`")
        elif mark in " -+":
            body.append(line)
            old_left -= mark in " -"
            new_left -= mark in " +"
            if old_left < 0 or new_left < 0:
                raise DiffError(f"{where}: a hunk longer than its header says")
        else:
            raise DiffError(f"{where}: a hunk line that starts with {mark!r}")
        at += 1
    if at < len(lines) and lines[at].startswith("\\ "):
        at += 1
    if not any(line[0] in "+-" for line in body):
        raise DiffError(f"{where}: a hunk that changes nothing")
    return Hunk(old_start=int(match.group(1)), new_start=int(match.group(3)), lines=tuple(body)), at


def _read_hunks(lines: list[str], at: int, where: str) -> tuple[tuple[Hunk, ...], int]:
    if at >= len(lines) or not lines[at].startswith("@@ -"):
        raise DiffError(f"{where}: a file section without a hunk")
    hunks = []
    while at < len(lines) and lines[at].startswith("@@ -"):
        hunk, at = _read_hunk(lines, at, where)
        hunks.append(hunk)
    return tuple(hunks), at


def _check_header_line(line: str, where: str) -> None:
    if line.startswith(_NOT_TEXT_EDITS):
        raise DiffError(f"{where}: `{line.strip()[:80]}` is not a text edit (a rename, copy or mode change)",
                        file_kind=line.startswith(_MODE_LINES))
    if line.startswith(("new file mode ", "deleted file mode ")) and line.rsplit(" ", 1)[1] not in REGULAR_MODES:
        raise DiffError(f"{where}: `{line.strip()}` is not a regular file", file_kind=True)
    if line.startswith("index "):
        match = _INDEX.match(line)
        if match is None or (match.group(1) is not None and match.group(1) not in REGULAR_MODES):
            raise DiffError(f"{where}: `{line.strip()[:80]}` is not a regular file's index line", file_kind=True)


def _git_section(lines: list[str], at: int) -> tuple[FileDiff, int]:
    where = f"line {at + 1}"
    names = _GIT_NAMES.match(lines[at])
    if names is None or names.group(1) != names.group(2):
        raise DiffError(f"{where}: `{lines[at][:100]}` does not name one file, unquoted, on both sides")
    name, old, new, created, deleted = names.group(1), "", "", False, False
    at += 1
    while at < len(lines) and not lines[at].startswith("@@ -"):
        line = lines[at]
        if line.startswith("--- "):
            old = line
        elif line.startswith("+++ "):
            new = line
        elif line.startswith(("new file mode ", "deleted file mode ", "index ", *_NOT_TEXT_EDITS)):
            _check_header_line(line, f"line {at + 1}")
            created, deleted = created or line.startswith("new file"), deleted or line.startswith("deleted file")
        elif line.startswith(_BINARY):
            raise DiffError(f"line {at + 1}: a binary patch of {name}", file_kind=True)
        else:
            break  # git's header ends at a line it does not recognise
        at += 1
    wanted_old, wanted_new = ("--- /dev/null" if created else f"--- a/{name}"), ("+++ /dev/null" if deleted
                                                                                else f"+++ b/{name}")
    if (old, new) != (wanted_old, wanted_new):
        raise DiffError(f"{where}: {name}'s `---`/`+++` lines are not {wanted_old!r} and {wanted_new!r}")
    hunks, at = _read_hunks(lines, at, where)
    return FileDiff(old=None if created else name, new=None if deleted else name, hunks=hunks), at


def _plain_section(lines: list[str], at: int) -> tuple[FileDiff, int]:
    where = f"line {at + 1}"
    old, new = _plain_name(lines[at][4:], where), _plain_name(lines[at + 1][4:], where)
    if old is None and new is None or (old is not None and new is not None and old != new):
        raise DiffError(f"{where}: `---` and `+++` do not name one file ({old} and {new})")
    hunks, at = _read_hunks(lines, at + 2, where)
    return FileDiff(old=old, new=new, hunks=hunks), at


def read_diff(text: str) -> list[FileDiff]:
    """Every file section git would read in `text`, in order; DiffError for anything not understood in full."""
    lines, files, at = _lines(text), [], 0
    while at < len(lines):
        line = lines[at]
        if "\r" in line and line.startswith(("diff ", "--- ", "+++ ", "@@ ")):
            raise DiffError(f"line {at + 1}: a carriage return in a diff's header")
        if line.startswith("diff --git "):
            section, at = _git_section(lines, at)
        elif line.startswith("--- ") and at + 2 < len(lines) and lines[at + 1].startswith("+++ ") \
                and lines[at + 2].startswith("@@ -"):
            section, at = _plain_section(lines, at)
        elif HUNK_HEADER.match(line):
            raise DiffError(f"line {at + 1}: a hunk without a file header before it")
        else:
            at += 1  # text git skips: a header, a commit message, a signature
            continue
        files.append(section)
    return files
