"""A patch stays in the engine's package as regular files (issue 48, point 4), against real git trees.

The attacks: a rename of the tree's `setup.py` into the package (git deletes `setup.py`),
a new symlink to /root/.ssh inside the package, and a text edit of a symlink the tree
already holds (which re-points it). Each is refused where a model's patch is checked (the
host's checks through the guard), where any patch reaches the run's worktree (checked,
served, committed), and by the strict text reader wherever git is not asked.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from hyperloom_assets.assets.proposer_round import _git_paths
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.patches.diff_text import DiffError, read_diff
from hyperloom_assets.core.patches.git_paths import read_git_paths, text_paths
from hyperloom_assets.core.patches.patch import PatchError, parse_patch
from hyperloom_assets.core.planning.patch_plan import patch_variant
from hyperloom_assets.core.proposer.allowlist import target_allowlist
from hyperloom_assets.core.proposer.critic_rules import CriticChange, review
from hyperloom_assets.core.proposer.guard import GuardInputs, guard
from hyperloom_assets.core.proposer.replies import ProposedChange
from hyperloom_assets.resources.hosts.proposal_checks import checks_request, proposal_checks
from hyperloom_assets.resources.trees.git import git_out
from hyperloom_assets.resources.trees.trial_trees import TrialTrees
from hyperloom_assets.resources.trees.workspace import PatchRejected, check_applies, checkout, commit_patch, open_run_tree
from tests.trees import small_tree, staged_diff

VLLM = engine_for("vllm")
FILES = {"setup.py": "setup()\n", "vllm/__init__.py": "", "vllm/x.py": "A = 1\n"}
EDIT = "--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-A = 1\n+A = 2\n"
# The review's rename: the `diff --git` line names only the package file, which is all the old reader read.
CRAFTED_RENAME = "diff --git a/vllm/b.py b/vllm/b.py\nsimilarity index 100%\nrename from setup.py\nrename to vllm/b.py\n"


@pytest.fixture
def tree(tmp_path) -> Path:
    return small_tree(tmp_path / "operator", FILES)


def rename_attack(tree: Path) -> str:
    return staged_diff(tree, ("mv", "setup.py", "vllm/b.py"))


def symlink_attack(tree: Path) -> str:
    os.symlink("/root/.ssh", tree / "vllm" / "ssh")
    return staged_diff(tree, ("add", "vllm/ssh"))


def guarded(patch: str, paths=None, apply_error=None) -> str | None:
    proposal = ProposedChange(name="p", server_args=[], env=[], patch=patch, rationale="why")
    inputs = GuardInputs(package_prefix="vllm", patch_paths=paths, patch_apply_error=apply_error,
                         allowed=target_allowlist("vllm", [], None))
    return guard(proposal, VLLM, frozenset(), inputs).rule


def test_the_attacks_are_what_git_makes_of_them(tree) -> None:
    assert "rename from setup.py" in rename_attack(tree) and "new file mode 120000" in symlink_attack(tree)
    assert (tree / "setup.py").is_file() and not (tree / "vllm" / "ssh").exists(), "the tree is restored"


def host_checks(tree: Path, *patches: str) -> dict:
    """The host's checks of a model's patches (the sim's parser probe is the quick one to run)."""
    request = checks_request(engine_for("sim"), [], sys.executable, [[]], patches=list(patches), tree=str(tree))
    return proposal_checks(request)


def test_a_models_rename_and_symlink_are_refused_by_the_guard_from_gits_account(tree) -> None:
    rename, symlink = rename_attack(tree), symlink_attack(tree)
    checks = host_checks(tree, rename, CRAFTED_RENAME, symlink, EDIT)
    assert checks["patch_errors"] == [None] * 4, "git itself would apply all four"
    assert "setup.py" in _git_paths(checks, 1).paths, "git names the rename's source"
    assert guarded(rename, _git_paths(checks, 0)) == "patch_outside_package"
    assert guarded(CRAFTED_RENAME, _git_paths(checks, 1)) == "patch_outside_package"
    assert guarded(symlink, _git_paths(checks, 2)) == "patch_file_mode"
    assert guarded(EDIT, _git_paths(checks, 3)) is None, "a plain edit inside the package passes"


def test_a_rename_inside_the_package_is_refused_by_the_guard_as_by_the_tree(tree) -> None:
    """A patch edits files in place: the guard judges git's account as every way into the tree does."""
    inside = staged_diff(tree, ("mv", "vllm/x.py", "vllm/y.py"))
    checks = host_checks(tree, inside)
    assert checks["patch_errors"] == [None] and _git_paths(checks, 0).moves, "git reads a rename it would apply"
    assert guarded(inside, _git_paths(checks, 0)) == "patch_outside_package"


def test_a_text_edit_of_a_symlink_the_tree_holds_is_refused(tmp_path) -> None:
    tree = small_tree(tmp_path / "operator", FILES)
    os.symlink("/usr/lib/libc.so.6", tree / "vllm" / "_C.so")
    git_out(tree, "add", ".")
    git_out(tree, "commit", "-qm", "a linked extension, as framework-tree init makes")
    repoint = "--- a/vllm/_C.so\n+++ b/vllm/_C.so\n@@ -1 +1 @@\n-/usr/lib/libc.so.6\n\\ No newline at end of file\n" \
              "+/tmp/evil.so\n\\ No newline at end of file\n"
    checks = host_checks(tree, repoint)
    assert checks["patch_errors"] == [None], "git would re-point the link"
    assert guarded(repoint, _git_paths(checks, 0)) == "patch_file_mode"
    run = open_run_tree(tree, tmp_path / "state", "t")
    with pytest.raises(PatchRejected, match="_C.so \\(mode 120000\\)"):
        check_applies(run, run.base_commit, repoint, "vllm")


def test_without_git_the_text_reader_refuses_them(tree) -> None:
    rename, symlink = rename_attack(tree), symlink_attack(tree)
    assert guarded(rename) == guarded(CRAFTED_RENAME) == "patch_outside_package"
    assert guarded(symlink) == "patch_file_mode"
    for text in (rename, CRAFTED_RENAME, symlink):
        with pytest.raises(PatchError):
            parse_patch(text, "p", "operator", VLLM)  # how operator, library and model patches are read


@pytest.mark.parametrize("apply", ["check", "checkout", "commit"])
def test_no_way_a_patch_reaches_the_worktree_lets_a_rename_or_symlink_through(tree, tmp_path, apply) -> None:
    rename, symlink = rename_attack(tree), symlink_attack(tree)
    run = open_run_tree(tree, tmp_path / "state", "t")
    head = git_out(run.worktree, "rev-parse", run.branch)
    for attack, why in ((rename, "rename setup.py => vllm/b.py"), (CRAFTED_RENAME, "rename setup.py => vllm/b.py"),
                        (symlink, "vllm/ssh \\(mode 120000\\)")):
        with pytest.raises(PatchRejected, match=why):
            if apply == "check":
                check_applies(run, run.base_commit, attack, "vllm")
            elif apply == "checkout":
                checkout(run, run.base_commit, attack, "vllm")
            else:
                commit_patch(run, attack, "KEEP attack", "vllm")
    assert (run.worktree / "setup.py").is_file() and not (run.worktree / "vllm" / "ssh").is_symlink()
    assert git_out(run.worktree, "rev-parse", run.branch) == head, "nothing was committed"
    with pytest.raises(PatchRejected, match="setup.py, outside vllm/"):
        check_applies(run, run.base_commit, EDIT.replace("vllm/x.py", "setup.py"), "vllm")
    check_applies(run, run.base_commit, EDIT, "vllm")  # a plain edit inside the package applies


@pytest.mark.parametrize("header, file_kind", [
    ("diff --git a/setup.py b/vllm/b.py\nsimilarity index 100%\nrename from setup.py\nrename to vllm/b.py\n", False),
    ("diff --git a/vllm/x.py b/vllm/x.py\nrename old vllm/x.py\nrename new vllm/y.py\n", False),
    ("diff --git a/vllm/x.py b/vllm/x.py\ncopy from vllm/x.py\ncopy to vllm/z.py\n", False),
    ("diff --git a/vllm/x.py b/vllm/x.py\nold mode 100644\nnew mode 100755\n", True),
    ("diff --git a/vllm/ssh b/vllm/ssh\nnew file mode 120000\n--- /dev/null\n+++ b/vllm/ssh\n@@ -0,0 +1 @@\n+/root\n", True),
    ("diff --git a/vllm/m b/vllm/m\ndeleted file mode 160000\n--- a/vllm/m\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n", True),
    ("diff --git a/vllm/l b/vllm/l\nindex 1a2b..3c4d 120000\n--- a/vllm/l\n+++ b/vllm/l\n@@ -1 +1 @@\n-a\n+b\n", True),
    ("diff --git a/vllm/x.so b/vllm/x.so\nindex 1a2b..3c4d 100644\nGIT binary patch\nliteral 4\n", True),
    ('diff --git "a/vllm/x y.py" "b/vllm/x y.py"\n--- "a/vllm/x y.py"\n+++ "b/vllm/x y.py"\n@@ -1 +1 @@\n-a\n+b\n',
     False),
    ("--- x.py\n+++ x.py\n@@ -1 +1 @@\n-a\n+b\n", False),  # git -p1 would strip x.py to nothing
    ("@@ -1 +1 @@\n-a\n+b\n", False),
    ("--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1,2 +1,2 @@\n-a\n+b\n", False),  # fewer lines than the header counts
])
def test_the_text_reader_refuses_what_is_more_than_a_text_edit(header, file_kind) -> None:
    with pytest.raises(DiffError) as refused:
        read_diff("# a header git skips\n" + header)
    assert refused.value.file_kind == file_kind, refused.value


def test_the_text_reader_reads_paths_as_git_does(tree) -> None:
    plain = "--- vllm/x.py\n+++ vllm/x.py\n@@ -1 +1 @@\n-A = 1\n+A = 2\n"
    assert text_paths(plain).paths == ("x.py",), "git -p1 strips the first component, whatever it is"
    assert host_checks(tree, plain)["patch_paths"][0]["paths"] == ["x.py"]
    assert guarded(plain) == "patch_outside_package"
    two = EDIT + "trailing words git skips\n" + EDIT.replace("vllm/x.py", "setup.py")
    assert text_paths(two).paths == ("vllm/x.py", "setup.py"), "a section after skipped text still counts"


def test_gits_account_is_read_whole_or_refused() -> None:
    found = read_git_paths("0\t0\tvllm/sub/b.py\x001\t0\tvllm/ssh\x00-\t-\tvllm/x.so\x00 rename vllm/{ => sub}/b.py (100%)\n"
                           " create mode 120000 vllm/ssh\n mode change 100644 => 100755 vllm/y.py\n")
    assert set(found.paths) == {"vllm/sub/b.py", "vllm/b.py", "vllm/ssh", "vllm/x.so", "vllm/y.py"}
    assert ("vllm/ssh", "120000") in found.modes and found.binary == ("vllm/x.so",) and not found.unread
    odd = read_git_paths("0\t0\tvllm/q.py\x00 rename a => b => c (100%)\n create mode 100644 \"vllm/\\tq.py\"\n")
    assert len(odd.unread) == 2, "an ambiguous rename and a quoted name are not guessed at"
    assert guarded(EDIT, odd) == "patch_outside_package"



def test_the_climb_hands_the_critic_the_files_before_and_after_from_the_tree(tmp_path) -> None:
    tree = small_tree(tmp_path / "operator", {"vllm/y.py": "import math\n\n\ndef f(n):\n    return n\n"})
    documented = ('--- a/vllm/y.py\n+++ b/vllm/y.py\n@@ -3,3 +3,4 @@\n \n def f(n):\n+    """Half of n."""\n'
                  "     return n\n")
    variant = patch_variant(parse_patch(documented, "doc", "operator", VLLM), 75.0)
    patched = TrialTrees(open_run_tree(tree, tmp_path / "state", "t"), "vllm").patched_files([], variant)
    assert patched == (("vllm/y.py", "import math\n\n\ndef f(n):\n    return n\n",
                        'import math\n\n\ndef f(n):\n    """Half of n."""\n    return n\n'),)
    assert review(CriticChange(name="doc", patch=documented), VLLM).reasons[0].startswith("unparseable_python"), \
        "a triple quote: the hunk alone cannot be read"
    assert review(CriticChange(name="doc", patch=documented, patched=patched), VLLM).verdict == "approve"
