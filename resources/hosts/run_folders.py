"""Where a run's files go: `<host state dir>/runs/<target>/<run id>/<step>`."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def step_dir(host: Any, target: str, run_id: str, step: str) -> Path:
    """A fresh folder for one step's server logs, request records and plots."""
    folder = Path(host.state_path()) / "runs" / target / run_id / step
    folder.mkdir(parents=True, exist_ok=True)
    return folder
