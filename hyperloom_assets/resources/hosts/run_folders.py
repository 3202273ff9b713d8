"""Where a run's files go: `<host state dir>/runs/<target>/<run id>/<step>`."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from hyperloom_assets.resources.hosts.host import Host


def step_dir(host: Host, target: str, run_id: str, step: str) -> Path:
    """A fresh folder for one step's server logs, request records and plots."""
    folder = Path(host.state_path()) / "runs" / target / run_id / step
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def step_kind(step: str) -> str:
    """A step folder's kind: `trial-<fingerprint>-<ns>` is a trial, `validate-2-stack` validation."""
    if step.startswith("release-check"):
        return "release-check"
    return step.split("-")[0]


def launches_in(host: Host, target: str, run_id: str) -> dict[str, int]:
    """The server launches of one run, by step kind: every launch leaves its teardown record."""
    root = Path(host.state_path()) / "runs" / target / run_id
    counts = Counter(step_kind(record.relative_to(root).parts[0]) for record in root.rglob("teardown.json"))
    return dict(sorted(counts.items()))
