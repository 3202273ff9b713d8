"""Stop reasons are a closed vocabulary, each with one line of meaning."""

from __future__ import annotations

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
