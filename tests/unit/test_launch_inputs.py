"""A launch whose own inputs no process can take (an env name with `=`, a NUL byte) is refused
as a ServerError of class `launch_refused`, before the host is touched, on every path to a
launch; Popen's bare ValueError never reaches a step."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hyperloom_assets.core.measurement.serving import ServerError, ServerSpec, env_problems, launch_problems
from hyperloom_assets.resources.hosts import host_side
from hyperloom_assets.resources.hosts.local import LocalHost
from tests.conftest import SIM_MODEL


@pytest.mark.parametrize(("env", "unset", "problem"), [
    ({"VLLM_X=Y": "1"}, [], "env name 'VLLM_X=Y' is not an environment variable name"),
    ({"": "1"}, [], "env name '' is not"),
    ({"1ST": "1"}, [], "env name '1ST' is not"),
    ({"VLLM_\u00e9": "1"}, [], "is not"),
    ({"A": "x\0y"}, [], "env A: its value holds a NUL byte"),
    ({}, ["BAD NAME"], "env name 'BAD NAME' is not"),
])
def test_env_no_process_can_take_is_named(env, unset, problem) -> None:
    problems = env_problems(env, unset)
    assert len(problems) == 1 and problem in problems[0], problems


def test_a_launchable_spec_has_no_problems_and_a_nul_anywhere_is_one() -> None:
    assert env_problems({"VLLM_CPU_KVCACHE_SPACE": "1", "_x9": ""}) == []
    spec = ServerSpec(engine="sim", model=SIM_MODEL, server_args=["--max-num-seqs", "4"], env={"A": "1"})
    assert launch_problems(spec) == []
    broken = spec.model_copy(update={"server_args": ["--max-num-seqs", "4\0"], "model": Path("m\0")})
    assert launch_problems(broken) == ["server_args[1] holds a NUL byte", "model holds a NUL byte"]


def test_the_host_refuses_a_bad_env_before_it_reaps_preflights_or_starts(tmp_path) -> None:
    host = LocalHost(state_dir=str(tmp_path / "state"), check_foreign_processes=False)
    spec = ServerSpec(engine="sim", model=SIM_MODEL, server_args=["--gpu", "H100"], env={"VLLM_X=Y": "1"})
    with pytest.raises(ServerError) as refused:
        with host.serve(spec, tmp_path / "run"):
            pytest.fail("no server may be ready for this spec")
    assert refused.value.error_class == "launch_refused"
    assert str(refused.value).startswith("launch_refused: host 'local': nothing launched: env name 'VLLM_X=Y'")
    assert not (tmp_path / "state").exists() and not (tmp_path / "run").exists(), "the host was not touched"


def test_a_start_that_popen_refuses_is_a_launch_refused_server_error(tmp_path) -> None:
    # The host side's own net under the check above (an SSH host's agent calls start directly).
    with pytest.raises(ServerError) as refused:
        host_side.start([sys.executable, "-c", "pass"], {"A": "x\0y"}, [], tmp_path / "server.log", tmp_path / "pids")
    assert refused.value.error_class == "launch_refused" and "embedded null byte" in refused.value.message
    assert not list((tmp_path / "pids").glob("*")), "no pidfile for a process that never started"
