"""The documentation site builds with no broken link or anchor, and the README's links land.

`mkdocs build --strict` turns mkdocs.yml's `validation` warnings (a link to a missing page,
an anchor no heading makes, a page left out of the nav) into a failed build, so a page that
moves or a heading that is renamed fails `make test` instead of leaving a dead link.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).with_name("mkdocs")  # the venv's, beside its python (not resolved)
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert MKDOCS.exists(), f"{MKDOCS} is missing: mkdocs belongs to the project's test extra"
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stderr[-6000:]}"
    return out


def test_the_docs_build_strict(site: Path) -> None:
    assert (site / "design" / "index.html").exists()


def relative_links(markdown: str) -> list[str]:
    """Links to files of this repository: no scheme, no bare in-page anchor."""
    return [link for link in MARKDOWN_LINK.findall(markdown)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", link) and not link.startswith("#")]


def built_page(site: Path, doc: str) -> Path:
    """Where mkdocs (directory URLs) writes docs/<doc>.md."""
    page = Path(doc).relative_to("docs").with_suffix("")
    return site / ("index.html" if page.name == "index" else page / "index.html")


def test_every_readme_link_lands_on_a_file_and_its_anchor(site: Path) -> None:
    links = relative_links((ROOT / "README.md").read_text())
    assert links, "the README points into docs/"
    for link in links:
        path, _, anchor = link.partition("#")
        assert (ROOT / path).exists(), f"README links to {path}, which does not exist"
        if anchor:
            assert path.startswith("docs/") and path.endswith(".md"), f"{link}: anchors only into docs/ pages"
            assert f'id="{anchor}"' in built_page(site, path).read_text(), f"README: {path} has no #{anchor}"
