"""The baseline's second launch, beside its first, in a run that holds several slots.

Measured once, the baseline gives no launch-to-launch interval, so none of the climb's first
looks could be decided on it: the parallel climb launches it again beside its first trials
(core/decisions/parallel.py), and they wait for that launch. A run that holds a second slot
leaves it idle while the baseline is measured, so the baseline asset launches the baseline
there at the same time: a plain launch of the same config (no profiler, no gate prompts, no
retries), kept in the ledger as the baseline's fresh launch, where the climb finds it as a
re-executed run would and launches nothing more for it. A launch that fails is logged, and
the climb launches the baseline again itself.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Iterator

from hyperloom_assets.core.decisions.climb_state import BASELINE
from hyperloom_assets.core.decisions.parallel import relaunch_key
from hyperloom_assets.core.decisions.trial_record import Look
from hyperloom_assets.core.measurement.contract import WorkloadContract
from hyperloom_assets.core.measurement.serving import ServerError, ServerSpec
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.hosts.run_folders import step_dir
from hyperloom_assets.resources.measure import MeasuredConfig, MeasurementOvertime, run_measurement
from hyperloom_assets.resources.store.results import ResultStore

STEP = "baseline-beside"


@contextmanager
def launched_beside(context, host: Host | None, bench: BenchmarkClient, store: ResultStore, spec: ServerSpec,
                    contract: WorkloadContract, key: str) -> Iterator[None]:
    """While the block measures the baseline, the same config on `host` (another slot of the run; None:
    the run has one), recorded as the baseline's fresh launch once both are done."""
    if host is None:
        yield
        return
    name, run_id = context.partition_key, context.run.run_id
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix=STEP) as beside:
        launch: Future[MeasuredConfig] = beside.submit(
            run_measurement, host=host, bench=bench, store=store, target=name, kind="best_relaunch", spec=spec,
            contract=contract, run_dir=step_dir(host, name, run_id, STEP), run_id=run_id, context_key=key)
        context.log.info("baseline launched beside it on %s as well: the climb's first looks are judged on both",
                         host.name)
        yield
        try:
            fresh = launch.result().as_trial_launch(spec.env)
        except (ServerError, MeasurementOvertime) as exc:
            context.log.warning("the baseline's launch beside it failed (%s: %s); the climb launches it again",
                                getattr(exc, "error_class", "overtime"), str(exc).splitlines()[0][:300])
            return
    look = Look(trial=relaunch_key(BASELINE), index=1, role="best", measurement=fresh, against=BASELINE)
    store.record_look(context_key=key, fingerprint=look.trial, look=look.index, record=look.model_dump(mode="json"),
                      run_id=run_id)
