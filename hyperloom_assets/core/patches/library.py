"""The patch library shipped with the project: one file per patch, per engine. Pure code.

`library/<engine>/<name>.patch`, each with its header (engine.py's HEADER_KEYS in patch.py). A
library patch is offered only where its header claims the engine release that serves
the target; whether it applies is then `git apply --check`'s call, trial by trial.
"""

from __future__ import annotations

from pathlib import Path

from hyperloom_assets.core.engines.spec import EngineSpec
from hyperloom_assets.core.patches.patch import SourcePatch, read_patch_file

LIBRARY_DIR = Path(__file__).parent / "library"


def library_patches(spec: EngineSpec, folder: Path = LIBRARY_DIR) -> list[SourcePatch]:
    """Every shipped patch for the engine, by name."""
    engine_dir = folder / spec.name
    if not engine_dir.is_dir():
        return []
    return [read_patch_file(path, "library", spec) for path in sorted(engine_dir.glob("*.patch"))]


def offered_patches(spec: EngineSpec, identity: str | None, folder: Path = LIBRARY_DIR) -> list[SourcePatch]:
    """The library patches whose header claims this release (`distribution version`)."""
    return [patch for patch in library_patches(spec, folder) if patch.applies_to_identity(identity)]


def library_patch(spec: EngineSpec, name: str, folder: Path = LIBRARY_DIR) -> SourcePatch:
    """One shipped patch by name (tests, the benchmark, the demo)."""
    return read_patch_file(folder / spec.name / f"{name}.patch", "library", spec)
