"""The Python a patch changes, parsed where the critic can read it soundly. Pure code.

Each run of added lines (and each run of removed ones, on the old side) is parsed in its
hunk: the smallest window of the hunk's lines around it that parses, as it stands or
wrapped as a call's arguments, a dict's entries or an `if`/`try`'s later branch (a change
often sits inside an expression that opens before the hunk). code_rules.py then judges
the nodes that touch the changed lines.

A hunk alone cannot say whether its first line is inside a string that opened before it.
So hunk reading refuses what that could change: a triple quote in a changed line, a change
that opens its hunk (nothing before it), a line before the change ending in a backslash,
and a string starting in the hunk's context that runs into the change. Where the hunk
cannot be read (that, or no window parses), the whole file before and after the patch is
read instead when the caller has the tree (`patched`: the climb, for the operator's and
the library's patches); there the changed lines are those difflib does not match, plus
matched lines whose tokens changed kind (code that a moved quote turned into a string or
back). Without the tree, the change is refused as `unparseable_python`.
"""

from __future__ import annotations

import ast
import difflib
import io
import re
import textwrap
import tokenize
from collections.abc import Mapping

from hyperloom_assets.core.patches.diff_text import FileDiff, Hunk
from hyperloom_assets.core.proposer.code_rules import Finding, findings, imports_in

PYTHON_SUFFIXES = (".py", ".pyw", ".pyi")
# (prefix, suffix) that make a fragment parse: itself, call arguments, dict entries, a later branch.
WRAPS = (("", ""), ("_(\n", "\n)"), ("_ = {\n", "\n}"), ("if 0:\n    pass\n", ""), ("try:\n    pass\n", ""))
MAX_PARSES = 2000  # per run of changed lines: a window search that long is a hunk built to be slow
CODING = re.compile(r"^[ \t\f]*#.*?coding[:=]")  # PEP 263: a declaration re-decodes the file
TRIPLE_QUOTES = ('"""', "'''")


class Unreadable(ValueError):
    """A changed region the hunk cannot be read from soundly."""


def _runs(indexes: set[int]) -> list[tuple[int, int]]:
    """Maximal runs [a, b) of consecutive indexes."""
    runs: list[tuple[int, int]] = []
    for i in sorted(indexes):
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


def _text_hazard(lines: list[str]) -> str | None:
    if any("\r" in line or "\0" in line for line in lines):
        return "a carriage return or NUL byte in the change: git and Python split its lines differently"
    if any(CODING.match(line) for line in lines):
        return "an encoding declaration: it changes how Python decodes the file"
    return None


def _string_into(tree: ast.AST, first: int) -> bool:
    """Does a string that starts before line `first` run into it?"""
    strings = (node for node in ast.walk(tree)
               if isinstance(node, ast.JoinedStr) or isinstance(node, ast.Constant) and isinstance(node.value, str))
    return any(node.lineno < first <= (node.end_lineno or node.lineno) for node in strings)


def _window_findings(lines: list[str], a: int, b: int) -> list[tuple[int, Finding]]:
    """(hunk line index, finding) for the run [a, b) of `lines`, from the smallest window that parses."""
    windows = sorted(((i, j) for i in range(a + 1) for j in range(b, len(lines) + 1)),
                     key=lambda w: (w[1] - w[0], -w[0]))
    parses = 0
    for i, j in windows:
        body = textwrap.dedent("\n".join(lines[i:j]))
        for prefix, suffix in WRAPS:
            parses += 1
            if parses > MAX_PARSES:
                raise Unreadable(f"no window of its hunk parses within {MAX_PARSES} tries")
            try:
                tree = ast.parse(prefix + body + suffix)
            except (SyntaxError, ValueError):
                continue
            shift = prefix.count("\n") - i + 1  # hunk index k is line k + shift of the parsed text
            if _string_into(tree, a + shift):
                raise Unreadable("the change lies in a string that opens in the hunk's context before it")
            changed = {k + shift for k in range(a, b)}
            return [(f.line - shift, f) for f in findings(tree, changed, imports_in(lines))]
    raise Unreadable("no window of its hunk parses")


def _run_findings(lines: list[str], a: int, b: int, at_file_start: bool) -> list[tuple[int, Finding]]:
    if (hazard := _text_hazard(lines)) is not None:
        raise Unreadable(hazard)
    if not (a == 0 and at_file_start):
        if a == 0:
            raise Unreadable("the change opens its hunk: no line before it to read it after")
        if lines[a - 1].rstrip().endswith("\\"):
            raise Unreadable("the line before the change continues onto it (a trailing backslash)")
        if any(quote in line for line in lines[a:b] for quote in TRIPLE_QUOTES):
            raise Unreadable("a triple quote in a changed line: the hunk cannot say whether it opens or closes a string")
    return _window_findings(lines, a, b)


