"""Stop reasons are a closed vocabulary, each with one line of meaning."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from hyperloom_assets.core.decisions.stop_reasons import MEANINGS, StopReason, describe, markdown_table, matches_case
from tests.conftest import unmet_stop_marks

REQUIRED = {"target_reached", "budget_exhausted", "time_exhausted", "no_more_candidates",
            "baseline_failed", "baseline_arg_error", "environment_unavailable"}


def test_the_vocabulary_holds_the_required_reasons():
    assert REQUIRED <= {r.value for r in StopReason}


def test_every_reason_has_one_line_of_meaning():
    assert set(MEANINGS) == set(StopReason)
    for reason in StopReason:
        assert reason.description and "\n" not in reason.description


def test_values_are_plain_strings_for_metadata():
    assert StopReason.BUDGET_EXHAUSTED == "budget_exhausted"
    assert StopReason("baseline_arg_error") is StopReason.BASELINE_ARG_ERROR
    assert "max_trials" in describe("budget_exhausted")


def test_an_unknown_reason_is_refused_by_name():
    with pytest.raises(ValueError, match="'gave_up'"):
        describe("gave_up")


def test_markdown_table_lists_each_reason_once():
    table = markdown_table()
    for reason in StopReason:
        assert table.count(f"`{reason.value}`") == 1


def test_the_docs_table_is_the_vocabulary() -> None:
    """docs/run.md quotes the code's table verbatim, so the words cannot drift from it."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "run.md").read_text()
    assert markdown_table() in page


def marked_stop_cases(tests: Path) -> dict[tuple[str, str | None], list[str]]:
    """`@pytest.mark.stop_reason("x", case="y")` markers in the test tree: (reason, case) -> the files marking it."""
    marked: dict[tuple[str, str | None], list[str]] = {}
    for path in sorted(tests.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.mark.stop_reason":
                case = next((ast.literal_eval(k.value) for k in node.keywords if k.arg == "case"), None)
                for arg in node.args:
                    marked.setdefault((ast.literal_eval(arg), case), []).append(path.name)
    return marked


def all_cases() -> set[tuple[str, str]]:
    return {(reason.value, case) for reason, meaning in MEANINGS.items() for case in meaning.cases}


def test_every_case_of_every_stop_reason_is_produced_by_some_test() -> None:
    """Each clause of a reason's description is a case, each case has a test marked with it, and
    tests/conftest.py fails a marked test whose run did not record that reason with a detail
    showing the case: no reason, and no clause of its meaning, is a label only."""
    marked = set(marked_stop_cases(Path(__file__).resolve().parents[1]))
    assert all(case is not None for _, case in marked), "every mark names its case"
    assert marked <= all_cases(), f"unknown cases marked: {sorted(marked - all_cases())}"
    assert marked == all_cases(), f"no test produces {sorted(all_cases() - marked)}"


def test_a_case_needs_its_evidence_in_the_recorded_detail() -> None:
    stop = ("baseline_failed", "baseline_failed: after 3 consecutive failed attempt(s): crash: exited")
    assert matches_case(*stop[:1], "three_failures", stop[1])
    assert not matches_case("baseline_failed", "duplicate", stop[1])
    assert unmet_stop_marks([("baseline_failed", "three_failures")], [stop]) == []
    assert unmet_stop_marks([("baseline_failed", "duplicate")], [stop]) == ["baseline_failed/duplicate"]
    assert unmet_stop_marks([("cancelled", None)], [stop]) == ["cancelled"]
