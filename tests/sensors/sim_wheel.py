"""The sim engine as a distribution of its own (`hyperloom-sim-engine`), written as a wheel by hand.

Its module `hyperloom_sim_engine` runs the project's sim server, so a release env built
from it serves with `python -m hyperloom_sim_engine --model DIR --gpu NAME --port N`.
No network and no build backend: a wheel is a zip with METADATA, WHEEL and RECORD.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

DISTRIBUTION = "hyperloom-sim-engine"
MODULE = "hyperloom_sim_engine"

MAIN = '''"""Serve the hyperloom sim engine: the same flags as `hyperloom sim-serve`."""
import sys

from hyperloom_assets.sim.cli import serve_main

sys.exit(serve_main(sys.argv[1:]))
'''


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_sim_wheel(folder: Path, version: str) -> Path:
    """Write `hyperloom_sim_engine-<version>-py3-none-any.whl` into folder and return its path."""
    info = f"{MODULE}-{version}.dist-info"
    files = {
        f"{MODULE}/__init__.py": f'"""The hyperloom sim engine, release {version}."""\n__version__ = "{version}"\n'.encode(),
        f"{MODULE}/__main__.py": MAIN.encode(),
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {version}\n"
                             "Summary: The hyperloom sim engine as its own release\n").encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: hyperloom-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "\n".join([_record_line(name, data) for name, data in files.items()] + [f"{info}/RECORD,,"]) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{MODULE}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr(f"{info}/RECORD", record)
    return wheel
