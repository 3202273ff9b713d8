"""Inputs the baseline cannot run, found before any launch: a workload that cannot be served
(a bad trace, a prompt longer than the context) and a framework_tree the engine does not
import from. Each stops the run with `baseline_failed` and a detail that names the input."""

from __future__ import annotations

import subprocess
from pathlib import Path

import dagster as dg
import pytest
import yaml

from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.hosts.process_group import read_pidfiles
from tests.conftest import SIM_MODEL

FAST = ["--gpu", "H100", "--time-scale", "50"]


def write(folder: Path, **body) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sim.yaml").write_text(yaml.safe_dump({"engine": "sim", "model": str(SIM_MODEL), "repeats": 1,
                                                     "server_args": FAST, **body}))
    return folder


def failed_baseline(folder: Path, host, store) -> str:
    defs = build_defs(folder, host=host, store=store)
    with dg.instance_for_test() as instance:
        done = defs.resolve_job_def("baseline_job").execute_in_process(partition_key="sim", instance=instance,
                                                                       raise_on_error=False)
    assert not done.success
    assert store.measurements("sim") == [] and store.baseline_attempts("sim") == [], "no launch, no attempt"
    assert read_pidfiles(Path(host.state_path()) / "pids") == []
    return str(next(e for e in done.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error)


@pytest.mark.stop_reason("baseline_failed", case="workload")
def test_a_trace_that_is_not_json_and_a_prompt_longer_than_the_context_fail_before_a_launch(tmp_path, host,
                                                                                             store) -> None:
    trace = tmp_path / "broken.jsonl"
    trace.write_text("{not json\n")
    bad_trace = failed_baseline(write(tmp_path / "a", workload={"kind": "agentic", "trace": str(trace),
                                                                "concurrency": 2}), host, store)
    assert "baseline_failed: bad trace: " in bad_trace and f"{trace}: line 1: not JSON" in bad_trace, bad_trace

    too_long = failed_baseline(write(tmp_path / "b", server_args=FAST + ["--max-model-len", "64"],
                                     workload={"kind": "random", "isl": 128, "osl": 16, "concurrency": 2}),
                               host, store)
    assert "a request needs 144 tokens of context, more than the server's max model length 64" in too_long, too_long
    stops = store.stops("sim")
    assert [row["stop_reason"] for row in stops] == ["baseline_failed", "baseline_failed"]
    # The detail is the failure without its reason, so "stop reason: baseline_failed: " names it once.
    assert stops[0]["detail"].startswith("bad trace: ") and stops[1]["detail"].startswith("workload: a request"), stops


@pytest.mark.stop_reason("baseline_failed", case="framework_tree")
def test_a_framework_tree_the_engine_does_not_import_from_fails_before_a_launch(tmp_path, host, store) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "README").write_text("a checkout without the engine's package in it\n")
    for argv in (["init", "-q"], ["add", "README"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "empty tree"]):
        subprocess.run(["git", *argv], cwd=tree, check=True)
    text = failed_baseline(write(tmp_path / "targets", framework_tree=str(tree),
                                 workload={"kind": "random", "isl": 64, "osl": 16, "concurrency": 2}), host, store)
    # The run serves a worktree of the operator's tree, under the host's state.
    assert "baseline_failed: preflight: framework_tree " in text and "trees/sim" in text, text
    assert "the server imported 'hyperloom_assets' from " in text and "not from the tree" in text, text
