"""A server slow to start is never silent: the host logs a still-starting note every
STILL_STARTING_NOTE_S until it is ready (the SSH host relays them too: tests/fleet/test_ssh_host.py)."""

from __future__ import annotations

import logging

from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.resources.hosts import host_side
from hyperloom_assets.sim.launch_script import SCRIPT_ENV
from tests.conftest import SIM_MODEL

SIM = ["--gpu", "H100", "--time-scale", "50", "--max-num-seqs", "4", "--enforce-eager"]


def test_a_start_scripted_3_s_slow_logs_still_starting_notes_until_ready(tmp_path, host, monkeypatch, caplog) -> None:
    monkeypatch.setattr(host_side, "STILL_STARTING_NOTE_S", 0.5)
    script = tmp_path / "launches.txt"
    script.write_text("startup:3\n")
    spec = ServerSpec(engine="sim", model=SIM_MODEL, server_args=SIM, env={SCRIPT_ENV: str(script)})
    with caplog.at_level(logging.INFO), host.serve(spec, tmp_path / "run", label="baseline") as launch:
        assert launch.ready_s >= 3
    notes = [r.getMessage() for r in caplog.records if "server still starting after" in r.getMessage()]
    assert len(notes) >= 4, caplog.text  # 3 s in notes of 0.5 s, less the first poll's slack
    assert script.read_text() == "", "the launch took its scripted line"
