"""A target's search_space: what the file may say, how the planner searches it, and the
engine's own parser refusing a typo in `hyperloom targets check`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hyperloom_assets.cli.targets import parser_problems
from hyperloom_assets.core.config.search_space import SearchSpace
from hyperloom_assets.core.config.targets import Workload, load_targets
from hyperloom_assets.core.planning.planner import PlanEvidence, plan
from hyperloom_assets.core.planning.search_space import with_search_space
from hyperloom_assets.core.planning.seed_grids import load_grids
from hyperloom_assets.resources.hosts.local import LocalHost
from tests.conftest import SIM_MODEL
from tests.unit.test_targets import GOOD, problems_for, repo  # noqa: F401 (repo is a fixture)

BAD = "bad.yaml"


@pytest.mark.parametrize("space, field, expected", [
    ('{args: {max-num-seqs: [8]}}', "search_space.args", "is not a flag"),
    ('{args: {--max-num-seqs: []}}', "search_space.args", "at least one value"),
    ('{args: {--max-num-seqs: [8, "8"]}}', "search_space.args", "listed twice"),
    ('{args: {--max-num-seqs: [8], --max_num_seqs: [16]}}', "search_space.args", "given twice"),
    ('{args: {--enable-prefix-caching: [false]}}', "search_space.args", "false is not a value"),
    ('{args: {--enable-prefix-caching: [true, x]}}', "search_space.args", "not both"),
    ('{env: {"A-B": ["1"]}}', "search_space.env", "not an environment variable name"),
    ('{env: {"VLLM_\u00e9": ["1"]}}', "search_space.env", "not an environment variable name"),  # Python's isidentifier, not POSIX
    ('{env: {A: ["1", "x\\0y"]}}', "search_space.env", "env A: its value holds a NUL byte"),
    ('{only: true}', "search_space", "at least one knob"),
    ('{args: {--max-num-seqs: [8]}, colour: blue}', "search_space.colour", "unknown field"),
    ('{args: {--port: ["9000"]}}', "search_space.args.--port", "not one the harness sets"),
    # What the served model is named and tokenized by is the harness's too: a model may propose any space knob.
    ('{args: {--served-model-name: [other]}}', "search_space.args.--served-model-name", "not one the harness sets"),
    ('{args: {--tokenizer: [/tmp/t]}}', "search_space.args.--tokenizer", "not one the harness sets"),
])
def test_a_bad_search_space_names_its_field(repo: Path, space: str, field: str, expected: str) -> None:  # noqa: F811
    problems = problems_for(repo, GOOD + f"search_space: {space}\n")
    matching = [p for p in problems if p.startswith(f"{repo / 'targets' / BAD}: {field}")]
    assert matching and expected in matching[0], problems


WORKLOAD = Workload(kind="random", isl=64, osl=32, concurrency=8, num_prompts=64)
EVIDENCE = PlanEvidence(binding="memory", achieved_pct=None, telemetry=None, sequence_cap=1, prefix_share=0,
                        host="cpu", moe=False, fp8_model=False, has_mtp=False)
ARGS = ["--max-num-seqs", "1", "--enforce-eager", "--max-model-len", "512"]
ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def planned(space: SearchSpace) -> list:
    grids = dict(load_grids())
    grids["vllm"] = with_search_space(grids["vllm"], space)
    return plan("vllm", None, ARGS, ENV, WORKLOAD, EVIDENCE, set(), grids=grids)


def test_only_searches_the_space_alone_with_the_grids_rules_for_a_known_knob() -> None:
    space = SearchSpace(args={"--max-num-seqs": [8], "--async-scheduling": [True]},
                        env={"VLLM_CPU_KVCACHE_SPACE": [2]}, only=True)
    variants = planned(space)
    singles = {v.name: v for v in variants if v.provenance != "combined"}
    assert set(singles) == {"--max-num-seqs=8", "--async-scheduling", "VLLM_CPU_KVCACHE_SPACE=2"}, list(singles)
    assert all(v.provenance == "search_space" and v.trial_provenance() == "search_space" for v in singles.values())
    # A knob the grid knows is scored by its rules; one it does not is still tried.
    assert singles["--max-num-seqs=8"].rule == "cap_raise_to_concurrency"
    assert singles["VLLM_CPU_KVCACHE_SPACE=2"].rule.startswith("kv_capacity")
    assert singles["--async-scheduling"].rule == "search_space"
    assert singles["VLLM_CPU_KVCACHE_SPACE=2"].set_env == {"VLLM_CPU_KVCACHE_SPACE": "2"}
    assert not any(v.name.startswith(("drop ", "unset ")) or "drop " in v.name for v in variants), \
        "no ablation of the operator's flags under only: true"


def test_without_only_the_space_joins_the_seed_grid_and_the_ablations() -> None:
    variants = planned(SearchSpace(args={"--async-scheduling": [True]}))
    provenances = {v.provenance for v in variants}
    assert {"search_space", "seed_grid", "ablation"} <= provenances, provenances
    assert any(v.name == "--async-scheduling" for v in variants)


def test_a_single_value_space_plans_that_one_variant() -> None:
    variants = planned(SearchSpace(args={"--max-num-seqs": [8]}, only=True))
    assert [(v.name, v.add_args) for v in variants] == [("--max-num-seqs=8", ["--max-num-seqs", "8"])]


def test_targets_check_puts_the_space_to_vllms_own_parser(repo: Path) -> None:  # noqa: F811
    # --max-num-seq is an abbreviation argparse would take: spelled out or refused.
    (repo / "targets" / BAD).write_text(GOOD + 'search_space: {args: {"--max-num-seqz": [8], "--max-num-seq": [8], '
                                               '"--kv-cache-dtype": [auto, fp9], "--max-num-seqs": [8]}}\n')
    (repo / "targets" / "spaced.yaml").write_text(GOOD + 'search_space: {args: {"--max-num-seqs": [8, 16], '
                                                         '"--async-scheduling": [true]}, only: true}\n')
    done = subprocess.run([sys.executable, "-m", "hyperloom_assets.cli", "targets", "check", str(repo / "targets"),
                           "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert found["targets"] == ["good", "spaced"], "a space the parser takes is fine"
    problems = {p["field"]: p["expected"] for p in found["problems"]}
    assert set(problems) == {"search_space.args.--max-num-seqz", "search_space.args.--max-num-seq",
                             "search_space.args.--kv-cache-dtype"}, problems
    assert "no --max-num-seqz (did you mean --max-num-seqs?)" in problems["search_space.args.--max-num-seqz"]
    assert "no --max-num-seq (did you mean --max-num-seqs?)" in problems["search_space.args.--max-num-seq"]
    assert "--kv-cache-dtype fp9 is refused" in problems["search_space.args.--kv-cache-dtype"]
    assert {p["file"] for p in found["problems"]} == {str(repo / "targets" / BAD)}


def test_a_folders_spaces_are_put_to_each_hosts_parser_once(tmp_path, monkeypatch) -> None:
    # Each probe imports the engine in the serving interpreter: seconds per target, were it one each.
    folder = tmp_path / "targets"
    folder.mkdir()
    for name, flag in (("a", "--max-num-seqs"), ("b", "--max-num-seqz"), ("c", "--max-num-batched-tokens")):
        (folder / f"{name}.yaml").write_text(yaml.safe_dump({
            "engine": "sim", "model": str(SIM_MODEL), "server_args": ["--gpu", "H100"],
            "workload": {"kind": "random", "isl": 64, "osl": 8, "concurrency": 4},
            "search_space": {"args": {flag: [64]}, "only": True}}))
    good, _ = load_targets(folder)
    asked: list[dict] = []
    probe = LocalHost.proposal_checks
    monkeypatch.setattr(LocalHost, "proposal_checks", lambda self, request: asked.append(request) or probe(self, request))
    problems = parser_problems(folder, good)
    assert len(asked) == 1 and len(asked[0]["probe"]["argvs"]) == 3, asked
    assert [(p.file, p.field) for p in problems] == [(str(folder / "b.yaml"), "search_space.args.--max-num-seqz")], \
        "each target gets its own argvs' verdicts back"
