"""The fault matrix's in-process rows: each fault made real on real servers, each row what
it left behind. A row is (fault, engine, outcome, leaked, measured_twice, lost, recover_s,
detail): `leaked` servers whose process group outlived the scenario, `measured_twice`
launches the store holds beyond those the trials account for, `lost` records that were
there before the fault and are not after, `recover_s` how long the fault cost."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import psutil

from benchmarks.support.sim_climbs import (
    FAST, QUIET, SCALE_10, baseline_and_roofline, climb_context, variant, write_target)
from benchmarks.support.store_writers import damage, fill_up, run_writers_at_once
from hyperloom_assets.assets.trials import run_climb
from hyperloom_assets.core.decisions.rule import OVERTIME_FACTOR
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts import host_side
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.hosts.process_group import read_pidfiles, terminate_group
from hyperloom_assets.resources.store.results import ResultStore, StoreWriteError
from hyperloom_assets.resources.store.schema import StoreSchemaError
from hyperloom_assets.sim.launch_script import SCRIPT_ENV


def row(fault: str, engine: str, outcome: str, leaked: int = 0, measured_twice: int = 0, lost: int = 0,
        recover_s: float = 0.0, detail: str = "") -> dict:
    return dict(fault=fault, engine=engine, outcome=outcome, leaked=leaked, measured_twice=measured_twice,
                lost=lost, recover_s=round(recover_s, 2), detail=detail)


def leaked_servers(pid_dir: Path) -> int:
    """Pidfiles whose server, or any process of its group, still runs; each is then torn down."""
    leaked = 0
    for path, record in read_pidfiles(pid_dir):
        group = [p for p in psutil.process_iter(["status"]) if _pgid(p.pid) == record.pgid
                 and p.info["status"] != psutil.STATUS_ZOMBIE]
        leaked += bool(group)
        terminate_group(record.pgid, term_wait_s=5.0)
        path.unlink(missing_ok=True)
    return leaked


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


class Bench:
    """One scenario's private host, store, instance and targets folder."""

    def __init__(self, root: Path):
        self.root, self.targets = root, root / "targets"
        self.host = LocalHost(state_dir=str(root / "state"), check_foreign_processes=False, teardown_term_wait_s=15.0)
        self.store = ResultStore(url=f"sqlite:///{root / 'results.db'}")
        self.instance: dg.DagsterInstance | None = None

    def pid_dir(self) -> Path:
        return Path(self.host.state_path()) / "pids"

    def target(self):
        return TargetCatalog(folder=str(self.targets)).target(self.target_name())

    def climb_launch_gap(self, run_id: str, trials) -> int:
        """Launches stored for the run beyond what its trials say they launched."""
        stored = [r for r in self.store.measurements(self.target_name()) if r["run_id"] == run_id
                  and r["kind"] in ("trial", "best_relaunch")]
        return len(stored) - sum(t.launch_count for t in trials)

    def target_name(self) -> str:
        return next(self.targets.glob("*.yaml")).stem


@contextmanager
def bench() -> Iterator[Bench]:
    with tempfile.TemporaryDirectory(prefix="hyperloom-faults-") as folder, dg.instance_for_test() as instance:
        scenario = Bench(Path(folder))
        scenario.instance = instance
        try:
            yield scenario
        finally:
            leaked_servers(scenario.pid_dir())


@contextmanager
def launch_script(path: Path, lines: str) -> Iterator[None]:
    path.write_text(lines)
    os.environ[SCRIPT_ENV] = str(path)
    try:
        yield
    finally:
        os.environ.pop(SCRIPT_ENV, None)


