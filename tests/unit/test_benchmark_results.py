"""benchmarks/support/results.py: a result names the code, command and machine load that made it."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from benchmarks.support import results, staleness


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


def _commit(repo, name: str, text: str) -> str:
    (repo / name).parent.mkdir(parents=True, exist_ok=True)
    (repo / name).write_text(text)
    _git(repo, "add", name)
    _git(repo, "commit", "-qm", f"change {name}")
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def _verdict(repo, commit: str | None, exercises=("code.py", "lib/")):
    return staleness.staleness(commit, exercises, staleness.tree_changes(repo, commit) if commit else None)


def test_a_result_is_stale_once_a_path_it_exercises_changes_and_fresh_while_only_others_do(repo) -> None:
    measured = _commit(repo, "lib/sim.py", "speed = 1\n")
    _commit(repo, "other.py", "unrelated = 1\n")
    fresh = _verdict(repo, measured)
    assert not fresh.stale and fresh.changed == {} and "fresh: no exercised path changed" in staleness.describe(
        fresh, ["/x/.venv/bin/python", "benchmarks/b.py"])
    _commit(repo, "lib/sim.py", "speed = 2\n")
    _commit(repo, "code.py", "x = 3\n")
    stale = _verdict(repo, measured)
    assert stale.stale and stale.commits == 2 and stale.changed == {"code.py": 1, "lib/": 1}
    line = staleness.describe(stale, ["/x/.venv/bin/python", "benchmarks/b.py", "--seeds", "3", "--allow-dirty"])
    assert line == (f"**stale**: 2 commits changed `code.py` (1 file), `lib/` (1 file) since `{measured}`; "
                    "re-run `.venv/bin/python benchmarks/b.py --seeds 3`")


def test_a_pending_change_reads_the_same_before_and_after_its_commit(repo) -> None:
    """The page is rendered before the commit that changes the code; it must still match after it."""
    measured = _commit(repo, "lib/sim.py", "speed = 1\n")
    (repo / "lib" / "sim.py").write_text("speed = 2\n")
    (repo / "lib" / "new.py").write_text("added = 1\n")  # untracked, under an exercised folder
    before = _verdict(repo, measured)
    _git(repo, "add", "lib")
    _git(repo, "commit", "-qm", "change lib")
    after = _verdict(repo, measured)
    assert before == after and after.stale and after.commits == 1 and after.changed == {"lib/": 2}


def test_a_change_undone_leaves_the_result_fresh(repo) -> None:
    measured = _commit(repo, "lib/sim.py", "speed = 1\n")
    _commit(repo, "lib/sim.py", "speed = 2\n")
    _commit(repo, "lib/sim.py", "speed = 1\n")
    assert not _verdict(repo, measured).stale


def test_an_unknown_commit_is_stale_commit_unknown_and_a_shallow_clone_does_not_crash(repo, tmp_path_factory) -> None:
    measured = _commit(repo, "lib/sim.py", "speed = 1\n")
    _commit(repo, "code.py", "x = 2\n")
    shallow = tmp_path_factory.mktemp("shallow") / "clone"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)], check=True,
                   capture_output=True)
    assert not staleness.full_history(shallow) and staleness.full_history(repo)
    assert staleness.tree_changes(shallow, measured) is None
    for verdict in (_verdict(shallow, measured), _verdict(repo, "deadbee"), _verdict(repo, None)):
        assert verdict.stale and not verdict.commit_known
        assert staleness.describe(verdict, None).startswith("**stale**: commit unknown")


def test_a_result_without_recorded_paths_takes_them_from_its_scripts_declaration(tmp_path) -> None:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "noise.py").write_text('import sys\n\nEXERCISES = ("hyperloom_assets/sim/",)\n')
    (tmp_path / "benchmarks" / "bare.py").write_text("x = 1\n")
    by_command = {"benchmark": "pinning", "command": ["/py", "/elsewhere/benchmarks/noise.py", "--x"]}
    by_name = {"benchmark": "noise_pinning"}
    recorded = {**by_command, "exercises": ["hyperloom_assets/core/"]}
    assert staleness.exercises_of(by_command, tmp_path) == staleness.exercises_of(by_name, tmp_path) == (
        "hyperloom_assets/sim/",)
    assert staleness.exercises_of(recorded, tmp_path) == ("hyperloom_assets/core/",)
    assert staleness.exercises_of({"benchmark": "bare"}, tmp_path) is None
    (tmp_path / "benchmarks" / "gate.py").write_text('EXERCISES = {"gate_vllm": ("a/",), "*": ("a/", "sim/")}\n')
    assert staleness.exercises_of({"benchmark": "gate_vllm"}, tmp_path) == ("a/",)
    assert staleness.exercises_of({"benchmark": "gate_sim"}, tmp_path) == ("a/", "sim/")
    undeclared = staleness.staleness("abc1234", None, None)
    assert undeclared.stale and "declares no `EXERCISES`" in staleness.describe(undeclared, None)
    (tmp_path / "benchmarks" / "bad.py").write_text('EXERCISES = "hyperloom_assets/"\n')
    with pytest.raises(ValueError, match=r"bad\.py: EXERCISES must be a non-empty tuple"):
        staleness.declared_exercises(tmp_path / "benchmarks" / "bad.py")


def test_a_result_records_the_paths_its_script_declares(repo, tmp_path_factory) -> None:
    script = repo / "bench.py"
    script.write_text('EXERCISES = {"probe_sim": ("code.py", "lib/"), "*": ("code.py",)}\n')
    _git(repo, "add", "bench.py")
    _git(repo, "commit", "-qm", "bench")
    _, run = results.start_run(argparse.ArgumentParser(), [], root=repo, script=script)
    out = tmp_path_factory.mktemp("o")
    assert json.loads(results.write_results("probe_sim", {}, run, results_dir=out).read_text())["exercises"] == [
        "code.py", "lib/"]
    assert json.loads(results.write_results("probe_cpu", {}, run, results_dir=out).read_text())["exercises"] == [
        "code.py"]


def test_every_benchmark_script_declares_the_paths_it_exercises() -> None:
    """Each path exists, and none holds what the page renderer writes (or rendering would make itself stale)."""
    root = results.ROOT
    generated = ("docs/", "README.md", "benchmarks/results/")
    for script in (p for p in (root / "benchmarks").glob("*.py") if "write_results" in p.read_text()):
        declaration = staleness.read_declaration(script)
        assert declaration and "*" in declaration, f"{script.name} declares no EXERCISES for its results"
        declared = {p for paths in declaration.values() for p in paths}
        missing = [p for p in declared if not (root / p).exists()]
        assert not missing, f"{script.name}: EXERCISES names paths that do not exist: {missing}"
        feeding = [p for p in declared for g in generated if staleness.covers(p, g.rstrip("/"))
                   or staleness.covers(g, p)]
        assert not feeding, f"{script.name}: EXERCISES covers generated files: {feeding}"


def test_every_committed_result_knows_the_paths_it_exercises() -> None:
    for path in sorted((results.ROOT / "benchmarks" / "results").glob("*.json")):
        assert staleness.exercises_of(json.loads(path.read_text()), results.ROOT), (
            f"{path.name}: neither it nor its script declares the paths it exercises")
