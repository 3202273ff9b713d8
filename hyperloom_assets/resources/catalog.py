"""The targets folder as a resource: assets and sensors read target files through it."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from hyperloom_assets.core.config.hosts import hosts_file, load_host_names
from hyperloom_assets.core.config.host_names import HostNames
from hyperloom_assets.core.config.problems import TargetError
from hyperloom_assets.core.config.targets import Target, load_target, load_targets, targets_dir
from hyperloom_assets.core.secrets import has_redacted, restore_argv, restore_env, snapshot_text
from hyperloom_assets.resources.store.results import ResultStore


class TargetCatalog(dg.ConfigurableResource):
    """`folder`: the targets folder (default `HYPERLOOM_TARGETS_DIR` or `targets/`);
    `hosts_file`: the hosts a target may name (default `HYPERLOOM_HOSTS_FILE`, else
    `hosts.yaml` beside the targets folder)."""

    folder: str | None = None
    hosts_file: str | None = None

    def path(self) -> Path:
        return Path(self.folder).resolve() if self.folder else targets_dir()

    def hosts_path(self) -> Path:
        return Path(self.hosts_file).resolve() if self.hosts_file else hosts_file(self.path())

    def host_names(self) -> HostNames:
        return load_host_names(self.hosts_path())[0]

    def target(self, name: str, text: str | None = None) -> Target:
        """One target, fully checked (paths and host too); raises dagster.Failure naming file and field.

        `text`: the file's content as a run's snapshot holds it, instead of the file now."""
        try:
            return load_target(self.path(), name, self.host_names(), text)
        except TargetError as exc:
            raise dg.Failure(description=f"bad target file: {exc}", metadata={"problems": [str(p) for p in exc.problems]}) from exc

    def run_target(self, name: str, run_id: str, store: ResultStore) -> Target:
        """The target as the run's first step read it: its later steps see no edit made meanwhile.

        The stored snapshot holds no secret (core/secrets.py): each redacted value is read
        from the file as it is now, so the server still gets the real one."""
        def read() -> str:
            self.target(name)  # a missing or bad file fails here, naming it, before it is kept
            return snapshot_text((self.path() / f"{name}.yaml").read_text())
        target = self.target(name, store.run_target(run_id, name, read))
        if not has_redacted(target.env, target.server_args):
            return target
        live = self.target(name)
        try:
            return target.model_copy(update={"env": restore_env(target.env, live.env),
                                              "server_args": restore_argv(target.server_args, live.server_args)})
        except KeyError as exc:
            raise dg.Failure(description=f"bad target file: {self.path() / f'{name}.yaml'}: {exc.args[0]} "
                                         "(a run reads its secrets from the file, not from its snapshot)") from exc

    def all(self, check_paths: bool = False):
        return load_targets(self.path(), check_paths=check_paths, hosts=self.host_names())
