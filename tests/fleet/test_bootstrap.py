"""`hyperloom hosts bootstrap` into a bare interpreter on an SSH host, then `hosts check` sees it;
never over a development install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.cli
REPO = Path(__file__).resolve().parents[2]


def hyperloom(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hyperloom_assets.cli", *args], env=env, capture_output=True,
                          text=True, timeout=900)


def test_bootstrap_installs_the_client_into_a_bare_python_on_the_host(sshd, tmp_path) -> None:
    subprocess.run(["python3.11", "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    bare = str(tmp_path / "venv" / "bin" / "python")
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"fresh": sshd.host_entry(tmp_path / "work", bare)}))
    env = {**os.environ, "HYPERLOOM_HOSTS_FILE": str(tmp_path / "hosts.yaml")}
    before = hyperloom(env, "hosts", "check", "fresh")
    assert before.returncode == 1 and "hyperloom hosts bootstrap fresh" in before.stdout
    done = hyperloom(env, "hosts", "bootstrap", "fresh")
    assert done.returncode == 0, done.stdout + done.stderr
    after = hyperloom(env, "hosts", "check", "fresh")
    assert after.returncode == 0, after.stdout
    assert "fresh (ssh " in after.stdout and "sim: hyperloom-assets 0.1.0" in after.stdout
    assert "vllm: not installed" in after.stdout and "clock skew: " in after.stdout


def test_bootstrap_leaves_a_development_install_on_the_host(sshd, tmp_path) -> None:
    """A loopback host whose python is this checkout's venv keeps its editable install."""
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump({"dev": sshd.host_entry(tmp_path / "work", sys.executable)}))
    env = {**os.environ, "HYPERLOOM_HOSTS_FILE": str(tmp_path / "hosts.yaml")}
    done = hyperloom(env, "hosts", "bootstrap", "dev")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "installed editable from file://" in done.stdout and "bootstrap leaves it" in done.stdout
    where = subprocess.run([sys.executable, "-c", "import hyperloom_assets; print(hyperloom_assets.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, check=True).stdout.strip()
    assert where == str(REPO / "hyperloom_assets" / "__init__.py"), where
