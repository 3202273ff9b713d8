"""Is a committed result still about the code it measured? Its exercised paths, since its commit.

Each benchmark script declares, beside its code, the source paths it measures: a
module-level `EXERCISES = ("hyperloom_assets/sim/", "benchmarks/support/sim_grid.py")`
(a folder ends with "/"), or, for a script whose results measure different code (the
accuracy gate on the sim or on vLLM), a dict from result name to such a tuple, "*" for
any other name. `write_results` records a result's paths in its JSON; a result
written before they were recorded takes them from the declaration of the script its
command ran. The script itself is not among them: its declaration is edited with it, and
a change to how it measures comes with a re-run.

A result is stale when a file under one of its exercised paths differs between its commit
and the tree as it stands (`git diff <commit>`, untracked files included), or when its
commit is unknown here (not recorded, or not in this clone's history). The tree, not HEAD:
docs/benchmarks.md is rendered before the commit that changes the code, and must still
match once that commit is made. So the commits counted are those since the result's commit
that touched an exercised path, plus one for the tree's own pending change to one: before
the commit and after it, the count is the same.

`tree_changes` asks git (here, not in core); `staleness` decides, a pure function.
"""

from __future__ import annotations

import ast
import subprocess
from collections.abc import Sequence
from pathlib import Path

from hyperloom_assets.core.models import Frozen

DECLARATION = "EXERCISES"


class TreeChanges(Frozen):
    """What git says of the tree since one commit: the files that differ, and each commit's files."""

    files: tuple[str, ...]  # differ between the commit and the tree as it stands (untracked included)
    commits: tuple[tuple[str, ...], ...]  # each commit since, its files; the tree's pending change as one more


class Staleness(Frozen):
    """A result's verdict: stale or not, and why, in facts a page can state."""

    stale: bool
    commit: str | None
    exercises: tuple[str, ...] | None  # None: the paths are unknown (no declaration)
    commit_known: bool = True
    commits: int = 0  # commits since `commit` that changed an exercised path
    changed: dict[str, int] = {}  # exercised path -> files under it that changed


def covers(path: str, file: str) -> bool:
    """Whether an exercised PATH (a file, or a folder ending in "/") holds FILE."""
    return file == path.rstrip("/") or file.startswith(path.rstrip("/") + "/")


def staleness(commit: str | None, exercises: Sequence[str] | None, changes: TreeChanges | None) -> Staleness:
    """The verdict for a result of COMMIT exercising EXERCISES, given the tree's CHANGES since it (None: unknown)."""
    paths = None if exercises is None else tuple(exercises)
    if paths is None:
        return Staleness(stale=True, commit=commit, exercises=None)
    if commit is None or changes is None:
        return Staleness(stale=True, commit=commit, exercises=paths, commit_known=False)
    changed = {p: n for p in paths if (n := sum(covers(p, f) for f in changes.files))}
    touching = sum(any(covers(p, f) for p in paths for f in files) for files in changes.commits)
    return Staleness(stale=bool(changed), commit=commit, exercises=paths, commits=touching if changed else 0,
                     changed=changed)


def rerun_command(command: Sequence[str] | None) -> str:
    """The recorded command line, as a reader re-runs it from the repo root (the venv's python, no --allow-dirty)."""
    if not command:
        return "the benchmark (its command line is not recorded)"
    head = [".venv/bin/python"] if Path(command[0]).name.startswith("python") else [command[0]]
    return " ".join([*head, *(arg for arg in command[1:] if arg != "--allow-dirty")])


def describe(verdict: Staleness, command: Sequence[str] | None) -> str:
    """One line: "stale: N commits changed <paths> since <commit>; re-run `...`", or what makes it fresh."""
    rerun = f"re-run `{rerun_command(command)}`"
    if verdict.exercises is None:
        return f"**stale**: exercised paths unknown (its script declares no `{DECLARATION}`); {rerun}"
    if not verdict.commit_known:
        why = "not recorded" if verdict.commit is None else f"`{verdict.commit}` is not in this clone's history"
        return f"**stale**: commit unknown ({why}); {rerun}"
    if verdict.stale:
        paths = ", ".join(f"`{p}` ({n} file{'s' if n > 1 else ''})" for p, n in verdict.changed.items())
        many = "s" if verdict.commits != 1 else ""
        return f"**stale**: {verdict.commits} commit{many} changed {paths} since `{verdict.commit}`; {rerun}"
    return f"fresh: no exercised path changed since `{verdict.commit}`"


def _paths(script: Path, value: object) -> tuple[str, ...]:
    if not isinstance(value, tuple) or not value or not all(isinstance(p, str) and p for p in value):
        raise ValueError(f"{script}: {DECLARATION} must be a non-empty tuple of repo-relative paths "
                         f"(or a dict of result name to one), got {value!r}")
    return value


def read_declaration(script: Path) -> dict[str, tuple[str, ...]] | None:
    """SCRIPT's module-level EXERCISES (read, not imported), by result name ("*": any); None: none, or no script."""
    try:
        tree = ast.parse(script.read_text(), filename=str(script))
    except (OSError, UnicodeDecodeError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == DECLARATION for t in node.targets):
            value = _declared_value(node.value)
            if isinstance(value, dict) and value:
                return {str(name): _paths(script, paths) for name, paths in value.items()}
            return {"*": _paths(script, value)}
    return None