def sim_server_fault(kind: str) -> dict:
    """The first trial's server misbehaves mid-round (request 11 on); the climb must go on."""
    with bench() as b:
        write_target(b.targets, FAST + ["--max-num-seqs", "4"], QUIET, max_trials=2)
        baseline, roofline = baseline_and_roofline(b.targets, b.host, b.store, b.instance)
        broken, fine = variant("misbehaving", "--max-num-seqs", "8"), variant("quiet-stats", "--disable-log-stats")
        with launch_script(b.root / "launches.txt", f"{kind}@10\n"):
            result = run_climb(climb_context(kind), b.target(), b.host, BenchmarkClient(stall_timeout_s=5.0),
                               b.store, baseline, roofline, [broken, fine])
        first = result.climb.trials[0]
        failed = next(r for r in b.store.measurements("sim", "trial") if r["fingerprint"] == first.fingerprint)
        cost = (failed["finished_at"] - failed["started_at"]).total_seconds()
        return row(f"sim server: {kind} mid-round", "sim", f"{first.outcome} ({first.error_class})",
                   leaked_servers(b.pid_dir()), max(0, b.climb_launch_gap(kind, result.climb.trials)),
                   len(result.climb.trials) - len(b.store.trials(baseline.context_key)), cost,
                   f"next trial {result.climb.trials[1].outcome}" if len(result.climb.trials) > 1 else "")


def baseline_server_fault() -> dict:
    """Every launch answers 500 from request 11 on: three attempts on fresh servers, then baseline_failed."""
    with bench() as b:
        write_target(b.targets, FAST + ["--fault", "http-500", "--fault-after-requests", "10"])
        started = time.monotonic()
        job = build_defs(b.targets, host=b.host, store=b.store).resolve_job_def("baseline_job")
        job.execute_in_process(partition_key="sim", instance=b.instance, raise_on_error=False)
        attempts = [r["outcome"] for r in b.store.baseline_attempts("sim")]
        stops = [r["stop_reason"] for r in b.store.stops("sim")]
        return row("sim server: http-500 under the baseline", "sim", f"{','.join(stops)} after {len(attempts)} "
                   f"attempts ({attempts[-1] if attempts else '-'})", leaked_servers(b.pid_dir()),
                   recover_s=time.monotonic() - started, detail="each attempt on a fresh server")


def overtime() -> dict:
    with bench() as b:
        write_target(b.targets, SCALE_10 + ["--max-num-seqs", "16"])
        baseline, roofline = baseline_and_roofline(b.targets, b.host, b.store, b.instance)
        limit = OVERTIME_FACTOR * baseline.measuring_s
        started = time.monotonic()
        result = run_climb(climb_context("overtime"), b.target(), b.host, BenchmarkClient(), b.store, baseline,
                           roofline, [variant("one-at-a-time", "--max-num-seqs", "1")])
        wall = time.monotonic() - started
        trial = result.climb.trials[0]
        return row("overtime (a variant 16x slower)", "sim", trial.outcome, leaked_servers(b.pid_dir()),
                   max(0, b.climb_launch_gap("overtime", result.climb.trials)), recover_s=max(0.0, wall - limit),
                   detail=f"trial wall {wall:.1f} s against a limit of {limit:.1f} s")


def store_full_mid_climb() -> dict:
    with bench() as b:
        write_target(b.targets, FAST + ["--max-num-seqs", "4"], QUIET)
        baseline, roofline = baseline_and_roofline(b.targets, b.host, b.store, b.instance)
        before = len(b.store.measurements("sim")) + len(b.store.baseline_attempts("sim"))
        fill_up(b.store)
        wide = variant("wide", "--disable-log-stats").model_copy(update={"set_env": {"PADDING": "x" * 100_000}})
        started = time.monotonic()
        try:
            run_climb(climb_context("full"), b.target(), b.host, BenchmarkClient(), b.store, baseline, roofline, [wide])
            outcome = "no error (wrong)"
        except StoreWriteError as error:
            outcome = "StoreWriteError: " + str(error).split("; ")[0].split(": ", 1)[1]
        after = len(b.store.measurements("sim")) + len(b.store.baseline_attempts("sim"))
        return row("store write failure (disk full mid-climb)", "sim", outcome, leaked_servers(b.pid_dir()),
                   lost=before - after, recover_s=time.monotonic() - started)


def store_read_only() -> dict:
    with bench() as b:
        b.store.record_stop(target="sim", stop_reason="budget_exhausted", run_id="before")
        path = b.root / "results.db"
        frozen = ResultStore(url=f"sqlite:///file:{path}?mode=ro&uri=true")
        try:
            frozen.record_stop(target="sim", stop_reason="cancelled", run_id="now")
            outcome = "no error (wrong)"
        except StoreWriteError as error:
            outcome = "StoreWriteError: " + str(error).rsplit(": ", 1)[1]
        return row("store write failure (read-only database)", "sqlite", outcome,
                   lost=1 - len(frozen.stops("sim")))


