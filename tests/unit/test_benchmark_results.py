"""benchmarks/support/results.py: a result names the code, command and machine load that made it."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from benchmarks.support import results


def _git(repo, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    """A committed git repo with one tracked file, clean."""
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@t")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "code.py").write_text("x = 1\n")
    _git(tmp_path, "add", "code.py")
    _git(tmp_path, "commit", "-qm", "code")
    return tmp_path


def _start(repo, *argv: str):
    return results.start_run(argparse.ArgumentParser(), list(argv), root=repo)


def test_a_clean_tree_runs_and_its_result_says_so(repo, tmp_path_factory) -> None:
    args, run = _start(repo)
    out = tmp_path_factory.mktemp("out")
    written = json.loads(results.write_results("probe", {"x": 1}, run, results_dir=out).read_text())
    assert args.allow_dirty is False and written["dirty"] is False and "dirty_files" not in written
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert written["commit"] == written["machine"]["git_commit"] == head
    assert written["command"] == [sys.executable, sys.argv[0]]
    machine = written["machine"]
    assert len(machine["load_average_1_5_15_at_start"]) == len(machine["load_average_1_5_15_at_end"]) == 3
    assert machine["cpu"] and machine["cores"] and machine["started_at"] <= machine["finished_at"]
    assert written["results"] == {"x": 1} and written["benchmark"] == "probe"


@pytest.mark.parametrize("change", ["edit a tracked file", "add an untracked file"])
def test_a_dirty_tree_is_refused_before_the_run_with_the_files_that_make_it_so(repo, change) -> None:
    if change == "edit a tracked file":
        (repo / "code.py").write_text("x = 2\n")
    else:
        (repo / "new_module.py").write_text("y = 1\n")
    with pytest.raises(results.DirtyTree) as refused:
        _start(repo)
    message = str(refused.value)
    assert "refusing to benchmark a dirty tree" in message and "--allow-dirty" in message
    assert ("code.py" if change == "edit a tracked file" else "new_module.py") in message


def test_allow_dirty_runs_and_records_dirty_true(repo, tmp_path_factory) -> None:
    (repo / "code.py").write_text("x = 2\n")
    _, run = _start(repo, "--allow-dirty")
    written = json.loads(results.write_results("probe", {}, run, results_dir=tmp_path_factory.mktemp("o")).read_text())
    assert written["dirty"] is True and written["dirty_files"] == [" M code.py"]
    assert written["command"][-1] == "--allow-dirty"


def test_results_written_by_an_earlier_benchmark_do_not_make_the_tree_dirty(repo) -> None:
    output = repo / "benchmarks" / "results"
    output.mkdir(parents=True)
    (output / "earlier.json").write_text("{}")
    _git(repo, "add", "benchmarks")
    _git(repo, "commit", "-qm", "results")
    (output / "earlier.json").write_text('{"rerun": 1}')  # a tracked result rewritten
    (output / "partial.json").write_text("{}")  # a new one
    _, run = _start(repo)
    assert run.dirty is False


def test_every_benchmark_script_starts_through_start_run() -> None:
    """A script that parsed its own arguments would skip the dirty check."""
    scripts = [p for p in (results.ROOT / "benchmarks").glob("*.py") if "write_results" in p.read_text()]
    assert scripts
    skipping = [p.name for p in scripts if "start_run(" not in p.read_text() or "parse_args(" in p.read_text()]
    assert not skipping, f"these benchmarks do not parse their arguments with start_run: {skipping}"
