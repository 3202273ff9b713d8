"""Writes the Dagster instance config (`dagster.yaml`) into DAGSTER_HOME.

One serving launch per host at a time: every asset that launches a server declares its
host's pool, and every pool is limited to 1. No telemetry, and no NUX: without `nux`
the UI greets every fresh instance on localhost with a "Join the Dagster community"
newsletter dialog over the page.

Run monitoring (it runs in the daemon: `dagster dev` or `dagster-daemon run`): a run
whose worker never started is failed after start_timeout_seconds; a run being
terminated whose worker is gone (so nothing answers the cancel) is marked canceled
after cancel_timeout_seconds, longer than a teardown's worst case (15 s TERM wait plus
5 s KILL wait per server); and the pool slots of a run that ended without releasing them
(its worker died) are freed free_slots_after_run_end_seconds after it ended. Dagster's
default run launcher has no worker health check, so monitoring cannot see a worker
that died while its run was STARTED; the host resource does that at the next run on
the host (resources/hosts/run_workers.py), daemon or not. No max_runtime_seconds: a
GPU run may legitimately take many hours.
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
run_monitoring:
  enabled: true
  start_timeout_seconds: 300
  cancel_timeout_seconds: 120
  free_slots_after_run_end_seconds: 30
  poll_interval_seconds: 15
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
