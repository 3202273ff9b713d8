"""Writes the Dagster instance config (`dagster.yaml`) into DAGSTER_HOME.

One serving launch per host at a time: every asset that launches a server declares its
host's pool, and every pool is limited to 1. No telemetry, and no NUX: without `nux`
the UI greets every fresh instance on localhost with a "Join the Dagster community"
newsletter dialog over the page.
"""

from __future__ import annotations

import sys
from pathlib import Path

INSTANCE_YAML = """\
# Written by `make setup` (hyperloom_assets/cli/instance_config.py); edits are overwritten.
concurrency:
  pools:
    default_limit: 1   # one serving launch per GPU host at a time
  runs:
    max_concurrent_runs: 4
telemetry:
  enabled: false
nux:
  enabled: false
"""


def write_instance_config(home: Path) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    path = home / "dagster.yaml"
    if not path.exists() or path.read_text() != INSTANCE_YAML:
        path.write_text(INSTANCE_YAML)
    return path


if __name__ == "__main__":
    print(f"instance config: {write_instance_config(Path(sys.argv[1]).resolve())}")
