"""The result store under faults, on real SQLite files: a write that fails (a read-only
database, a full one) fails with an error naming the store and the record and loses
nothing already recorded; runs writing one store at once collide on nothing."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from hyperloom_assets.assets.trials import run_climb
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from hyperloom_assets.core.proposer.record import ProposerRound
from hyperloom_assets.resources.hosts.owner_scope import this_holder
from hyperloom_assets.resources.releases.ledger import ReleaseLedger
from hyperloom_assets.resources.store.leases import HostLeases
from hyperloom_assets.resources.store.llm_calls import LlmCallLog
from hyperloom_assets.resources.store.results import ResultStore, StoreWriteError
from benchmarks.support.store_writers import damage, fill_up, integrity, run_writers_at_once
from benchmarks.support.sim_climbs import FAST, QUIET, baseline_and_roofline, climb_context, variant, write_target
from tests.assets.test_faults_sim import instance  # noqa: F401 - a fixture


def read_only(path: Path) -> ResultStore:
    """The same file opened read-only by SQLite itself: a real read-only database, even for root."""
    return ResultStore(url=f"sqlite:///file:{path}?mode=ro&uri=true")


def a_look_and_its_measurement(store: ResultStore) -> None:
    row = store.record_measurement(target="sim", kind="trial", argv=["serve"], env={},
                                   started_at=datetime.now(timezone.utc), context_key="ctx", fingerprint="fp",
                                   measurement={"output_throughput": 1.0})
    store.record_look(context_key="ctx", fingerprint="fp", look=1, record={"measurement_id": row}, run_id="r")


def test_a_write_to_a_read_only_store_names_the_store_and_the_record_and_loses_nothing(tmp_path) -> None:
    path = tmp_path / "results.db"
    a_look_and_its_measurement(ResultStore(url=f"sqlite:///{path}"))
    frozen = read_only(path)
    with pytest.raises(StoreWriteError) as caught:
        frozen.record_trial(context_key="ctx", target="sim", fingerprint="fp", variant={}, outcome="KEEP",
                            record={}, measurement_id=1, run_id="r")
    message = str(caught.value)
    assert message.startswith("result store sqlite:///file") and "results.db?mode=ro" in message
    assert "could not record trial fp of sim (KEEP)" in message
    assert "readonly database" in message and "rolled back" in message
    assert [row["look"] for row in frozen.looks("ctx")] == [1], "the trial's launches are still there"
    assert len(frozen.measurements("sim")) == 1


def test_a_full_store_rolls_a_trial_back_whole_keeping_its_recorded_launches(tmp_path) -> None:
    store = ResultStore(url=f"sqlite:///{tmp_path / 'results.db'}")
    a_look_and_its_measurement(store)
    fill_up(store)
    with pytest.raises(StoreWriteError, match="could not record trial fp of sim .*database or disk is full"):
        # recording a trial deletes its looks in the same transaction: a failed insert must undo that too
        store.record_trial(context_key="ctx", target="sim", fingerprint="fp", variant={}, outcome="KEEP",
                           record={"padding": "x" * 200_000}, measurement_id=1, run_id="r")
    assert [row["look"] for row in store.looks("ctx")] == [1]
    assert store.trials("ctx") == []


def test_a_store_that_fills_up_mid_climb_fails_the_step_after_the_teardown(tmp_path, host, store, instance) -> None:
    write_target(tmp_path / "targets", FAST + ["--max-num-seqs", "4"], QUIET, max_trials=2)
    baseline, roofline = baseline_and_roofline(tmp_path / "targets", host, store, instance)
    before = (store.measurements("sim"), store.baseline_attempts("sim"))
    target = TargetCatalog(folder=str(tmp_path / "targets")).target("sim")
    fill_up(store)
    # a bulky env (the sim reads none): the row of the first launch no longer fits
    wide = variant("wide", "--disable-log-stats").model_copy(update={"set_env": {"PADDING": "x" * 100_000}})
    with pytest.raises(StoreWriteError, match=r"^result store sqlite:///.*results\.db: could not record a trial "
                                              r"measurement of sim; .*database or disk is full"):
        run_climb(climb_context("full"), target, host, BenchmarkClient(), store, baseline, roofline, [wide])
    assert read_pidfiles(Path(host.state_path()) / "pids") == [], "the server was torn down before the error"
    assert (store.measurements("sim"), store.baseline_attempts("sim")) == before, "nothing recorded is lost"


def test_two_runs_writing_one_fresh_sqlite_store_at_once_collide_on_nothing(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"  # fresh: both processes also race to create the tables
    _, errors = run_writers_at_once(url, ["target-a", "target-b"])
    assert errors == [], errors
    assert damage(url, ["target-a", "target-b"]) == {"measurements": 0, "trials": 0, "looks_left": 0, "stops": 0,
                                                    "mismatched": 0}
    assert integrity(url) == "ok"


def test_a_run_reads_its_target_from_the_snapshot_its_first_read_stored(tmp_path, store) -> None:
    folder = tmp_path / "targets"
    write_target(folder, FAST + ["--max-num-seqs", "4"], max_trials=3)
    catalog = TargetCatalog(folder=str(folder))
    assert catalog.run_target("sim", "run-1", store).max_trials == 3
    write_target(folder, FAST + ["--max-num-seqs", "8"], max_trials=5)  # edited mid-run
    again = catalog.run_target("sim", "run-1", store)
    assert (again.max_trials, again.server_args[-1]) == (3, "4"), "every later step of run-1 sees the file as it was"
    assert catalog.run_target("sim", "run-2", store).max_trials == 5, "the next run reads the edit"
    (folder / "sim.yaml").unlink()
    assert catalog.run_target("sim", "run-1", store).max_trials == 3, "even a deleted file"


def test_the_extra_tables_writes_fail_as_the_stores_own_do(tmp_path) -> None:
    # Leases, the release ledger and the proposer's call log live in the store's database:
    # a write that fails names the store and the record, not a bare SQLAlchemy error.
    path = tmp_path / "results.db"
    writable = ResultStore(url=f"sqlite:///{path}")
    ledger, leases, calls = ReleaseLedger(writable), HostLeases(writable), LlmCallLog(writable)
    ledger.request("sim", "vllm", "0.33.0", "release:sim:vllm==0.33.0:1")
    leases.acquire("gpu-a", this_holder("run-a"))
    calls.record_round("sim", "r", ProposerRound(round=1, provenance="llm:openai/m", calls=[]))
    frozen = read_only(path)
    writes = {
        "release vllm 0.33.0 of sim (requested)":
            lambda: ReleaseLedger(frozen).request("sim", "vllm", "0.33.0", "release:sim:vllm==0.33.0:2"),
        "the lease of host 'gpu-b'": lambda: HostLeases(frozen).acquire("gpu-b", this_holder("run-b")),
        "the release of the lease of host 'gpu-a'": lambda: HostLeases(frozen).release("gpu-a", this_holder("run-a")),
        "proposer round 2 of sim":
            lambda: LlmCallLog(frozen).record_round("sim", "r", ProposerRound(round=2, provenance="p", calls=[])),
    }
    for what, write in writes.items():
        with pytest.raises(StoreWriteError, match=r"^result store sqlite:///file.*results.db.*: could not record "
                                                  + re.escape(what) + r".*readonly database"):
            write()
    assert len(ReleaseLedger(frozen).rows("sim", "vllm", "0.33.0")) == 1
    assert [lease.host for lease in HostLeases(frozen).held()] == ["gpu-a"]
    assert [row["round"] for row in LlmCallLog(frozen).rounds("sim")] == [1]
