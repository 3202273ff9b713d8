"""Every "invariant N" the code or docs cite is defined in docs/design.md.

The invariants are numbered headings there (`### Invariant N`, anchor `#invariant-n`), so
a citation a clone cannot follow, or one left behind when an invariant is renumbered,
fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITATION = re.compile(r"\binvariants? (\d+)", re.IGNORECASE)
SEARCHED = ("hyperloom_assets", "tests", "benchmarks", "scripts",
            "docs", "examples", "targets", "README.md")


def defined_invariants() -> set[int]:
    design = (ROOT / "docs" / "design.md").read_text()
    return {int(n) for n in re.findall(r"^### Invariant (\d+)$", design, flags=re.MULTILINE)}


def cited_invariants(root: Path = ROOT) -> dict[int, list[str]]:
    """invariant number -> "path:line" of each citation."""
    cited: dict[int, list[str]] = {}
    for top in SEARCHED:
        base = root / top
        files = [base] if base.is_file() else [p for p in base.rglob("*") if p.suffix in (".py", ".md", ".yaml")]
        for path in files:
            if "__pycache__" in path.parts:
                continue
            for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                for number in CITATION.findall(line):
                    cited.setdefault(int(number), []).append(f"{path.relative_to(root)}:{lineno}")
    return cited


def test_the_design_defines_numbered_invariants():
    assert defined_invariants() == set(range(1, max(defined_invariants()) + 1))


def test_every_cited_invariant_is_defined_in_the_repository():
    undefined = {n: where for n, where in cited_invariants().items() if n not in defined_invariants()}
    assert not undefined, f"cited but not defined in docs/design.md: {undefined}"


def test_a_citation_of_an_undefined_invariant_is_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "x.md").write_text("as " + "invariant" + " 99 says\n")  # split: not a citation here
    assert cited_invariants(tmp_path) == {99: ["docs/x.md:1"]}
