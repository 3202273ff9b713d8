"""Run monitoring as the instance config turns it on. (Marking a run whose worker died failed
is the host's job at the next run, tests/cli/test_faults_cli.py: Dagster's default launcher
has no worker health check.)"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from hyperloom_assets.cli.instance_config import write_instance_config


def instance_at(home: Path) -> dg.DagsterInstance:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAGSTER_HOME", str(home))
        return dg.DagsterInstance.get()


def test_the_instance_config_turns_run_monitoring_on(tmp_path) -> None:
    home = tmp_path / "home"
    write_instance_config(home)
    with instance_at(home) as instance:
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_start_timeout_seconds == 300
        assert instance.run_monitoring_cancel_timeout_seconds > 20, "longer than a teardown's worst case"
        assert instance.run_monitoring_settings["free_slots_after_run_end_seconds"] == 30
        assert instance.run_monitoring_max_runtime_seconds == 0, "a GPU run may take many hours"
        assert "MONITORING" in instance.get_required_daemon_types()