def _hunk_findings(hunk: Hunk, mark: str) -> list[tuple[int, Finding, str]]:
    """(line in the file, finding, the code there) for one side of a hunk ("+": added, "-": removed)."""
    lines, changed = hunk.side(mark)
    start = hunk.new_start if mark == "+" else hunk.old_start
    found = []
    for a, b in _runs(changed):
        # git places a hunk by its old start, and one at old line 0 or 1 only at the file's top
        for k, finding in _run_findings(lines, a, b, at_file_start=hunk.old_start <= 1):
            found.append((max(start, 1) + k, finding, lines[k] if 0 <= k < len(lines) else ""))
    return found


def _token_kinds(text: str) -> list[str]:
    """Per line, the kinds of the tokens on it (a multi-line string counts on every line it spans)."""
    kinds = [""] * (text.count("\n") + 2)
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type in (tokenize.INDENT, tokenize.DEDENT):
            continue  # structure, not kind: a block added above re-dedents the line after it
        for row in range(token.start[0], min(token.end[0], len(kinds) - 1) + 1):
            kinds[row] += tokenize.tok_name[token.type][0]
    return kinds


def _changed_lines(before: str, after: str) -> tuple[set[int], set[int]]:
    """(removed lines of `before`, added lines of `after`), 1-based: unmatched, or matched with other token kinds."""
    old, new = before.split("\n"), after.split("\n")
    old_kinds, new_kinds = _token_kinds(before), _token_kinds(after)
    removed, added = set(), set()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag != "equal":
            removed.update(range(i1 + 1, i2 + 1))
            added.update(range(j1 + 1, j2 + 1))
            continue
        for i, j in zip(range(i1 + 1, i2 + 1), range(j1 + 1, j2 + 1)):
            if old_kinds[i] != new_kinds[j]:
                removed.add(i)
                added.add(j)
    return removed, added


def _file_findings(before: str, after: str) -> list[tuple[str, int, Finding, str]]:
    """(mark, line, finding, the code there) for a whole file before and after the patch."""
    trees = {}
    for side, text in (("-", before), ("+", after)):
        said = "before" if side == "-" else "after"
        if "\r" in text or "\0" in text:
            raise Unreadable(f"a carriage return or NUL byte in the file {said} the patch: git and Python split "
                             "its lines differently")
        try:
            trees[side] = ast.parse(text)
        except (SyntaxError, ValueError) as exc:
            raise Unreadable(f"the file {said} the patch does not parse: {exc}") from exc
    try:
        removed, added = _changed_lines(before, after)
    except (SyntaxError, tokenize.TokenError) as exc:
        raise Unreadable(f"the file does not tokenize: {exc}") from exc
    new_lines = after.split("\n")
    if (hazard := _text_hazard([new_lines[k - 1] for k in sorted(added) if k <= len(new_lines)])) is not None:
        raise Unreadable(hazard)
    found = []
    for side, text, changed in (("+", after, added), ("-", before, removed)):
        lines = text.split("\n")
        found += [(side, f.line, f, lines[f.line - 1] if 0 < f.line <= len(lines) else "")
                  for f in findings(trees[side], changed)]
    return found


def _reason(path: str, mark: str, line: int, finding: Finding, code: str) -> str:
    verb = "adds" if mark == "+" else "removes"
    return f"{finding.rule}: {path}:{line} {verb} {finding.what}: {code.strip()[:120]!r}"


def python_reasons(files: list[FileDiff], patched: Mapping[str, tuple[str, str]]) -> list[str]:
    """Every rule the patch's Python breaks, as `rule: path:line adds|removes what: 'code'`, in order.
    `patched`: path -> (text before, text after) for the files whose tree the caller holds."""
    reasons = []
    for diff in files:
        if not diff.path.lower().endswith(PYTHON_SUFFIXES):
            continue
        try:
            found = [(mark, *item) for hunk in diff.hunks for mark in "+-" for item in _hunk_findings(hunk, mark)]
        except Unreadable as hunk_error:
            if diff.path not in patched:
                reasons.append(f"unparseable_python: {diff.path}: {hunk_error}; without its tree the critic cannot "
                               "read it")
                continue
            try:
                found = _file_findings(*patched[diff.path])
            except Unreadable as file_error:
                reasons.append(f"unparseable_python: {diff.path}: {hunk_error}; and {file_error}")
                continue
        reasons += list(dict.fromkeys(_reason(diff.path, *item) for item in found))
    return reasons
