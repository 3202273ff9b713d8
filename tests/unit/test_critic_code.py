"""The offline critic reads a patch's Python as a syntax tree (issue 48, point 1).

Each bypass the review found is refused by its rule, and so are the obfuscations around
them; what a performance patch does (arithmetic, scheduling, the core count) still passes.
A change the hunk alone cannot read soundly is refused as `unparseable_python`, unless the
caller has the tree: then the whole file decides.
"""

from __future__ import annotations

import difflib
import time

import pytest

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.proposer.critic_rules import RULES, CriticChange, review

VLLM = engine_for("vllm")
WORKER = "vllm/worker.py"
STEP = "import torch\n\n\ndef step(batch):\n    n = len(batch)\n    return run(batch)\n"


def diff(old: str, new: str, path: str = WORKER, context: int = 3) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}",
                                        n=context))


def adding(code: str, before: str = STEP) -> tuple[str, str]:
    """(the patch, the file after it) that add `code` inside step(), before its return."""
    after = before.replace("    return run(batch)\n", "".join(f"    {line}\n" for line in code.split("\n"))
                           + "    return run(batch)\n")
    return diff(before, after), after


def rules_of(patch: str, patched: tuple = ()) -> list[str]:
    reply = review(CriticChange(name="p", patch=patch, patched=patched), VLLM)
    return [] if reply.verdict == "approve" else [reason.split(":", 1)[0] for reason in reply.reasons]


@pytest.mark.parametrize("code, rule", [
    # the review's five bypasses, each approved by the per-line critic
    ('key = os.environ.get("ANTHROPIC_API_KEY")', "environment_access"),
    ('__import__("o"+"s").system("id")', "dynamic_import"),
    ('getattr(__import__("sub"+"process"), "run")(["id"])', "dynamic_attribute"),
    ('importlib.import_module("soc"+"ket")', "dynamic_import"),
    ('secret = Path("/etc/shadow").read_text()', "file_access"),
    # the obfuscations around them
    ("from os import environ as e", "denied_import"),
    ("names = vars(os)", "dynamic_attribute"),
    ('b = globals()["__builtins__"]', "dynamic_attribute"),
    ('m = sys.modules["os"]', "dynamic_import"),
    ('run_it = getattr(os, "sys" + "tem")', "dynamic_attribute"),
    ('f = open', "file_access"),
    ('getattr(torch, "load")(path)', "dynamic_attribute"),
    ("from subprocess import run as go", "denied_import"),
    ("import importlib.util as u", "denied_import"),
    ('exec("print(1)")', "dynamic_code"),
    ("spec = type(batch).__subclasses__()", "dynamic_attribute"),
    ('home = os.getenv("HOME")', "environment_access"),
    ('io.open("/tmp/x", "w")', "file_access"),
    ('urllib.request.urlopen("http://10.0.0.1/")', "network_access"),
    ('conn = http.client.HTTPConnection("10.0.0.1")', "network_access"),
    ('socket.create_connection(("10.0.0.1", 22))', "network_access"),
    ('os.system("id")', "process_control"),
    ('weights = torch.load(path)', "dynamic_code"),
    ("from x import *", "dynamic_import"),
])
def test_each_way_out_is_refused_by_its_rule(code, rule) -> None:
    patch, _ = adding(code)
    assert rule in rules_of(patch), (code, rules_of(patch))
    assert rule in RULES


def test_a_module_bound_by_an_import_in_the_hunk_is_known_by_its_alias() -> None:
    before = "import subprocess as sp\ndef step(batch):\n    return run(batch)\n"
    patch, _ = adding('sp.run(["id"])', before)
    assert rules_of(patch) == ["process_control"], "the import is context, and the call on its alias is refused"


@pytest.mark.parametrize("code", [
    "n = os.cpu_count() or 1",
    "batch = sorted(batch, key=len)[: max(1, n // 2)]",
    "scale = torch.sin(torch.arange(n, dtype=torch.float32) * 12.9898)",
    "import math\nchunk = math.ceil(n / 4)",
    "if (os.cpu_count() or 0) <= 2:\n    self.reserve_cpu_num = 0",
    "cap = getattr(self.config, \"max_num_seqs\", 8)",
])
def test_what_a_performance_patch_does_passes(code) -> None:
    patch, _ = adding(code)
    assert rules_of(patch) == [], code


def test_only_what_the_patch_changes_is_judged_and_what_it_removes_is() -> None:
    before = STEP.replace("    n = len(batch)\n", "    path = os.environ['P']\n    n = len(batch)\n")
    assert rules_of(diff(before, before.replace("n = len(batch)", "n = len(batch) * 2"))) == [], \
        "the file's own os.environ, in the hunk's context, is not the patch's doing"
    guarded = STEP.replace("    return run(batch)\n", "    if not batch:\n        raise ValueError('empty')\n"
                                                     "    return run(batch)\n")
    assert rules_of(diff(guarded, STEP)) == ["sensitive_code"], "removing a raise changes what happens on failure"


