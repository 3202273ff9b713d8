"""The `profile` asset on the sim: one profiled launch, its model's own time breakdown, kept and shown."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import dagster as dg
import pytest

from hyperloom_assets.assets.profile import PROFILE_OFF
from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.measurement.contract import WorkloadContract
from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.core.profile.trace import CATEGORIES
from hyperloom_assets.core.results import ProfileResult
from hyperloom_assets.core.roofline.model_shape import load_shape
from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.bench.client import BenchmarkClient
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from hyperloom_assets.resources.profiling import run_profile
from tests.assets.test_optimize_sim import CAPPED, materialization, write_target
from tests.conftest import SIM_MODEL

PROFILED = dg.AssetSelection.assets("baseline", "roofline", "profile")


@pytest.fixture
def instance():
    with dg.instance_for_test() as instance:
        yield instance


def materialize_profile(tmp_path: Path, host, store, instance, server_args=CAPPED, **extra) -> ProfileResult:
    write_target(tmp_path / "targets", "sim", server_args, repeats=1, **extra)
    defs = build_defs(tmp_path / "targets", host=host, store=store)
    job = dg.define_asset_job("profiled", selection=PROFILED, executor_def=dg.in_process_executor)
    defs = dg.Definitions.merge(defs, dg.Definitions(jobs=[job]))
    result = defs.resolve_job_def("profiled").execute_in_process(partition_key="sim", instance=instance)
    assert result.success, "a profile never fails the run"
    return result.asset_value("profile")


def test_the_sim_profile_is_its_models_breakdown_as_a_table_and_a_trace(tmp_path, host, store, instance) -> None:
    profile = materialize_profile(tmp_path, host, store, instance)
    assert profile.taken, profile.reason
    shares = profile.summary.shares_pct
    assert set(shares) == set(CATEGORIES)
    assert sum(shares.values()) == pytest.approx(100.0, abs=1.0), "the window is accounted for"
    # --enforce-eager: kernel launches are eager, and the capped batch keeps decode memory-bound on weights.
    assert shares["overhead"] > 5 and shares["gemm"] > shares["attention"] > 0 and shares["sampling"] > 0
    assert shares["communication"] == 0.0, "one GPU: no all-reduce"
    trace = Path(profile.trace_path)
    assert trace.is_file() and trace.parent.name == "trace" and trace.stat().st_size > 0
    assert "--profile-dir" in profile.argv, "launched with the sim's profiler flag"

    metadata = materialization(instance, "profile", "sim")
    assert metadata["taken"] is True and metadata["gemm_pct"] == round(shares["gemm"], 2)
    ops = metadata["top_ops"]
    assert [c.name for c in ops.schema.columns] == ["rank", "op", "category", "calls", "self_ms", "share_pct"]
    assert ops.records[0].data["op"].startswith("sim::") and ops.records[0].data["rank"] == 1
    assert {r.data["category"] for r in metadata["shares"].records} == set(CATEGORIES)
    assert Path(metadata["trace"]) == trace


def busy_share(profile: ProfileResult, category: str) -> float:
    shares = profile.summary.shares_pct
    return 100.0 * shares[category] / (100.0 - shares["idle"])


def test_cuda_graphs_move_time_out_of_overhead(tmp_path, host, store, instance) -> None:
    """The breakdown follows the config: without --enforce-eager the sim's graphs remove launch time."""
    eager = materialize_profile(tmp_path / "eager", host, store, instance)
    graphs = materialize_profile(tmp_path / "graphs", host, store, instance, [a for a in CAPPED if a != "--enforce-eager"])
    assert busy_share(graphs, "overhead") < busy_share(eager, "overhead") / 2


def test_every_job_that_plans_candidates_profiles_first(tmp_path, host, store) -> None:
    write_target(tmp_path / "targets", "sim", CAPPED)
    defs = build_defs(tmp_path / "targets", host=host, store=store)
    graph = defs.resolve_asset_graph()
    candidates, profile = dg.AssetKey("candidates"), dg.AssetKey("profile")
    assert profile in graph.get(candidates).parent_keys and dg.AssetKey("roofline") in graph.get(profile).parent_keys
    planning = [job for job in defs.resolve_all_job_defs()
                if candidates in job.asset_layer.selected_asset_keys]
    assert planning, "some job plans candidates"
    for job in planning:
        assert profile in job.asset_layer.selected_asset_keys, f"{job.name} plans candidates without a profile"


def test_a_profile_that_cannot_be_taken_is_a_reason_not_a_failure(tmp_path, host) -> None:
    """The sim cannot write its trace (a file where its folder should be): stop answers 500, the
    result says so, and the server is torn down like any other."""
    run_dir = tmp_path / "profile"
    run_dir.mkdir()
    (run_dir / "trace").write_text("not a folder")
    contract = WorkloadContract(workload=Workload(kind="random", isl=128, osl=16, concurrency=4),
                                vocab_size=load_shape(SIM_MODEL).vocab, max_model_len=4096, num_prompts=8,
                                warmups=0, repeats=1)
    spec = ServerSpec(engine="sim", model=SIM_MODEL, server_args=CAPPED)
    result = run_profile(host=host, bench=BenchmarkClient(), spec=spec, contract=contract, run_dir=run_dir)
    assert not result.taken and result.summary is None
    assert "/stop_profile answered 500" in result.reason
    assert read_pidfiles(Path(host.state_path()) / "pids") == [], "the profiled server is torn down"


