"""What a served engine inherits from its host: the platform's and its own variables, never a credential."""

from __future__ import annotations

import pytest

from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.fleet.serving_env import carries_password, is_credential_name, serving_env
from hyperloom_assets.resources.hosts.host_side import server_env

# What a run's environment holds that no engine needs.
CREDENTIALS = {
    "ANTHROPIC_API_KEY": "sk-ant-canary", "ANTHROPIC_AUTH_TOKEN": "canary", "OPENAI_API_KEY": "sk-canary",
    "PGPASSWORD": "canary", "HYPERLOOM_POSTGRES_PASSWORD": "canary",
    "HYPERLOOM_POSTGRES_URL": "postgresql://hyperloom@db:5432/hyperloom",
    "HYPERLOOM_CELERY_BROKER": "redis://:canary@broker:6379/0", "SSH_AUTH_SOCK": "/tmp/ssh-canary/agent.1",
    "AWS_SECRET_ACCESS_KEY": "canary", "GOOGLE_APPLICATION_CREDENTIALS": "/home/u/canary.json",
    # Under a prefix the engine's servers inherit, still a credential:
    "HF_TOKEN": "hf_canary", "HUGGING_FACE_HUB_TOKEN": "hf_canary", "VLLM_API_KEY": "canary",
    "SGLANG_API_KEY": "canary", "HF_HUB_PROXY": "http://user:canary@proxy:3128",
}
# What a run's environment holds that is neither platform nor engine.
OTHERS = {"DAGSTER_HOME": "/srv/dagster", "HYPERLOOM_TARGETS_DIR": "/srv/targets", "EDITOR": "vi",
          "DISPLAY": ":0", "HTTPS_PROXY": "http://proxy:3128"}
PLATFORM = {"PATH": "/usr/bin:/bin", "HOME": "/home/u", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TMPDIR": "/scratch",
            "USER": "u", "CUDA_VISIBLE_DEVICES": "0,1", "HIP_VISIBLE_DEVICES": "0", "NCCL_DEBUG": "WARN",
            "OMP_NUM_THREADS": "8", "HF_HOME": "/models/hf", "XDG_CACHE_HOME": "/cache", "PYTHONPATH": "/opt/lib",
            "TOKENIZERS_PARALLELISM": "false", "TRITON_CACHE_DIR": "/cache/triton", "LD_LIBRARY_PATH": "/usr/local/cuda"}
HOST = {**CREDENTIALS, **OTHERS, **PLATFORM, "VLLM_CPU_KVCACHE_SPACE": "4", "SGLANG_ENABLE_TORCH_COMPILE": "1"}


def test_a_server_inherits_the_platform_and_its_engines_variables_and_no_credential() -> None:
    env = serving_env(HOST, engine_for("vllm").inherited_prefixes(), {})
    assert env == {**PLATFORM, "VLLM_CPU_KVCACHE_SPACE": "4"}, "another engine's variables stay out too"


@pytest.mark.parametrize("engine", ["vllm", "sglang", "atom", "sim"])
def test_no_engine_inherits_a_credential(engine: str) -> None:
    env = server_env(engine, {}, [], inherited=HOST)
    assert not set(env) & set(CREDENTIALS), engine
    assert env["PATH"] == HOST["PATH"] and env["HF_HOME"] == HOST["HF_HOME"]


def test_the_targets_env_is_laid_on_top_as_given_and_unset_env_removes_an_inherited_name() -> None:
    """An explicit value is the target author's to give (a gated model's HF_TOKEN); it is never
    taken from the run's own environment."""
    env = server_env("vllm", {"VLLM_LOGGING_LEVEL": "DEBUG", "HF_TOKEN": "hf_written_in_the_target", "PATH": "/x"},
                     ["OMP_NUM_THREADS"], inherited=HOST)
    assert env["VLLM_LOGGING_LEVEL"] == "DEBUG" and env["HF_TOKEN"] == "hf_written_in_the_target"
    assert env["PATH"] == "/x" and "OMP_NUM_THREADS" not in env


def test_the_sims_own_switches_pass_for_the_sim_only() -> None:
    host = {**HOST, "HYPERLOOM_SIM_LAUNCH_SCRIPT": "/tmp/script", "HYPERLOOM_SIM_TOKEN": "canary"}
    assert server_env("sim", {}, [], inherited=host)["HYPERLOOM_SIM_LAUNCH_SCRIPT"] == "/tmp/script"
    assert "HYPERLOOM_SIM_TOKEN" not in server_env("sim", {}, [], inherited=host)
    assert "HYPERLOOM_SIM_LAUNCH_SCRIPT" not in server_env("vllm", {}, [], inherited=host)


@pytest.mark.parametrize("name", ["HF_TOKEN", "VLLM_API_KEY", "PGPASSWORD", "MYSQL_PWD", "SSH_AUTH_SOCK",
                                  "AWS_SESSION_TOKEN", "HFTOKEN", "DB_PASSWD", "CLIENT_SECRET", "ACCESSKEY",
                                  "GOOGLE_APPLICATION_CREDENTIALS", "hf_token", "HYPERLOOM_CELERY_BACKEND"])
def test_credential_names(name: str) -> None:
    assert is_credential_name(name)


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "VLLM_MAX_TOKENS", "PATH", "HF_HOME", "NCCL_DEBUG",
                                  "VLLM_CPU_KVCACHE_SPACE", "VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD",
                                  "VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD"])
def test_names_that_are_not_credentials(name: str) -> None:
    assert not is_credential_name(name)


def test_a_url_with_a_password_is_a_credential_under_any_name() -> None:
    assert carries_password("redis://:secret@broker:6379/0") and carries_password("amqp://u:p@mq//")
    assert not carries_password("http://proxy:3128") and not carries_password("/usr/bin:/bin")
    assert not carries_password("postgresql://hyperloom@db/hyperloom"), "a user without a password"


def test_the_parser_probe_imports_the_engine_without_the_runs_credentials(tmp_path, monkeypatch) -> None:
    """The probe runs the engine's own code (its tree's, patches included) as a server would."""
    from hyperloom_assets.core.engines.registry import engine_for
    from hyperloom_assets.resources.hosts.proposal_checks import checks_request, proposal_checks

    seen = tmp_path / "probe-env.txt"
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nenv > {seen}\necho '{{\"flags\": []}}'\n")
    python.chmod(0o755)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-probe-secret")
    monkeypatch.setenv("PGPASSWORD", "probe-pg-secret")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")
    proposal_checks(checks_request(engine_for("vllm"), [], str(python), [["--max-num-seqs", "8"]]))
    env = seen.read_text()
    assert "sk-ant-probe-secret" not in env and "probe-pg-secret" not in env, "the run's credentials reached the probe"
    assert "VLLM_CPU_KVCACHE_SPACE=2" in env and "PATH=" in env, "the engine's own variables and the platform's do"
