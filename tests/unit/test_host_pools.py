"""A pool in the hosts file (`kind: pool`): members of the same file that declare their gpus, at least
two, no pool inside a pool, each once; every problem names the file, the field and what was expected,
and a target may name a good pool, its slot checks made over the members."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hyperloom_assets.core.config.hosts import PoolConfig, declared_devices, load_host_names, load_hosts
from hyperloom_assets.core.config.targets import load_targets
from tests.unit.test_hosts_file import repo, write_hosts  # noqa: F401 - the fixture

GPU_A = {"kind": "local", "gpus": [0, 1]}
GPU_B = {"kind": "local", "gpus": [0, 1, 2, 3]}
POOL = {"kind": "pool", "hosts": ["gpu-a", "gpu-b"]}


def test_a_good_pool_is_a_host_name_with_its_members_devices(repo) -> None:
    path = write_hosts(repo, {"gpu-a": GPU_A, "gpu-b": GPU_B, "gpu-pool": POOL})
    hosts, found = load_hosts(path)
    assert found == [] and hosts["gpu-pool"] == PoolConfig(kind="pool", hosts=["gpu-a", "gpu-b"])
    assert declared_devices(hosts) == {"gpu-a": [2], "gpu-b": [4], "gpu-pool": [2, 4]}
    names = load_host_names(path)[0]
    assert "gpu-pool" in names.names and dict(names.gpus)["gpu-pool"] == (2, 4)


@pytest.mark.parametrize("hosts, field, expected", [
    ({"gpu-pool": {"kind": "pool", "hosts": ["gpu-a"]}}, "gpu-pool.hosts", "at least 2 items"),
    ({"gpu-pool": {"kind": "pool", "hosts": ["gpu-a", "gpu-z"]}}, "gpu-pool.hosts.1",
     "a host of this file (cpu, gpu-a, gpu-b, local), got 'gpu-z'"),
    ({"gpu-pool": {"kind": "pool", "hosts": ["gpu-a", "gpu-a"]}}, "gpu-pool.hosts.1", "each host once, got 'gpu-a'"),
    ({"gpu-pool": {"kind": "pool", "hosts": ["gpu-a", "cpu"]}}, "gpu-pool.hosts.1",
     "a host that declares its gpus (a pool hands out slots), 'cpu' declares none"),
    ({"inner": POOL, "gpu-pool": {"kind": "pool", "hosts": ["gpu-a", "inner"]}}, "gpu-pool.hosts.1",
     "a host, not a pool: 'inner' is a pool (no pool inside a pool)"),
    ({"gpu-b": {**GPU_B, "gpus": [0, 0]}, "gpu-pool": POOL}, "gpu-pool.hosts.1",
     "a usable host, but 'gpu-b' is bad: gpu-b.gpus: "),
    ({"gpu-pool": {**POOL, "colour": "blue"}}, "gpu-pool.colour", "no such field (unknown field)"),
])
def test_each_pool_problem_names_the_file_field_and_what_was_expected(repo, hosts, field, expected) -> None:
    path = write_hosts(repo, {"gpu-a": GPU_A, "gpu-b": GPU_B, "cpu": {"kind": "local"}, **hosts})
    good, found = load_hosts(path)
    matching = [str(p) for p in found if p.field == field]
    assert matching and matching[0].startswith(f"{path}: {field}: ") and expected in matching[0], found
    assert "gpu-pool" not in good, "a bad pool is no host a target may name"


def target(repo: Path, host: str, **fields) -> None:
    (repo / "targets" / "t.yaml").write_text(yaml.safe_dump({
        "engine": "vllm", "model": "models/m", "host": host,
        "workload": {"kind": "random", "isl": 8, "osl": 8, "concurrency": 1}, **fields}))


def test_a_target_naming_a_bad_pool_says_what_is_wrong_with_it(repo) -> None:
    path = write_hosts(repo, {"gpu-a": GPU_A, "gpu-pool": {"kind": "pool", "hosts": ["gpu-a", "gpu-z"]}})
    target(repo, "gpu-pool")
    _, found = load_targets(repo / "targets", hosts=load_host_names(path)[0])
    assert [p.field for p in found] == ["host"]
    assert "'gpu-pool' in" in found[0].expected and "gpu-pool.hosts.1" in found[0].expected


@pytest.mark.parametrize("fields, problem", [
    ({"server_args": ["-tp", "4"], "parallel_trials": 1}, None),  # fits on gpu-b alone
    ({"server_args": ["-tp", "2"], "parallel_trials": 3}, None),  # 1 slot on gpu-a + 2 on gpu-b
    ({"server_args": ["-tp", "8"]},
     ("server_args", "at most 4 devices per launch (the largest member of pool 'gpu-pool' declares 4")),
    ({"server_args": ["-tp", "2"], "parallel_trials": 4},
     ("parallel_trials", "at most 3 slots of 2 device(s) on pool 'gpu-pool' (2 + 4 declared by its members")),
])
def test_a_launch_fits_on_one_member_and_the_slots_are_every_members(repo, fields, problem) -> None:
    path = write_hosts(repo, {"gpu-a": GPU_A, "gpu-b": GPU_B, "gpu-pool": POOL})
    target(repo, "gpu-pool", **fields)
    good, found = load_targets(repo / "targets", hosts=load_host_names(path)[0])
    if problem is None:
        assert found == [] and good["t"].host == "gpu-pool"
    else:
        assert [p.field for p in found] == [problem[0]] and problem[1] in found[0].expected, found
