"""What a patch touches, in git's own words: `git apply --numstat -z --summary`, read. Pure code.

git is the program that applies a patch, so its account of the paths is the one that
counts: numstat names every file (a rename or copy by its new name), the summary names
renames' and copies' sources, creations and deletions with their modes, and mode
changes. The resource that runs git (resources/trees/patch_paths.py) adds the modes the
tree gives the paths it already holds: a symlink's text is where it points, so a text
edit of one re-points it. Every path must lie inside the engine's package, and every
file must stay a regular file (100644 or 100755): no symlink (120000), no submodule
(160000), no binary data. A line of git's account this reader does not know is refused,
never skipped. Where git cannot be asked, `text_paths` is the strict text reader's account.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from hyperloom_assets.core.models import Frozen
from hyperloom_assets.core.patches.diff_text import REGULAR_MODES
from hyperloom_assets.core.patches.patch import outside_package, touched_files

_CREATE_DELETE = re.compile(r"^ (?:create|delete) mode (\d{6}) (.+)$")
_MODE_CHANGE = re.compile(r"^ mode change (\d{6}) => (\d{6})(?: (.+))?$")
_MOVE = re.compile(r"^ (rename|copy) (.+) \(\d+%\)$")
_REWRITE = re.compile(r"^ rewrite (.+) \(\d+%\)$")
_BRACED = re.compile(r"^([^{}]*)\{([^{}]*) => ([^{}]*)\}([^{}]*)$")


class GitPaths(Frozen):
    """The paths a patch touches and the modes they have or get, as git and the tree say."""
    paths: tuple[str, ...] = ()  # every path: edited, created, deleted, renamed or copied (from and to)
    modes: tuple[tuple[str, str], ...] = ()  # (path, mode): each mode git names, and the tree's for paths it holds
    moves: tuple[str, ...] = ()  # `rename a => b`, `copy a => b`
    binary: tuple[str, ...] = ()  # paths git would patch as binary data
    unread: tuple[str, ...] = ()  # lines of git's account this reader does not know


def _moved(spec: str) -> tuple[str, str] | None:
    """(source, target) of a summary's `a => b` or `dir/{a => b}/rest`; None when it is ambiguous."""
    if any(c in spec for c in "\"\\"):
        return None
    braced = _BRACED.match(spec)
    if braced:
        head, old, new, tail = braced.groups()
        clean = (lambda path: re.sub("/+", "/", path).strip("/"))
        return clean(head + old + tail), clean(head + new + tail)
    if spec.count(" => ") != 1 or "{" in spec or "}" in spec:
        return None
    old, new = spec.split(" => ")
    return old, new


def _summary_line(line: str, last_move: str | None) -> tuple[list[str], list[tuple[str, str]], str | None]:
    """(paths, (path, mode)s, the target of a rename or copy, which a bare `mode change` after it is about);
    ValueError for a line it does not know."""
    if match := _CREATE_DELETE.match(line):
        return [match.group(2)], [(match.group(2), match.group(1))], None
    if match := _MODE_CHANGE.match(line):
        path = match.group(3) or last_move
        if path is None:
            raise ValueError(line)
        return [path], [(path, match.group(1)), (path, match.group(2))], None
    if match := _MOVE.match(line):
        moved = _moved(match.group(2))
        if moved is None:
            raise ValueError(line)
        return list(moved), [], moved[1]
    if match := _REWRITE.match(line):
        return [match.group(1)], [], None
    raise ValueError(line)


def read_git_paths(output: str) -> GitPaths:
    """git's account from the output of `git apply --numstat -z --summary` (NUL-ended numstat, then the summary)."""
    *records, summary = output.split("\0")
    paths: list[str] = []
    modes: list[tuple[str, str]] = []
    binary, unread, moves = [], [], []
    for record in records:
        fields = record.split("\t", 2)
        if len(fields) != 3 or not fields[2]:
            unread.append(record)
            continue
        paths.append(fields[2])
        if fields[:2] == ["-", "-"]:
            binary.append(fields[2])
    last_move = None
    for line in summary.split("\n"):
        if not line:
            continue
        if '"' in line:  # a quoted name: the reader does not unquote
            unread.append(line)
            continue
        try:
            named, moded, last_move = _summary_line(line, last_move)
        except ValueError:
            unread.append(line)
            continue
        paths += named
        modes += moded
        if line.startswith((" rename ", " copy ")):
            moves.append(line.strip())
    return GitPaths(paths=tuple(dict.fromkeys(paths)), modes=tuple(dict.fromkeys(modes)), moves=tuple(moves),
                    binary=tuple(binary), unread=tuple(unread))


def with_tree_modes(found: GitPaths, tree_modes: dict[str, str]) -> GitPaths:
    """`found` with the mode the tree gives each path it already holds."""
    extra = tuple((path, mode) for path, mode in tree_modes.items() if path in found.paths)
    return found.model_copy(update={"modes": tuple(dict.fromkeys(found.modes + extra))})


def text_paths(text: str) -> GitPaths:
    """The strict text reader's account (no git at hand); DiffError for what it does not understand."""
    return GitPaths(paths=tuple(touched_files(text)))


def not_regular(found: GitPaths) -> list[str]:
    """Each file that is, or would become, something other than a regular text file."""
    return ([f"{path} (mode {mode})" for path, mode in found.modes if mode not in REGULAR_MODES]
            + [f"{path} (binary)" for path in found.binary])


def refusal(found: GitPaths, prefix: PurePosixPath | str | None) -> tuple[str, str] | None:
    """Why a patch with these paths may not be applied to a tree (None: it may): the guard's rule
    (`patch_outside_package` or `patch_file_mode`) and one line. Every patch that reaches a tree was
    read by the strict text reader, which reads no rename or copy: git finding one means the two read
    the patch differently. `prefix` None: the caller knows no package."""
    if found.unread:
        return "patch_outside_package", (f"git's account of the patch has lines this reader does not know: "
                                         f"{found.unread[0][:120]!r}")
    if not found.paths:
        return "patch_outside_package", "git names no file the patch touches"
    if found.moves:
        return "patch_outside_package", f"`{found.moves[0]}`: a patch edits files in place, it renames and copies none"
    if prefix is not None and (bad := outside_package(list(found.paths), prefix)):
        return "patch_outside_package", f"touches {', '.join(bad)}, outside {prefix}/"
    if kinds := not_regular(found):
        return "patch_file_mode", f"changes {', '.join(kinds)}: only regular text files may be patched"
    return None
