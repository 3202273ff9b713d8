"""Stop reasons are a closed vocabulary, each with one line of meaning."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from hyperloom_assets.core.decisions.stop_reasons import DESCRIPTIONS, StopReason, describe, markdown_table

REQUIRED = {"target_reached", "budget_exhausted", "time_exhausted", "no_more_candidates",
            "baseline_failed", "baseline_arg_error", "environment_unavailable"}


def test_the_vocabulary_holds_the_required_reasons():
    assert REQUIRED <= {r.value for r in StopReason}


def test_every_reason_has_one_line_of_meaning():
    assert set(DESCRIPTIONS) == set(StopReason)
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


def test_the_readme_table_is_the_vocabulary() -> None:
    """The README quotes the code's table verbatim, so the words cannot drift from it."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert markdown_table() in readme


def marked_stop_reasons(tests: Path) -> dict[str, list[str]]:
    """`@pytest.mark.stop_reason("x")` markers in the test tree: reason -> the files marking it."""
    marked: dict[str, list[str]] = {}
    for path in sorted(tests.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.mark.stop_reason":
                for arg in node.args:
                    marked.setdefault(ast.literal_eval(arg), []).append(path.name)
    return marked


def test_every_stop_reason_is_produced_by_some_test() -> None:
    """Each reason has a test marked with it, and tests/conftest.py fails a marked test
    whose run did not record that reason in its result store: no reason is a label only."""
    marked = marked_stop_reasons(Path(__file__).resolve().parents[1])
    assert set(marked) <= {r.value for r in StopReason}, f"unknown reasons marked: {set(marked) - set(StopReason)}"
    assert set(marked) == {r.value for r in StopReason}, \
        f"no test produces {sorted({r.value for r in StopReason} - set(marked))}"
