"""A release-triggered run: which release it serves and what the stack did before. Pure code.

The release sensor tags the runs it asks for; the assets read the tags, serve from the
release's own environment, and re-validate the previous stack on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hyperloom_assets.core.models import Strict

PACKAGE_TAG = "hyperloom/release_package"
VERSION_TAG = "hyperloom/release_version"
TRIGGER_TAG = "hyperloom/trigger"


class ReleaseRun(Strict):
    package: str
    version: str
    python: Path
    previous_stack: dict[str, Any] | None = None  # the store's latest stack before this run

    @property
    def identity(self) -> str:
        """The engine identity of the ledger context: a release is a context of its own."""
        return f"dist:{self.package}=={self.version}"


class ReleaseCheck(Strict):
    """On a release run: the stack validated before, validated again on the new release."""

    release: str  # "package==version"
    holds: bool
    summary: str
    gain_pct: float
    ci_low: float
    ci_high: float
    previous_gain_pct: float
    previous_ci_low: float | None = None  # the earlier validation's interval (absent in older records)
    previous_ci_high: float | None = None


def release_from_tags(tags: Mapping[str, str]) -> tuple[str, str] | None:
    package, version = tags.get(PACKAGE_TAG), tags.get(VERSION_TAG)
    return (package, version) if package and version else None


def stack_verdict(previous: tuple[float, float, float], gain_pct: float, ci_low: float,
                  ci_high: float) -> tuple[bool, str]:
    """Does the earlier stack still hold on the new release? (holds, sentence with the numbers).

    `previous` is the earlier validation's (gain, low, high). Both gains are estimates
    from a few launches, so "gains less" needs the two 95% intervals apart: the whole new
    interval below the earlier one. A point estimate under the earlier point is noise as
    often as not.
    """
    before, before_low, before_high = previous
    numbers = (f"{gain_pct:+.2f}% [{ci_low:+.2f}%, {ci_high:+.2f}%] on the new release, "
               f"{before:+.2f}% [{before_low:+.2f}%, {before_high:+.2f}%] before")
    if ci_high < 0:
        return False, f"regression: the earlier stack is now slower than the baseline: {numbers}"
    if ci_high < before_low:
        return False, f"regression: the earlier stack gains less than it did: {numbers}"
    return True, f"the earlier stack still holds: {numbers}"
