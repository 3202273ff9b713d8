"""benchmarks/render_page.py: docs/benchmarks.md and the generated blocks are the results' JSON, re-rendered."""

from __future__ import annotations

import re

import pytest

from benchmarks import render_page
from benchmarks.support.results import ROOT
from benchmarks.support.staleness import Staleness, full_history

REGENERATE = ("regenerate with `PYTHONPATH=. .venv/bin/python benchmarks/render_page.py` and commit the result "
              "(a change to a path a result exercises changes its staleness line)")


FRESH = Staleness(stale=False, commit="abc1234", exercises=("hyperloom_assets/sim/",))
STALE = Staleness(stale=True, commit="abc1234", exercises=("hyperloom_assets/sim/", "benchmarks/support/x.py"),
                  commits=3, changed={"hyperloom_assets/sim/": 2})


@pytest.mark.skipif(not full_history(ROOT), reason="a shallow clone or no git: the results' staleness is unknowable")
def test_the_committed_page_and_every_generated_block_match_the_results() -> None:
    """Staleness is rendered from the tree as it stands: a change to an exercised path needs the page re-rendered."""
    for path, text in render_page.rendered(ROOT).items():
        name = path.relative_to(ROOT)
        assert path.exists(), f"{name} is missing; {REGENERATE}"
        committed = path.read_text()
        if path == ROOT / render_page.PAGE:
            assert committed == text, f"{name} differs from benchmarks/results/*.json; {REGENERATE}"
            continue
        for ours, theirs in zip(render_page.BLOCK.finditer(text), render_page.BLOCK.finditer(committed), strict=True):
            assert ours.group(3) == theirs.group(3), (
                f"{name}: the block `generated:{ours.group(2)}` differs from benchmarks/results/*.json; {REGENERATE}")


def test_every_result_has_a_section_with_a_stable_anchor() -> None:
    page = (ROOT / render_page.PAGE).read_text()
    for path in (ROOT / "benchmarks" / "results").glob("*.json"):
        assert f"\n## {path.stem.replace('_', '-')}\n" in page


def _record(**fields) -> dict:
    return {"benchmark": "client_capacity", "machine": {"cpu": "AMD EPYC", "cores": 2},
            "results": {"mean_tokens_per_s": {"hyperloom": 50.0, "vllm": 100.0}, "ratio": 0.5, "target_met": False},
            **fields}


def test_a_result_lacking_its_provenance_says_so() -> None:
    text = render_page.section("client_capacity", _record(), FRESH)
    for missing in ("commit not recorded", "dirty flag not recorded", "command line not recorded",
                    "at start: not recorded"):
        assert missing in text


def test_a_recorded_provenance_is_shown_as_recorded() -> None:
    record = _record(commit="abc1234", dirty=True, command=["/py", "benchmarks/x.py", "--allow-dirty"])
    record["machine"].update(load_average_1_5_15_at_start=[1.0, 2.0, 3.0], load_average_1_5_15_at_end=[4.0, 5.0, 6.0],
                             started_at="2026-01-01T00:00:00+00:00", finished_at="2026-01-01T00:05:00+00:00")
    text = render_page.section("client_capacity", record, FRESH)
    assert "commit: `abc1234`" in text and "dirty: true" in text and "`/py benchmarks/x.py --allow-dirty`" in text
    assert "[1.0, 2.0, 3.0]" in text and "[4.0, 5.0, 6.0]" in text and "2026-01-01T00:05:00" in text


def test_the_verdict_is_the_jsons_own_never_a_met_it_does_not_state() -> None:
    text = render_page.section("client_capacity", _record(), FRESH)
    assert "`target_met: false`" in text
    assert not re.search(r"(?<![_`])\bmet\b", text.replace("target_met", ""))


def test_a_block_is_rewritten_from_the_results_and_an_unknown_block_is_an_error() -> None:
    results = render_page.load_results()
    fresh = dict.fromkeys(results, FRESH)
    typed = "before\n<!-- generated:demo -->\n| a typed figure |\n<!-- /generated:demo -->\nafter\n"
    filled = render_page.fill_blocks(typed, results, fresh)
    assert "a typed figure" not in filled and filled.startswith("before\n") and filled.endswith("after\n")
    assert results["demo_time"]["results"]["headline"] in filled
    with pytest.raises(KeyError, match="no renderer for block `nonesuch`"):
        render_page.fill_blocks("<!-- generated:nonesuch -->\n<!-- /generated:nonesuch -->", results, fresh)


def test_a_stale_result_is_marked_above_its_table_on_the_page_and_under_its_block() -> None:
    record = _record(commit="abc1234", command=["/v/.venv/bin/python", "benchmarks/client_capacity.py"])
    marked = "**stale**: 3 commits changed `hyperloom_assets/sim/` (2 files) since `abc1234`; " \
             "re-run `.venv/bin/python benchmarks/client_capacity.py`"
    stale = render_page.section("client_capacity", record, STALE)
    assert stale.index(marked) < stale.index("| client |")
    assert "- exercises: `hyperloom_assets/sim/`, `benchmarks/support/x.py`" in stale
    fresh = render_page.section("client_capacity", record, FRESH)
    assert "stale" not in fresh and "- fresh: no exercised path changed since `abc1234`" in fresh
    page = render_page.render_page({"client_capacity": record}, {"client_capacity": STALE})
    assert "Stale results (1 of 1): [client-capacity](#client-capacity)." in page
    results = render_page.load_results()
    block = "<!-- generated:demo -->\n<!-- /generated:demo -->\n"
    filled = render_page.fill_blocks(block, results, {**dict.fromkeys(results, FRESH), "demo_time": STALE})
    assert "**stale**: 3 commits changed `hyperloom_assets/sim/` (2 files) since `abc1234`; re-run `" in filled
    assert "stale" not in render_page.fill_blocks(block, results, dict.fromkeys(results, FRESH))
