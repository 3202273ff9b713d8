"""A bad file fails its own target: undecodable, oversized, alias-bombed or badly named files
are problems naming the file, the other targets load, and no problem's text grows past its cap."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from hyperloom_assets.core.config.files import (MAX_ALIAS_NODES, MAX_CONFIG_BYTES, MAX_PROBLEM_CHARS,
                                                MAX_PROBLEMS_PER_ENTRY, ConfigFileError, load_config_yaml)
from hyperloom_assets.core.config.problems import TargetError, TargetProblem
from hyperloom_assets.core.config.targets import load_target, load_targets
from hyperloom_assets.definitions import build_defs
from tests.unit.test_targets import GOOD, repo  # noqa: F401 - the fixture: targets/good.yaml and its model


def alias_bomb(levels: int) -> str:
    """Each level a list of nine aliases of the level below: 9**levels strings from a few hundred bytes."""
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\nserver_args: *a{levels - 1}\n"


BAD_FILES = {  # file name: (content, what its problem says)
    "latin1.yaml": (GOOD.encode() + b"env: {A: \"caf\xe9\"}\n", "UTF-8 text, but byte 0xe9"),
    "...yaml": (GOOD.encode(), "a file name of letters, digits"),  # its stem is `..`
    "..yaml": (GOOD.encode(), "a file name of letters, digits"),  # its stem is `.`
    "-x.yaml": (GOOD.encode(), "a file name of letters, digits"),
    "bomb.yaml": ((GOOD + alias_bomb(6)).encode(), "an alias bomb"),
    "cycle.yaml": (b"a: &a [*a]\n", "inside its own anchor"),
    "deep.yaml": (b"[" * 5000 + b"]" * 5000, "nested at most"),
    "huge.yaml": (GOOD.encode() + b"#" * MAX_CONFIG_BYTES, "at most 1048576 bytes"),
}


def write_bad_files(folder: Path) -> None:
    for name, (content, _) in BAD_FILES.items():
        (folder / name).write_bytes(content)


def test_definitions_load_with_every_bad_file_a_problem_and_the_good_target_a_partition(repo, host, store,
                                                                                        caplog) -> None:
    write_bad_files(repo / "targets")
    # A hosts file that cannot be read fails only the targets that name one of its hosts.
    (repo / "hosts.yaml").write_bytes(b"gpu-a: {kind: ssh, address: \xff}\n")
    (repo / "targets" / "on-gpu.yaml").write_text(GOOD + "host: gpu-a\n")
    with caplog.at_level(logging.WARNING, logger="hyperloom_assets.assets.partitions"):
        defs = build_defs(repo / "targets", host=host, store=store)
    job = defs.resolve_job_def("optimize_job")
    assert job.partitions_def.get_partition_keys() == ["good"]
    skipped = [record.getMessage() for record in caplog.records]
    for name, (_, expected) in BAD_FILES.items():
        said = [line for line in skipped if f"{repo / 'targets' / name}: " in line]
        assert len(said) == 1 and expected in said[0], (name, skipped)
    on_gpu = [line for line in skipped if "on-gpu.yaml: host: " in line]
    assert on_gpu and f"the hosts file {repo / 'hosts.yaml'}" in on_gpu[0] and "UTF-8" in on_gpu[0], skipped
    assert max(len(line) for line in skipped) <= MAX_PROBLEM_CHARS + 400  # the file's path and the field


def test_a_bad_file_is_a_target_error_when_named_and_no_name_reaches_outside_the_folder(repo) -> None:
    (repo / "latin1.yaml").write_bytes(BAD_FILES["latin1.yaml"][0])
    (repo / "outside.yaml").write_text(GOOD)
    for name in ("..", ".", "../outside", "a/b", "-x", "good\n"):
        with pytest.raises(TargetError, match="target name of letters"):
            load_target(repo / "targets", name)
    (repo / "targets" / "latin1.yaml").write_bytes(BAD_FILES["latin1.yaml"][0])
    with pytest.raises(TargetError, match="latin1.yaml: \\(file\\): UTF-8 text"):
        load_target(repo / "targets", "latin1")


def test_an_alias_bomb_is_refused_before_it_expands_and_its_error_stays_short(repo) -> None:
    (repo / "targets" / "bomb.yaml").write_text(GOOD + alias_bomb(9))  # 9**9 strings if expanded
    good, problems = load_targets(repo / "targets")
    assert set(good) == {"good"}
    assert [p.field for p in problems] == ["(file)"] and f"at most {MAX_ALIAS_NODES} nodes" in problems[0].expected
    assert len(str(problems[0])) < 500


def test_aliases_within_the_budget_and_merge_keys_still_load(tmp_path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text("common: &ssh {kind: ssh, python: /opt/py, workdir: /w}\n"
                    "gpu-a: {<<: *ssh, address: 10.0.0.1}\ngpu-b: {<<: *ssh, address: 10.0.0.2}\n")
    assert load_config_yaml(path)["gpu-b"] == {"kind": "ssh", "python": "/opt/py", "workdir": "/w",
                                               "address": "10.0.0.2"}


def test_problem_text_and_problem_count_are_capped(repo) -> None:
    long = "x" * 100_000
    assert len(TargetProblem(file="f", field=long, expected=long).expected) == MAX_PROBLEM_CHARS
    (repo / "targets" / "long.yaml").write_text(GOOD.replace('["--max-num-seqs", "4"]', f'"{long}"'))  # quoted back
    (repo / "targets" / "long-path.yaml").write_text(GOOD.replace("models/m", long))  # too long to look up
    (repo / "targets" / "many.yaml").write_text(GOOD + "".join(f"unknown{i}: 1\n" for i in range(5_000)))
    good, problems = load_targets(repo / "targets")
    assert set(good) == {"good"}
    assert all(len(p.expected) <= MAX_PROBLEM_CHARS for p in problems)
    assert {p.file.rsplit("/", 1)[1] for p in problems} == {"long.yaml", "long-path.yaml", "many.yaml"}
    many = [p for p in problems if p.file.endswith("many.yaml")]
    assert len(many) == MAX_PROBLEMS_PER_ENTRY and "4981 more not shown" in many[-1].expected


def test_a_snapshot_text_is_held_to_the_same_limits(tmp_path) -> None:
    with pytest.raises(ConfigFileError, match="at most 1048576 bytes"):
        load_config_yaml(tmp_path / "t.yaml", text="#" * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(ConfigFileError, match="alias bomb"):
        load_config_yaml(tmp_path / "t.yaml", text=alias_bomb(6))
    assert yaml.safe_load(alias_bomb(2)) == load_config_yaml(tmp_path / "t.yaml", text=alias_bomb(2))
