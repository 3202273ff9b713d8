"""The sim's launch script lines (a test hook): each parses to what that launch does, or is refused by name."""

from __future__ import annotations

import pytest

from hyperloom_assets.sim.launch_script import LaunchEntry, parse_entry


@pytest.mark.parametrize("line, entry", [
    ("", LaunchEntry()),
    ("+8", LaunchEntry(speed=1.08)),
    ("crash", LaunchEntry(crash=True)),
    ("stall@10", LaunchEntry(fault="stall", fault_after_requests=10)),
    ("startup:3", LaunchEntry(startup_delay_s=3.0)),
])
def test_a_line_is_what_the_launch_does(line, entry) -> None:
    assert parse_entry(line) == entry


@pytest.mark.parametrize("line, expected", [("startup:soon", "startup:SECONDS"), ("hang@x", "KIND@N"),
                                            ("fast", "+8 or 'crash'")])
def test_a_bad_line_is_refused_naming_what_was_expected(line, expected) -> None:
    with pytest.raises(ValueError, match="HYPERLOOM_SIM_LAUNCH_SCRIPT") as caught:
        parse_entry(line)
    assert expected in str(caught.value)