def concurrent_writers(url: str, engine: str) -> dict:
    wall, errors = run_writers_at_once(url, ["target-a", "target-b"])
    missing = damage(url, ["target-a", "target-b"])
    return row(f"two runs writing one store ({engine})", engine, "ok" if not errors else f"{len(errors)} writer(s) "
               f"failed: {errors[0].strip().splitlines()[-1][:120]}", lost=sum(missing.values()), recover_s=wall,
               detail=f"2 x 40 trials, looks and measurements; {missing}")


def port_taken() -> dict:
    """Another process binds the port after preflight found it free and before the engine binds it."""
    squatters: list[socket.socket] = []
    real_start = host_side.start

    def start_after_a_squatter(argv, *args, **kwargs):
        if not squatters:
            squatter = socket.socket()
            squatter.bind((host_side.SERVE_HOST, int(argv[argv.index("--port") + 1])))
            squatter.listen()
            squatters.append(squatter)
        return real_start(argv, *args, **kwargs)

    with bench() as b:
        write_target(b.targets, FAST + ["--max-num-seqs", "16"])
        host_side.start = start_after_a_squatter
        started = time.monotonic()
        try:
            done = build_defs(b.targets, host=b.host, store=b.store).resolve_job_def("baseline_job") \
                .execute_in_process(partition_key="sim", instance=b.instance, raise_on_error=False)
        finally:
            host_side.start = real_start
            for squatter in squatters:
                squatter.close()
        attempts = [r["outcome"] for r in b.store.baseline_attempts("sim")]
        return row("port taken between preflight and launch", "sim",
                   f"{'baseline measured' if done.success else 'failed'} on another port; attempts {attempts}",
                   leaked_servers(b.pid_dir()), recover_s=time.monotonic() - started)


def vllm_server_killed_mid_round(tiny_model: Path) -> dict:
    """SIGKILL the API server of a trial's vLLM CPU launch once it has served for a few seconds."""
    with bench() as b:
        b.targets.mkdir(parents=True)
        (b.targets / "tiny.yaml").write_text(tiny_target_yaml(tiny_model))
        job = build_defs(b.targets, host=b.host, store=b.store).resolve_job_def("baseline_job")
        done = job.execute_in_process(partition_key="tiny", instance=b.instance)
        baseline, roofline = done.asset_value("baseline"), done.asset_value("roofline")
        baseline_pids = set()
        killed: list[float] = []
        watcher = threading.Thread(target=_kill_first_new_server, args=(b.pid_dir(), baseline_pids, killed), daemon=True)
        watcher.start()
        result = run_climb(climb_context("vllm-killed"), b.target(), b.host, BenchmarkClient(), b.store, baseline,
                           roofline, [variant("more-seqs", "--max-num-seqs", "4")])
        trial = result.climb.trials[0]
        recovered = time.monotonic() - killed[0] if killed else 0.0
        return row("vLLM server SIGKILLed mid-round", "vllm", f"{trial.outcome} ({trial.error_class})",
                   leaked_servers(b.pid_dir()), max(0, b.climb_launch_gap("vllm-killed", result.climb.trials)),
                   recover_s=recovered, detail=(trial.decision.reason or "")[:140])


def _kill_first_new_server(pid_dir: Path, skip: set[int], killed: list[float], settle_s: float = 1.5) -> None:
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        for _, record in read_pidfiles(pid_dir):
            if record.pid in skip:
                continue
            if _serving(record.pid):
                time.sleep(settle_s)  # into the warm-up or the first repeat
                os.kill(record.pid, 9)
                killed.append(time.monotonic())
                return
        time.sleep(0.2)


def _serving(pid: int) -> bool:
    try:
        return any(c.status == psutil.CONN_LISTEN for c in psutil.Process(pid).net_connections("tcp"))
    except psutil.Error:
        return False


