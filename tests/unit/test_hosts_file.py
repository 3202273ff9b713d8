"""The hosts file and a target's host: every problem names the file, the field and what was expected."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hyperloom_assets.core.config.files import MAX_CONFIG_BYTES
from hyperloom_assets.core.config.hosts import load_host_names, load_hosts
from hyperloom_assets.core.config.targets import load_targets
from hyperloom_assets.resources.hosts.ssh import SshTransport

SSH = {"kind": "ssh", "address": "10.1.2.3", "user": "bench", "identity_file": "keys/id", "known_hosts": "keys/kh",
       "python": "/opt/venv/bin/python", "workdir": "/var/tmp/hyperloom"}


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id").write_text("key")
    (tmp_path / "keys" / "kh").write_text("[10.1.2.3]:22 ssh-ed25519 AAAA")
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"vocab_size": 100}))
    (tmp_path / "targets").mkdir()
    return tmp_path


def write_hosts(repo: Path, hosts: dict) -> Path:
    path = repo / "hosts.yaml"
    path.write_text(yaml.safe_dump(hosts))
    return path


def problems(path: Path) -> list[str]:
    return [str(p) for p in load_hosts(path)[1]]


def test_a_good_ssh_host_resolves_its_key_paths_and_local_always_exists(repo) -> None:
    hosts, found = load_hosts(write_hosts(repo, {"gpu-a": SSH}))
    assert found == []
    assert set(hosts) == {"local", "gpu-a"}
    assert hosts["gpu-a"].identity_file == repo / "keys" / "id" and hosts["gpu-a"].port == 22
    assert set(load_hosts(repo / "absent.yaml")[0]) == {"local"}, "no hosts file: this machine only"


@pytest.mark.parametrize("change, field, expected", [
    ({"address": None}, "gpu-a.address", "required field is missing"),
    ({"identity_file": "keys/nope"}, "gpu-a.identity_file", "does not exist"),
    ({"known_hosts": "keys"}, "gpu-a.known_hosts", "a readable known_hosts file"),  # a folder cannot be read
    ({"known_hosts": "keys/missing"}, "gpu-a.known_hosts", "No such file"),
    ({"kind": "telnet"}, "gpu-a.kind", "local, ssh or pool"),
    ({"colour": "blue"}, "gpu-a.colour", "unknown field"),
    ({"port": 0}, "gpu-a.port", "greater than 0"),
    # Whatever reaches ssh as its destination or login is a name, never an option.
    ({"address": "-oProxyCommand=touch /tmp/owned"}, "gpu-a.address", "a DNS name"),
    ({"address": "root@10.1.2.3"}, "gpu-a.address", "a DNS name"),
    ({"address": "gpu-a.example\n"}, "gpu-a.address", "a DNS name"),
    ({"user": "-oProxyCommand=x"}, "gpu-a.user", "not starting with '-'"),
    ({"user": "bench x"}, "gpu-a.user", "a user name"),
])
def test_each_bad_host_field_is_named(repo, change, field, expected) -> None:
    entry = {key: value for key, value in {**SSH, **change}.items() if value is not None}
    found = problems(write_hosts(repo, {"gpu-a": entry}))
    matching = [p for p in found if p.startswith(f"{repo / 'hosts.yaml'}: {field}: ")]
    assert matching and expected in matching[0], found


def test_local_cannot_be_remote_and_names_are_labels(repo) -> None:
    found = problems(write_hosts(repo, {"local": SSH, "gpu.a": {"kind": "local"}}))
    assert any("local.kind" in p and "always this machine" in p for p in found), found
    assert any(": gpu.a: " in p and "host name" in p for p in found), found


def test_a_target_naming_an_unknown_host_is_a_target_error_listing_the_known(repo) -> None:
    hosts_path = write_hosts(repo, {"gpu-a": SSH})
    (repo / "targets" / "t.yaml").write_text(yaml.safe_dump({
        "engine": "vllm", "model": "models/m", "host": "gpu-z",
        "workload": {"kind": "random", "isl": 8, "osl": 8, "concurrency": 1}}))
    good, found = load_targets(repo / "targets", hosts=load_host_names(hosts_path)[0])
    assert good == {}
    assert [str(p) for p in found] == [f"{repo / 'targets' / 't.yaml'}: host: one of the hosts of {hosts_path} "
                                       f"(gpu-a, local), got 'gpu-z'"]


def test_a_target_naming_a_broken_host_says_what_is_wrong_with_it(repo) -> None:
    hosts_path = write_hosts(repo, {"gpu-a": {**SSH, "identity_file": "keys/nope"}})
    (repo / "targets" / "t.yaml").write_text(yaml.safe_dump({
        "engine": "vllm", "model": "models/m", "host": "gpu-a",
        "workload": {"kind": "random", "isl": 8, "osl": 8, "concurrency": 1}}))
    _, found = load_targets(repo / "targets", hosts=load_host_names(hosts_path)[0])
    assert len(found) == 1 and found[0].field == "host"
    assert "gpu-a.identity_file" in found[0].expected and "does not exist" in found[0].expected


def test_targets_check_reports_an_unknown_host_and_a_bad_hosts_file(repo) -> None:
    write_hosts(repo, {"gpu-a": SSH, "gpu-b": {**SSH, "known_hosts": "keys/missing"}})
    (repo / "targets" / "t.yaml").write_text(yaml.safe_dump({
        "engine": "vllm", "model": "models/m", "host": "gpu-z",
        "workload": {"kind": "random", "isl": 8, "osl": 8, "concurrency": 1}}))
    done = subprocess.run([sys.executable, "-m", "hyperloom_assets.cli", "targets", "check", str(repo / "targets")],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 1
    assert "gpu-b.known_hosts: a readable known_hosts file" in done.stdout
    assert "t.yaml: host: one of the hosts of" in done.stdout and "(gpu-a, local), got 'gpu-z'" in done.stdout


@pytest.mark.parametrize("gpus, client_cpus, field, expected", [
    ([0, 0], "auto", "gpu-a.gpus", "each device once"),
    ([], "auto", "gpu-a.gpus", "at least 1 item"),
    ([-1], "auto", "gpu-a.gpus.0", "greater than or equal to 0"),
    ([0, 1], "3", "gpu-a.client_cpus", "auto or off when gpus is set"),
])
def test_declared_gpus_are_distinct_device_ids_and_slots_own_their_cpus(repo, gpus, client_cpus, field,
                                                                         expected) -> None:
    found = problems(write_hosts(repo, {"gpu-a": {**SSH, "gpus": gpus, "client_cpus": client_cpus}}))
    matching = [p for p in found if p.startswith(f"{repo / 'hosts.yaml'}: {field}: ")]
    assert matching and expected in matching[0], found
    hosts, found = load_hosts(write_hosts(repo, {"gpu-a": {**SSH, "gpus": [0, 1]}, "cpu": {"kind": "local"}}))
    assert found == [] and hosts["gpu-a"].gpus == [0, 1] and hosts["cpu"].gpus is None


def test_a_target_that_needs_more_devices_than_its_host_declares_is_a_target_problem(repo) -> None:
    hosts_path = write_hosts(repo, {"gpu-a": {**SSH, "gpus": [0, 1]}})
    (repo / "targets" / "t.yaml").write_text(yaml.safe_dump({
        "engine": "vllm", "model": "models/m", "host": "gpu-a", "server_args": ["-tp", "2", "-pp", "2"],
        "workload": {"kind": "random", "isl": 8, "osl": 8, "concurrency": 1}}))
    good, found = load_targets(repo / "targets", hosts=load_host_names(hosts_path)[0])
    assert good == {} and [p.field for p in found] == ["server_args"]
    assert "at most 2 devices per launch (host 'gpu-a' declares 2" in found[0].expected and "= 4" in found[0].expected


@pytest.mark.parametrize("host, parallel, expected", [
    ("local", 2, "1 or auto on host 'local', which declares no gpus"),
    ("gpu-a", 3, "at most 2 slots of 2 device(s) on host 'gpu-a' (4 declared"),
])
def test_parallel_trials_needs_a_host_with_room_for_that_many_slots(repo, host, parallel, expected) -> None:
    hosts_path = write_hosts(repo, {"gpu-a": {**SSH, "gpus": [0, 1, 2, 3]}})
    (repo / "targets" / "t.yaml").write_text(yaml.safe_dump({
        "engine": "vllm", "model": "models/m", "host": host, "server_args": ["-tp", "2"], "parallel_trials": parallel,
        "workload": {"kind": "random", "isl": 8, "osl": 8, "concurrency": 1}}))
    good, found = load_targets(repo / "targets", hosts=load_host_names(hosts_path)[0])
    assert good == {} and [p.field for p in found] == ["parallel_trials"] and expected in found[0].expected, found


@pytest.mark.parametrize("address", ["10.1.2.3", "::1", "fe80::1%eth0", "gpu-a", "gpu-a.example.com", "gpu_a.lan"])
def test_host_names_and_ip_addresses_are_addresses(repo, address) -> None:
    hosts, found = load_hosts(write_hosts(repo, {"gpu-a": {**SSH, "address": address, "user": "bench.ops"}}))
    assert found == [] and hosts["gpu-a"].address == address


def test_ssh_ends_its_options_before_the_destination(repo) -> None:
    hosts, _ = load_hosts(write_hosts(repo, {"gpu-a": SSH}))
    argv = SshTransport("gpu-a", hosts["gpu-a"], repo / "runs", False, 1.0).ssh_argv(["python", "-V"])
    assert argv[-3:] == ["--", "10.1.2.3", "python -V"]
    assert argv.count("--") == 1 and argv[argv.index("-l") + 1] == "bench"


@pytest.mark.parametrize("content, expected", [
    (b"gpu-a: {kind: ssh, address: \xff}\n", "UTF-8 text, but byte 0xff"),
    (b"a: &a [*a]\n", "inside its own anchor"),
    (b"#" * (MAX_CONFIG_BYTES + 1), "at most 1048576 bytes"),
])
def test_a_bad_hosts_file_fails_only_the_targets_that_name_its_hosts(repo, content, expected) -> None:
    (repo / "hosts.yaml").write_bytes(content)
    hosts, found = load_hosts(repo / "hosts.yaml")
    assert set(hosts) == {"local"} and [p.field for p in found] == ["(file)"] and expected in found[0].expected
    body = {"engine": "vllm", "model": "models/m", "workload": {"kind": "random", "isl": 8, "osl": 8, "concurrency": 1}}
    (repo / "targets" / "here.yaml").write_text(yaml.safe_dump(body))
    (repo / "targets" / "there.yaml").write_text(yaml.safe_dump({**body, "host": "gpu-a"}))
    good, problems = load_targets(repo / "targets", hosts=load_host_names(repo / "hosts.yaml")[0])
    assert set(good) == {"here"}
    assert [(p.file, p.field) for p in problems] == [(str(repo / "targets" / "there.yaml"), "host")]
    assert f"the hosts file {repo / 'hosts.yaml'} naming 'gpu-a' is bad: " in problems[0].expected
    assert expected in problems[0].expected
