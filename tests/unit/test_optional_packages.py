"""The core installs and imports without the optional extras (fleet, k8s, test, bench, cpu)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib

from tests.conftest import REPO

# Top-level modules of the extras' packages and of what only they pull in.
OPTIONAL_MODULES = ("dagster_postgres", "dagster_celery", "dagster_k8s", "celery", "kombu", "redis", "kubernetes",
                    "psycopg2", "pytest", "playwright", "mkdocs", "vllm", "torch")

BLOCK = f"""
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {OPTIONAL_MODULES!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked: an optional extra)", name=name)
        return None
sys.meta_path.insert(0, Absent())
"""


def run_without_extras(code: str, *argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYPERLOOM_")}
    return subprocess.run([sys.executable, "-c", BLOCK + code, *argv], capture_output=True, text=True, timeout=300,
                          env=env, cwd=REPO)


def test_the_block_works() -> None:
    done = run_without_extras("import dagster_postgres")
    assert done.returncode == 1 and "blocked: an optional extra" in done.stderr


def test_definitions_and_every_cli_command_import_without_the_extras(tmp_path) -> None:
    code = ("import sys\n"
            "from hyperloom_assets.definitions import defs\n"
            "assert defs.resolve_job_def('optimize_job')\n"
            "from hyperloom_assets.cli.main import command_parsers, main\n"
            "assert len(list(command_parsers())) > 10\n"
            "sys.exit(main(['instance-config', sys.argv[1]]))\n")
    done = run_without_extras(code, str(tmp_path / "home"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "home" / "dagster.yaml").is_file()


def test_a_fleet_tier_without_the_fleet_extra_says_which_extra(tmp_path) -> None:
    code = ("import os, sys\n"
            "os.environ['HYPERLOOM_CELERY_BROKER'] = 'redis://127.0.0.1:1/0'\n"
            "from hyperloom_assets.cli.main import main\n"
            "sys.exit(main(['instance-config', sys.argv[1]]))\n")
    done = run_without_extras(code, str(tmp_path))
    assert done.returncode == 1
    assert not (tmp_path / "dagster.yaml").exists()
    assert "HYPERLOOM_CELERY_BROKER is set, but dagster_celery is not installed: install the fleet extra" in done.stderr


def test_the_optional_packages_are_extras_not_core_dependencies() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"])
    for name in ("dagster-postgres", "dagster-celery", "dagster-k8s", "pytest", "playwright", "mkdocs", "vllm"):
        assert name not in core, name
    extras = project["optional-dependencies"]
    assert {"test", "fleet", "k8s", "cpu", "bench"} <= set(extras)