def test_a_region_inside_an_expression_is_parsed_in_its_hunk() -> None:
    before = ("def build(self):\n    return dict(\n        a=1,\n        b=2,\n        c=3,\n    )\n")
    safe = before.replace("        b=2,\n", "        b=3,\n")
    assert rules_of(diff(before, safe)) == []
    leak = before.replace("        b=2,\n", "        b=__import__('os').environ,\n")
    assert set(rules_of(diff(before, leak))) == {"dynamic_import", "environment_access"}


# A docstring in the file: a changed line that closes it turns what follows into code.
DOC = 'def step(batch):\n    """Run one step.\n\n    Batches are sorted.\n    """\n    return run(batch)\n'
DOC_ATTACK = DOC.replace("    Batches are sorted.\n",
                         '    """; __import__("os").system("id"); """\n    Batches are sorted.\n')


def test_a_change_the_hunk_cannot_read_is_refused_without_the_tree_and_read_whole_with_it() -> None:
    attack = diff(DOC, DOC_ATTACK)
    assert rules_of(attack) == ["unparseable_python"], "a triple quote: the hunk cannot tell a string from code"
    assert {"dynamic_import", "process_control"} <= set(rules_of(attack, patched=((WORKER, DOC, DOC_ATTACK),)))
    documented = STEP.replace("def step(batch):\n", 'def step(batch):\n    """One step: run the batch."""\n')
    assert rules_of(diff(STEP, documented)) == ["unparseable_python"]
    assert rules_of(diff(STEP, documented), patched=((WORKER, STEP, documented),)) == [], \
        "read whole, a new docstring is a string"
    broken = STEP.replace("    return run(batch)\n", "    return run(batch\n")
    assert rules_of(diff(STEP, broken), patched=((WORKER, STEP, broken),)) == ["unparseable_python"]


def test_text_python_reads_otherwise_than_git_is_refused() -> None:
    coding, _ = adding("# -*- coding: utf-7 -*-")  # utf-7 decodes `+AAo-` in a comment to a newline
    assert rules_of(coding) == ["unparseable_python"]
    two_lines = (f"--- a/{WORKER}\n+++ b/{WORKER}\n@@ -4,3 +4,4 @@\n def step(batch):\n     n = len(batch)\n"
                 "+    x = 1\rimport os\n     return run(batch)\n")  # one line for git, two for Python
    assert rules_of(two_lines) == ["unparseable_python"]


def test_a_diff_it_does_not_understand_is_refused_and_a_slow_hunk_is_cut_short() -> None:
    renamed = "diff --git a/setup.py b/vllm/b.py\nsimilarity index 100%\nrename from setup.py\nrename to vllm/b.py\n"
    assert rules_of(renamed) == ["unreadable_patch"]
    before = "def f():\n" + "".join(f"    x{i} = (\n" for i in range(150)) + "    y = 1\n"
    started = time.monotonic()
    assert rules_of(diff(before, before.replace("    y = 1\n", "    else:\n"), context=200)) == ["unparseable_python"]
    assert time.monotonic() - started < 10, "the window search has a bound"


def test_a_new_file_is_read_from_its_first_line() -> None:
    module = '"""A fused kernel\'s launch sizes."""\n\nimport math\n\n\ndef blocks(n):\n    return math.ceil(n / 128)\n'
    assert rules_of(diff("", module, "vllm/fused.py").replace("--- a/vllm/fused.py", "--- /dev/null")) == [], \
        "at the top of a file the reader knows it is in code: a docstring there is read"
    spy = module.replace("import math\n", "import math\nimport os\n")
    assert rules_of(diff("", spy, "vllm/fused.py").replace("--- a/vllm/fused.py", "--- /dev/null")) == ["denied_import"]


def test_an_edit_inside_a_string_that_opens_in_the_context_is_not_read_as_code() -> None:
    before = 'USAGE = """run it as\nstep = (\n"""\n'
    edit = diff(before, before.replace("step = (", "steps = ("))
    assert rules_of(edit) == ["unparseable_python"], "the window that parses holds the change inside a string"


def test_read_whole_a_line_the_patch_turns_from_string_into_code_counts_as_changed() -> None:
    before = 'def step(batch):\n    """Run one step, e.g.\n    __import__("os").system("id")\n    """\n    return run(batch)\n'
    after = before.replace('one step, e.g.\n', 'one step."""\n').replace('    """\n    return', '    return')
    patch = diff(before, after)
    assert '+    __import__("os")' not in patch, "the line itself is not in the patch"
    assert "dynamic_import" in rules_of(patch, patched=((WORKER, before, after),))