# Paths several benchmarks share, named in a declaration as `OFFLINE_CLIMB + ("more/",)`: the
# offline climb on the sim's predictions (search quality, effectiveness, recipe memory, parallel search).
SHARED_PATHS: dict[str, tuple[str, ...]] = {"OFFLINE_CLIMB": (
    "hyperloom_assets/core/decisions/", "hyperloom_assets/core/planning/", "hyperloom_assets/core/measurement/",
    "hyperloom_assets/core/roofline/", "hyperloom_assets/core/engines/grids/", "hyperloom_assets/sim/predict.py",
    "hyperloom_assets/sim/scheduler.py", "hyperloom_assets/sim/perf_model.py", "hyperloom_assets/sim/physics.py",
    "hyperloom_assets/sim/kv_cache.py", "hyperloom_assets/sim/build.py", "hyperloom_assets/sim/engine_args.py",
    "hyperloom_assets/sim/telemetry.py", "hyperloom_assets/sim/profiles/", "models/",
    "hyperloom_assets/sim/launch_record.py", "benchmarks/support/offline_climb.py")}
OFFLINE_CLIMB = SHARED_PATHS["OFFLINE_CLIMB"]


def _declared_value(node: ast.expr):
    """A declaration's value: a literal, a name of SHARED_PATHS, or tuples of those added together."""
    if isinstance(node, ast.Name) and node.id in SHARED_PATHS:
        return SHARED_PATHS[node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return tuple(_declared_value(node.left)) + tuple(_declared_value(node.right))
    return ast.literal_eval(node)


def for_result(declaration: dict[str, tuple[str, ...]] | None, name: str) -> tuple[str, ...] | None:
    """The paths a declaration gives result NAME: its own entry, else "*"'s; None: neither."""
    return None if declaration is None else declaration.get(name, declaration.get("*"))


def declared_exercises(script: Path, name: str = "") -> tuple[str, ...] | None:
    """The paths SCRIPT declares for its result NAME (see read_declaration)."""
    return for_result(read_declaration(script), name)


def script_of(record: dict, root: Path) -> Path | None:
    """The benchmark script that wrote RECORD: the .py its command ran, else the one its `benchmark` names."""
    scripts = root / "benchmarks"
    for arg in (record.get("command") or [])[1:]:
        if arg.endswith(".py") and (scripts / Path(arg).name).is_file():
            return scripts / Path(arg).name
    name = record.get("benchmark") or ""
    # "noise_pinning" was written by noise.py, "patch_effect_<patch>_seqs16" by patch_effect.py: the longest stem.
    stems = sorted((p.stem for p in scripts.glob("*.py") if name == p.stem or name.startswith(p.stem + "_")),
                   key=len, reverse=True)
    return scripts / f"{stems[0]}.py" if stems else None


def exercises_of(record: dict, root: Path) -> tuple[str, ...] | None:
    """The paths RECORD says it exercised, else its script's declaration as it stands; None: neither."""
    if record.get("exercises"):
        return tuple(record["exercises"])
    script = script_of(record, root)
    return declared_exercises(script, record.get("benchmark") or "") if script else None


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True,
                          timeout=30).stdout


def _lines(text: str) -> tuple[str, ...]:
    return tuple(line for line in text.splitlines() if line)


def _by_commit(log: str) -> tuple[tuple[str, ...], ...]:
    """`git log --format=%x00 --name-only` output: one tuple of files per commit."""
    return tuple(_lines(chunk) for chunk in log.split("\0")[1:])


def tree_changes(root: Path, commit: str) -> TreeChanges | None:
    """What changed in ROOT's tree since COMMIT (see the module's docstring); None: COMMIT is unknown here."""
    try:
        _git(root, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
        untracked = _lines(_git(root, "ls-files", "--others", "--exclude-standard"))
        files = _lines(_git(root, "diff", "--name-only", "--no-renames", commit)) + untracked
        pending = _lines(_git(root, "diff", "--name-only", "--no-renames", "HEAD")) + untracked
        log = _git(root, "log", "--format=%x00", "--name-only", "--no-renames", f"{commit}..HEAD")
    except (OSError, subprocess.SubprocessError):
        return None
    return TreeChanges(files=files, commits=_by_commit(log) + ((pending,) if pending else ()))


def full_history(root: Path) -> bool:
    """Whether ROOT is a git work tree with its whole history (not a shallow clone): staleness is knowable."""
    try:
        return _git(root, "rev-parse", "--is-shallow-repository").strip() == "false"
    except (OSError, subprocess.SubprocessError):
        return False


def verdicts(records: dict[str, dict], root: Path) -> dict[str, Staleness]:
    """Each result's verdict, git asked once per distinct commit."""
    seen: dict[str, TreeChanges | None] = {}
    out = {}
    for name, record in records.items():
        commit = record.get("commit")
        if commit and commit not in seen:
            seen[commit] = tree_changes(root, commit)
        out[name] = staleness(commit, exercises_of(record, root), seen.get(commit) if commit else None)
    return out
