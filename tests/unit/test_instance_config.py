"""The instance config `make setup` writes: what Dagster reads from it."""

from __future__ import annotations

import dagster as dg

from hyperloom_assets.cli.instance_config import write_instance_config


def test_a_fresh_instance_shows_no_community_dialog_and_sends_no_telemetry(tmp_path) -> None:
    write_instance_config(tmp_path)
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        # The UI opens its "Join the Dagster community" newsletter dialog on localhost
        # whenever the instance says NUX is enabled and DAGSTER_HOME/.nux has no record.
        assert instance.nux_enabled is False
        assert instance.telemetry_enabled is False

