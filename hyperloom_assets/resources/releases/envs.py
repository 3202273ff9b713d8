"""A virtual environment per engine release, for release-triggered runs.

`ReleaseEnvironments.python_for(package, version)` returns the interpreter of
`<root>/<package>-<version>/`, building it on first use: `python -m venv`, then
`pip install <package>==<version>` from the simple index that matches the release
sensor's JSON API (`HYPERLOOM_PACKAGE_SIMPLE_URL`, else `HYPERLOOM_PACKAGE_INDEX_URL`
with `/pypi` turned into `/simple`). Only then a `.pth` file makes the project's own
packages and the project venv's site-packages importable, after the env's own
site-packages so the new release's files win (written after pip, so pip never sees, and
never tries to replace, the project's copy of the engine). A marker file says the env
works; an env without it is half-built and is rebuilt.

`root` defaults to `.cache/envs` beside `DAGSTER_HOME` (the repo root under the
Makefile, which keeps DAGSTER_HOME at `<repo>/.dagster_home`), else under the cwd.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import dagster as dg
from packaging.version import InvalidVersion, Version

from hyperloom_assets.resources.releases.package_index import simple_index_url

MARKER = ".hyperloom-env-ready"
PTH_NAME = "hyperloom-project.pth"
REPO_ROOT = Path(__file__).resolve().parents[3]
PACKAGE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
ERROR_TAIL_LINES = 25
_SITE_PACKAGES_PROBE = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
_VERIFY_PROBE = ("import importlib.metadata as m, sys\n"
                 "print(m.version(sys.argv[1]))\n"
                 "import hyperloom_assets.resources\n")


class EnvironmentUnavailable(RuntimeError):
    """A release's environment could not be built; `reason` carries pip's error tail."""

    def __init__(self, package: str, version: str, reason: str):
        self.package, self.version, self.reason = package, version, reason
        super().__init__(f"environment for {package}=={version} unavailable: {reason}")


def default_envs_root() -> Path:
    home = os.environ.get("DAGSTER_HOME")
    base = Path(home).resolve().parent if home else Path.cwd()
    return base / ".cache" / "envs"


def _tail(text: str, lines: int = ERROR_TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def project_site_lines() -> list[str]:
    """The `.pth` lines: the repo root, then the project venv's site-packages (with their own .pth files)."""
    paths = sysconfig.get_paths()
    site_dirs = list(dict.fromkeys([paths["purelib"], paths["platlib"]]))
    return [str(REPO_ROOT)] + [f"import site; site.addsitedir({d!r})" for d in site_dirs]


class ReleaseEnvironments(dg.ConfigurableResource):
    """`root`: where envs live (default: see module doc). `install_deps`: let pip install the
    release's dependencies into the env; off, the env relies on the project's (via the .pth)."""

    root: str | None = None
    base_python: str | None = None  # creates the envs; default: this interpreter
    simple_url: str | None = None  # default: derived from the package index settings
    install_deps: bool = True
    pip_timeout_s: float = 3600.0

    def root_path(self) -> Path:
        return Path(self.root).resolve() if self.root else default_envs_root()

    def env_dir(self, package: str, version: str) -> Path:
        return self.root_path() / f"{package}-{version}"

    def python_for(self, package: str, version: str) -> Path:
        """The interpreter of the release's env, built (or rebuilt when half-built) as needed."""
        _check_release(package, version)
        env = self.env_dir(package, version)
        python = env / "bin" / "python"
        with self._lock(package, version):
            if (env / MARKER).is_file() and python.exists():
                return python
            self._build(package, version, env, python)
        return python

    @contextmanager
    def _lock(self, package: str, version: str) -> Iterator[None]:
        # Two runs asking for the same release at once build it once.
        root = self.root_path()
        try:
            root.mkdir(parents=True, exist_ok=True)
            handle = open(root / f".{package}-{version}.lock", "w")
        except OSError as exc:
            raise EnvironmentUnavailable(package, version, f"envs folder {root} unusable: {exc}") from exc
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def _build(self, package: str, version: str, env: Path, python: Path) -> None:
        shutil.rmtree(env, ignore_errors=True)
        base = self.base_python or sys.executable
        self._run(package, version, [base, "-m", "venv", "--without-pip", str(env)], "python -m venv")
        install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-input",
                   "--disable-pip-version-check", "--index-url", self.simple_url or simple_index_url(),
                   f"{package}=={version}"]
        if not self.install_deps:
            install.append("--no-deps")
        self._run(package, version, install, "pip install")
        site_packages = Path(self._run(package, version, [str(python), "-c", _SITE_PACKAGES_PROBE],
                                       "site-packages probe").strip())
        (site_packages / PTH_NAME).write_text("\n".join(project_site_lines()) + "\n")
        found = self._run(package, version, [str(python), "-c", _VERIFY_PROBE, package], "import check").strip()
        if not _same_version(found, version):
            raise EnvironmentUnavailable(package, version, f"the env reports {package} {found}, not {version}")
        marker = {"package": package, "version": version, "built_at": datetime.now(timezone.utc).isoformat()}
        (env / MARKER).write_text(json.dumps(marker) + "\n")

    def _run(self, package: str, version: str, argv: list[str], step: str) -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.pip_timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise EnvironmentUnavailable(package, version, f"{step} timed out after {exc.timeout:.0f} s") from exc
        except OSError as exc:
            raise EnvironmentUnavailable(package, version, f"{step} could not start: {exc}") from exc
        if done.returncode != 0:
            raise EnvironmentUnavailable(package, version, f"{step} exited {done.returncode}:\n"
                                                           f"{_tail(done.stdout + done.stderr)}")
        return done.stdout


def _same_version(found: str, wanted: str) -> bool:
    try:
        return Version(found) == Version(wanted)
    except InvalidVersion:
        return False


def _check_release(package: str, version: str) -> None:
    if not PACKAGE_NAME.match(package):
        raise EnvironmentUnavailable(package, version, f"{package!r} is not a distribution name")
    try:
        Version(version)
    except InvalidVersion as exc:
        raise EnvironmentUnavailable(package, version, f"version {version!r} does not parse") from exc
