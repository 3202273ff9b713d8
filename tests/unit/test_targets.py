"""Target files: every problem names the file, the field and what was expected."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hyperloom_assets.core.config.problems import TargetError
from hyperloom_assets.core.config.targets import load_target, load_targets

GOOD = """\
engine: vllm
model: models/m
server_args: ["--max-num-seqs", "4"]
workload: {kind: random, isl: 16, osl: 8, concurrency: 2}
"""

SIM = GOOD.replace("engine: vllm", "engine: sim").replace(
    '["--max-num-seqs", "4"]', '["--gpu", "H100", "--time-scale", "50", "--calibration", "auto", "--max-num-seqs", "4"]')


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"vocab_size": 100}))
    (tmp_path / "targets").mkdir()
    (tmp_path / "targets" / "good.yaml").write_text(GOOD)
    return tmp_path


def problems_for(repo: Path, text: str) -> list[str]:
    (repo / "targets" / "bad.yaml").write_text(text)
    good, problems = load_targets(repo / "targets")
    assert "good" in good, "a bad file must not hide the other targets"
    return [str(p) for p in problems]


@pytest.mark.parametrize("text, field, expected", [
    (GOOD + "colour: blue\n", "colour", "unknown field"),
    (GOOD.replace("engine: vllm", "engine: tgi"), "engine", "one of vllm, sglang, atom, sim"),
    (GOOD.replace("models/m", "models/nope"), "model", "does not exist"),
    (GOOD.replace("isl: 16", "isl: 0"), "workload.isl", "greater than 0"),
    (GOOD.replace("osl: 8", "osl: -1"), "workload.osl", "greater than 0"),
    (GOOD.replace("concurrency: 2", "concurrency: 0"), "workload.concurrency", "greater than 0"),
    (GOOD.replace("concurrency: 2", "concurrency: 2, num_prompts: 0"), "workload.num_prompts", "greater than 0"),
    (GOOD.replace('["--max-num-seqs", "4"]', '"--max-num-seqs 4"'), "server_args", "valid list"),
    (GOOD.replace('["--max-num-seqs", "4"]', '["--max-num-seqs", 4]'), "server_args.1", "valid string"),
    (GOOD + "max_trials: 0\n", "max_trials", "greater than 0"),
    (GOOD + "env: {A: 2}\n", "env", "must be a string"),
    (GOOD + 'env: {"VLLM_X=Y": "1"}\n', "env", "env name 'VLLM_X=Y' is not an environment variable name"),
    (GOOD + 'env: {A: "x\\0y"}\n', "env", "env A: its value holds a NUL byte"),
    ("engine: [vllm\n", "(file)", "YAML"),
    ("- a\n- b\n", "(file)", "mapping"),
    (GOOD.replace("kind: random, isl: 16, osl: 8", "kind: agentic"), "workload.trace", "JSONL"),
    (GOOD.replace("concurrency: 2", "concurrency: 2, slo: {ttft_ms: 100}"), "workload.slo", "the top-level slo"),
    (GOOD.replace("concurrency: 2", "concurrency: 2, latency_from: arrival"), "workload.latency_from",
     "the capacity search sets it for its own probes"),
    (GOOD + "slo: {percentile: 99}\n", "slo", "at least one of ttft_ms, tpot_ms, e2e_ms"),
    (GOOD + "slo: {ttft_ms: 100, percentile: 75}\n", "slo.percentile", "50, 90, 95, 99 or 'mean', got 75"),
    (GOOD + "slo: {ttft_ms: 0}\n", "slo.ttft_ms", "greater than 0"),
    # The sim's harness flags, refused before anything is launched.
    (SIM.replace("H100", "H900"), "server_args", "--gpu: unknown GPU 'H900'; known: H100"),
    (SIM.replace('"--time-scale", "50"', '"--time-scale", "0"'), "server_args", "--time-scale 0: expected a positive"),
    (SIM.replace('"auto"', '"nope"'), "server_args", "--calibration: calibration profile 'nope': no such file"),
    (SIM.replace('"auto"', '"mi300x-vllm"'), "server_args", "profile mi300x-vllm is for MI300X, not --gpu H100"),
])
def test_each_problem_names_file_and_field(repo: Path, text: str, field: str, expected: str) -> None:
    problems = problems_for(repo, text)
    assert problems, "the bad file must be reported"
    matching = [p for p in problems if p.startswith(f"{repo / 'targets' / 'bad.yaml'}: {field}: ")]
    assert matching, problems
    assert expected in matching[0]


def test_model_folder_without_config_json(repo: Path) -> None:
    (repo / "models" / "empty").mkdir()
    problems = problems_for(repo, GOOD.replace("models/m", "models/empty"))
    assert any(": model: " in p and "config.json" in p for p in problems)


def test_paths_resolve_against_the_folders_parent(repo: Path) -> None:
    target = load_target(repo / "targets", "good")
    assert target.model == (repo / "models" / "m").resolve()


def test_load_target_raises_naming_the_file(repo: Path) -> None:
    (repo / "targets" / "bad.yaml").write_text(GOOD + "colour: blue\n")
    with pytest.raises(TargetError, match="bad.yaml: colour"):
        load_target(repo / "targets", "bad")


def test_sweep_ladder_defaults_to_powers_of_two_up_to_4x(repo: Path) -> None:
    target = load_target(repo / "targets", "good")
    assert target.sweep_ladder() == [1, 2, 4, 8]


def test_targets_check_cli_exits_non_zero_on_a_bad_file(repo: Path) -> None:
    ok = subprocess.run([sys.executable, "-m", "hyperloom_assets.cli", "targets", "check", str(repo / "targets")],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (repo / "targets" / "bad.yaml").write_text(GOOD.replace("engine: vllm", "engine: tgi"))
    bad = subprocess.run([sys.executable, "-m", "hyperloom_assets.cli", "targets", "check", str(repo / "targets")],
                         capture_output=True, text=True)
    assert bad.returncode == 1
    assert f"{repo / 'targets' / 'bad.yaml'}: engine: one of vllm" in bad.stdout


def test_a_sim_target_naming_a_packaged_profile_for_its_gpu_loads(repo: Path) -> None:
    (repo / "targets" / "sim.yaml").write_text(SIM.replace('"auto"', '"H100"'))
    good, problems = load_targets(repo / "targets")
    assert problems == [] and "--calibration" in good["sim"].server_args
