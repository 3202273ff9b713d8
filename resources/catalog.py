"""The targets folder as a resource: assets and sensors read target files through it."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from hyperloom_assets.core.config.targets import Target, TargetError, load_target, load_targets, targets_dir


class TargetCatalog(dg.ConfigurableResource):
    """`folder`: the targets folder (default `HYPERLOOM_TARGETS_DIR` or `targets/`)."""

    folder: str | None = None

    def path(self) -> Path:
        return Path(self.folder).resolve() if self.folder else targets_dir()

    def target(self, name: str) -> Target:
        """One target, fully checked (paths too); raises dagster.Failure naming file and field."""
        try:
            return load_target(self.path(), name)
        except TargetError as exc:
            raise dg.Failure(description=f"bad target file: {exc}", metadata={"problems": [str(p) for p in exc.problems]}) from exc

    def all(self, check_paths: bool = False):
        return load_targets(self.path(), check_paths=check_paths)
