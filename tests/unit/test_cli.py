"""The `hyperloom` command's manners: --version, usage errors, --json, help text everywhere."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hyperloom_assets.cli import demo
from hyperloom_assets.cli.main import command_parsers
from hyperloom_assets.sim.cli import predict_parser, serve_parser
from hyperloom_assets.sim.engine_args import FLAVORS
from tests.unit.test_targets import GOOD


def hyperloom(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hyperloom_assets.cli", *argv], capture_output=True, text=True,
                          timeout=120, env=env)


def test_version_is_the_installed_package_version() -> None:
    done = hyperloom("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"hyperloom {importlib.metadata.version('hyperloom-assets')}"


@pytest.mark.parametrize("argv", [[], ["no-such-command"], ["--no-such-flag"], ["targets", "check", "--no-such-flag"],
                                  ["hosts"], ["host-agent", "no-such-op"]])
def test_a_bare_call_or_any_misuse_is_usage_on_stderr_and_exit_2(argv) -> None:
    done = hyperloom(*argv)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("usage: hyperloom")


def test_help_is_on_stdout_with_exit_0_and_lists_the_commands() -> None:
    done = hyperloom("--help")
    assert done.returncode == 0
    assert "targets check [DIR]" in done.stdout and "--version" in done.stdout


def parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield from command_parsers()
    for flavor in FLAVORS:  # the sim's flags depend on the engine it mimics
        yield f"sim-serve --flavor {flavor}", serve_parser(flavor)
        yield f"sim-predict --flavor {flavor}", predict_parser(flavor)
    yield "python -m hyperloom_assets.cli.demo", demo.parser()


def undocumented(parser: argparse.ArgumentParser, path: str) -> Iterator[str]:
    for action in parser._actions:
        name = f"{path} {'/'.join(action.option_strings) or action.dest}"
        if not action.help or action.help == argparse.SUPPRESS:
            yield name
        if isinstance(action, argparse._SubParsersAction):
            yield from (f"{path} {choice.dest}" for choice in action._choices_actions if not choice.help)
            for command, sub in action.choices.items():
                yield from undocumented(sub, f"{path} {command}")


def test_every_option_of_every_command_has_help_text() -> None:
    missing = [name for path, parser in parsers() for name in undocumented(parser, path)]
    assert not missing, f"options without help text: {missing}"


def test_the_walk_finds_an_option_without_help() -> None:
    parser = argparse.ArgumentParser()
    parser.add_subparsers(dest="action", help="what").add_parser("go", help="go").add_argument("--quiet")
    assert list(undocumented(parser, "x")) == ["x go --quiet"]


def test_targets_check_json_is_one_document_on_stdout(tmp_path) -> None:
    (tmp_path / "models" / "m").mkdir(parents=True)
    (tmp_path / "models" / "m" / "config.json").write_text(json.dumps({"vocab_size": 100}))
    (tmp_path / "targets").mkdir()
    (tmp_path / "targets" / "good.yaml").write_text(GOOD)
    ok = hyperloom("targets", "check", str(tmp_path / "targets"), "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == {"folder": str(tmp_path / "targets"), "ok": True, "targets": ["good"], "problems": []}
    (tmp_path / "targets" / "bad.yaml").write_text(GOOD.replace("engine: vllm", "engine: tgi"))
    bad = hyperloom("targets", "check", str(tmp_path / "targets"), "--json")
    assert bad.returncode == 1
    found = json.loads(bad.stdout)
    assert found["ok"] is False and found["targets"] == ["good"]
    assert [(p["file"], p["field"]) for p in found["problems"]] == [(str(tmp_path / "targets" / "bad.yaml"), "engine")]


def test_hosts_check_json_gives_each_hosts_facts_or_error(tmp_path) -> None:
    (tmp_path / "targets").mkdir()
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id").write_text("key")
    (tmp_path / "keys" / "kh").write_text("[127.0.0.1]:1 ssh-ed25519 AAAA")
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"dead": {
        "kind": "ssh", "address": "127.0.0.1", "port": 1, "user": "bench", "identity_file": "keys/id",
        "known_hosts": "keys/kh", "python": "/usr/bin/python3", "workdir": str(tmp_path / "work")}}))
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HYPERLOOM_")},
           "HYPERLOOM_TARGETS_DIR": str(tmp_path / "targets"), "DAGSTER_HOME": str(tmp_path / "home")}
    done = hyperloom("hosts", "check", "--json", env=env)
    assert done.returncode == 1, "a host that does not answer fails the check"
    found = json.loads(done.stdout)
    by_name = {host["name"]: host for host in found["hosts"]}
    assert found["ok"] is False and found["problems"] == []
    assert by_name["dead"]["ok"] is False and "connection refused" in by_name["dead"]["error"]
    assert by_name["local"]["ok"] is True and by_name["local"]["facts"]["free_port"] > 0