def launch_steps(host) -> list[str]:
    """Each launch's step folder, from the teardown record every launch leaves."""
    return sorted(p.parent.name for p in (Path(host.state_path()) / "runs").rglob("teardown.json"))


def test_the_profile_rides_on_the_baseline_server(tmp_path, host, store, instance) -> None:
    profile = materialize_profile(tmp_path, host, store, instance)
    assert profile.taken, profile.reason
    assert launch_steps(host) == ["baseline"], "one launch: the profile costs none of its own"
    baseline = materialization(instance, "baseline", "sim")
    assert profile.argv and shlex.join(profile.argv) == baseline["argv"]
    assert Path(profile.trace_path).parent.parent.name == "baseline"
    assert (Path(profile.trace_path).parent.parent / "profile").is_dir(), "the profiled round's records apart"


def test_a_run_that_does_not_profile_leaves_the_profiler_off_and_a_later_profile_launches_its_own(
        tmp_path, host, store, instance) -> None:
    write_target(tmp_path / "targets", "sim", CAPPED, repeats=1)
    defs = build_defs(tmp_path / "targets", host=host, store=store)
    assert defs.resolve_job_def("baseline_job").execute_in_process(partition_key="sim", instance=instance).success
    assert "--profile-dir" not in materialization(instance, "baseline", "sim")["argv"]
    only = dg.define_asset_job("profile_only", selection=["profile"], executor_def=dg.in_process_executor)
    defs = dg.Definitions.merge(defs, dg.Definitions(jobs=[only]))
    result = defs.resolve_job_def("profile_only").execute_in_process(partition_key="sim", instance=instance)
    assert result.asset_value("profile").taken
    assert launch_steps(host) == ["baseline", "profile"]


def test_an_engine_that_refuses_the_profilers_flags_is_measured_again_without_them(
        tmp_path, host, store, instance, monkeypatch) -> None:
    """A release without the profiler's flag: the baseline is still measured, and says why there is no profile."""
    from hyperloom_assets.core.engines import registry
    from hyperloom_assets.core.engines.spec import Profiler

    engines = dict(registry.known_engines())
    unknown = Profiler(server_args=lambda folder: ["--profiler-of-another-release", folder], free_when_idle=True)
    engines["sim"] = engines["sim"].model_copy(update={"profiler": unknown})
    monkeypatch.setattr(registry, "known_engines", lambda: engines)
    profile = materialize_profile(tmp_path, host, store, instance)
    assert not profile.taken and "refused the profiler's flags" in profile.reason
    assert "--profiler-of-another-release" in profile.reason
    baseline = materialization(instance, "baseline", "sim")
    assert baseline["output_throughput"] > 0 and "--profiler-of-another-release" not in baseline["argv"]
    assert launch_steps(host) == ["baseline", "baseline-unprofiled"]
    attempts = store.baseline_attempts("sim")
    assert [row["outcome"] for row in attempts] == ["ok"], "the refusal is not a failed attempt of the config"


def test_an_engine_whose_idle_profiler_is_not_shown_free_is_profiled_on_a_launch_of_its_own(
        tmp_path, host, store, instance, monkeypatch) -> None:
    """The anchor is never measured beside a profiler nobody has shown to be free (vLLM, SGLang, ATOM)."""
    from hyperloom_assets.core.engines import registry

    engines = dict(registry.known_engines())
    unshown = engines["sim"].profiler.model_copy(update={"free_when_idle": False})
    engines["sim"] = engines["sim"].model_copy(update={"profiler": unshown})
    monkeypatch.setattr(registry, "known_engines", lambda: engines)
    profile = materialize_profile(tmp_path, host, store, instance)
    assert profile.taken, profile.reason
    assert launch_steps(host) == ["baseline", "profile"]
    assert "--profile-dir" not in materialization(instance, "baseline", "sim")["argv"]


def test_a_target_with_profile_false_takes_no_profile_and_no_launch_for_it(
        tmp_path, host, store, instance, monkeypatch) -> None:
    """Neither on the baseline's server nor on a launch of its own, whether or not the idle profiler is free."""
    from hyperloom_assets.core.engines import registry

    free = materialize_profile(tmp_path / "free", host, store, instance, profile=False)
    assert not free.taken and free.reason == PROFILE_OFF
    assert "--profile-dir" not in materialization(instance, "baseline", "sim")["argv"]
    assert materialization(instance, "profile", "sim")["reason"] == PROFILE_OFF
    engines = dict(registry.known_engines())
    unshown = engines["sim"].profiler.model_copy(update={"free_when_idle": False})
    engines["sim"] = engines["sim"].model_copy(update={"profiler": unshown})
    monkeypatch.setattr(registry, "known_engines", lambda: engines)
    assert not materialize_profile(tmp_path / "unshown", host, store, instance, profile=False).taken
    assert launch_steps(host) == ["baseline", "baseline"], "one launch per run: the baseline's"