def tiny_target_yaml(model: Path) -> str:
    import yaml
    return yaml.safe_dump({
        "engine": "vllm", "model": str(model), "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
        "server_args": ["--max-num-seqs", "2", "--enforce-eager", "--max-model-len", "512"],
        # 16 streams over a cap of 2: the first variant lifts the cap for a gain of several times, so its
        # first look (no interval yet) asks for another and the trial has a middle to stop in.
        "workload": {"kind": "random", "isl": 64, "osl": 32, "concurrency": 16, "num_prompts": 32},
        "repeats": 1, "max_trials": 1})


BAD_TARGET_FILES = {"latin1.yaml": "engine: sim\nmodel: caf\xe9\n".encode("latin-1"),
                    "....yaml": b"engine: sim\n",
                    "bomb.yaml": b"a: &a [x, x, x, x, x, x, x, x, x]\n" + b"".join(
                        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n".encode()
                        for p, c in zip("abcdefgh", "bcdefghi"))}


def bad_target_files() -> dict:
    """An undecodable file, an unsafe stem and an alias bomb beside a good target: the good one runs."""
    with bench() as b:
        write_target(b.targets, FAST + ["--max-num-seqs", "16"])
        for name, data in BAD_TARGET_FILES.items():
            (b.targets / name).write_bytes(data)
        started = time.monotonic()
        defs = build_defs(b.targets, host=b.host, store=b.store)
        done = defs.resolve_job_def("baseline_job").execute_in_process(partition_key="sim", instance=b.instance,
                                                                         raise_on_error=False)
        problems = TargetCatalog(folder=str(b.targets)).all()[1]
        named = {name for name in BAD_TARGET_FILES if any(name in str(p) for p in problems)}
        kept = sum((b.targets / name).read_bytes() == data for name, data in BAD_TARGET_FILES.items())
        longest = max((len(str(p)) for p in problems), default=0)
        return row("bad target files beside a good one", "sim",
                   f"{'baseline measured' if done.success else 'baseline failed'}; {len(named)} of "
                   f"{len(BAD_TARGET_FILES)} bad files named as problems", leaked_servers(b.pid_dir()),
                   lost=(len(BAD_TARGET_FILES) - kept) + (not done.success) + (len(named) < len(BAD_TARGET_FILES)),
                   recover_s=time.monotonic() - started, detail=f"longest problem text {longest} characters")


def unlaunchable_env() -> dict:
    """A variant whose env no process can be launched with fails its own trial; the next trial runs."""
    with bench() as b:
        write_target(b.targets, FAST + ["--max-num-seqs", "4"], QUIET, max_trials=2)
        baseline, roofline = baseline_and_roofline(b.targets, b.host, b.store, b.instance)
        bad = variant("bad-env", "--max-num-seqs", "8").model_copy(update={"set_env": {"VLLM_X=Y": "1"}})
        started = time.monotonic()
        result = run_climb(climb_context("bad-env"), b.target(), b.host, BenchmarkClient(), b.store, baseline,
                           roofline, [bad, variant("quiet-stats", "--disable-log-stats")])
        first = result.climb.trials[0]
        return row("unlaunchable env in a variant", "sim", f"{first.outcome} ({first.error_class})",
                   leaked_servers(b.pid_dir()), max(0, b.climb_launch_gap("bad-env", result.climb.trials)),
                   len(result.climb.trials) - len(b.store.trials(baseline.context_key)), time.monotonic() - started,
                   f"next trial {result.climb.trials[1].outcome}" if len(result.climb.trials) > 1 else "no next trial")


def foreign_database() -> dict:
    """The store's URL names another application's SQLite file: refused by name, the file untouched."""
    import sqlite3
    with tempfile.TemporaryDirectory(prefix="hyperloom-faults-") as folder:
        path = Path(folder) / "theirs.db"
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE measurements (id INTEGER PRIMARY KEY, reading REAL)")
            db.executemany("INSERT INTO measurements (reading) VALUES (?)", [(1.5,), (2.5,)])
        before = path.read_bytes()
        started = time.monotonic()
        try:
            ResultStore(url=f"sqlite:///{path}").stops("sim")
            outcome = "adopted"
        except StoreSchemaError as error:
            outcome = f"StoreSchemaError naming the file: {str(path) in str(error)}"
        return row("a foreign database at the store's URL", "sqlite", outcome,
                   lost=int(path.read_bytes() != before), recover_s=time.monotonic() - started,
                   detail="its own measurements table, 2 rows; the file compared byte for byte")
