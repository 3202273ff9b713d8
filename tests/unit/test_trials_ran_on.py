"""Where each trial ran: every launch of a trial (the variant's, the running best's beside it, the stack's
rebench) notes its slot, and the trials table and the report's trials section name them, host:devices."""

from __future__ import annotations

from pathlib import Path

from hyperloom_assets.core.decisions.climb import Budget, TrialMeasurement, climb
from hyperloom_assets.core.decisions.ledger import MemoryLedger
from hyperloom_assets.core.measurement.serving import LaunchRecord
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.report.rendering import trials_markdown
from hyperloom_assets.core.report.tables import trials_table

CAP = Variant(name="cap", add_args=["--max-num-seqs", "16"], provenance="seed_grid", reason="test")
SLOTS = ["gpu-a:0", "gpu-b:0,1"]


def climbed(slots: list[str | None]):
    """One trial of the cap that pays, its launches taking `slots` in turn."""
    taken = iter(slots * 10)

    def measure(keepers, variant):
        level = 150.0 if keepers or variant is not None else 100.0
        return TrialMeasurement(throughputs=[level, level + 1, level - 1], measuring_s=1.0, ran_on=next(taken))

    return climb([100.0, 101.0, 99.0], 1.0, Budget(max_trials=1, target_gain_pct=500.0),
                 lambda keepers, tried: [CAP] if not keepers else [], measure, MemoryLedger())


def test_every_launch_of_a_trial_notes_its_slot_and_the_table_names_each_once() -> None:
    trial = climbed(SLOTS).trials[0]
    assert trial.outcome == "KEEP" and trial.rebenches == 1
    launches = trial.measurements + len(trial.best_launches) + trial.rebenches
    assert trial.ran_on == (SLOTS * 10)[:launches], "the variant's, the best's and the rebench's, in order"
    assert trials_table([trial]).rows[0]["ran_on"] == "gpu-a:0, gpu-b:0,1"
    markdown = trials_markdown([trial])
    assert "| ran on |" in markdown.splitlines()[0] and "| gpu-a:0, gpu-b:0,1 |" in markdown


def test_off_a_slot_the_report_has_no_ran_on_column() -> None:
    trial = climbed([None]).trials[0]
    assert trial.ran_on == [] and trials_table([trial]).rows[0]["ran_on"] == ""
    assert "ran on" not in trials_markdown([trial])


def test_a_launch_on_a_slot_says_its_host_and_devices() -> None:
    launch = LaunchRecord(argv=[], env={}, base_url="http://127.0.0.1:1", served_model="m", log_path=Path("l"),
                          ready_s=1.0, devices=[0, 1], host="gpu-b")
    assert launch.slot_text() == "gpu-b:0,1"
    assert launch.model_copy(update={"devices": None}).slot_text() is None, "the target's host whole"
