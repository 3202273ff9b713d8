"""`hyperloom targets check [DIR] [--json]`: one line per problem, non-zero when any file is bad.

With `--json`, stdout is one JSON document instead: the folder, `ok`, the good targets'
names and every problem as {file, field, expected}. A target with a `search_space` also has
its flags and values put to the engine's own parser on the target's host
(resources/hosts/space_check.py).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hyperloom_assets.core.config.hosts import hosts_file, load_host_names
from hyperloom_assets.core.config.problems import TargetProblem
from hyperloom_assets.core.config.targets import Target, load_targets, targets_dir
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.fleet import HostFleet
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.hosts.space_check import spaces_problems
from hyperloom_assets.resources.store.results import ResultStore


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hyperloom targets", description="Check the target files.")
    sub = p.add_subparsers(dest="action", required=True, help="what to do")
    check = sub.add_parser("check", help="validate every target file of a folder",
                           description="Validate every target file of a folder, and its hosts file.")
    check.add_argument("dir", nargs="?", type=Path, default=None,
                       help="the targets folder (default: $HYPERLOOM_TARGETS_DIR, else ./targets)")
    check.add_argument("--json", action="store_true", help="print one JSON document of the results on stdout")
    return p


def parser_problems(folder: Path, good: dict[str, Target]) -> list[TargetProblem]:
    """The search_space of each good target that has one, through the engine's parser on its host."""
    spaced = {name: t for name, t in sorted(good.items()) if t.search_space is not None and t.search_space.args}
    if not spaced:
        return []
    fleet = HostFleet(local=LocalHost(check_foreign_processes=False), catalog=TargetCatalog(folder=str(folder)),
                      store=ResultStore())
    asked = [(target, fleet.host(target.host), str(folder / f"{name}.yaml")) for name, target in spaced.items()]
    found = spaces_problems(asked, unasked_is_a_problem=True)
    return [problem for problems in found for problem in problems]


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    folder = args.dir.resolve() if args.dir else targets_dir()
    hosts, host_problems = load_host_names(hosts_file(folder))
    good, problems = load_targets(folder, hosts=hosts)
    refused = parser_problems(folder, good)
    problems += refused
    bad_files = {p.file for p in refused}
    good = {name: t for name, t in good.items() if str(folder / f"{name}.yaml") not in bad_files}
    everything = host_problems + problems
    if args.json:
        print(json.dumps({"folder": str(folder), "ok": not everything, "targets": sorted(good),
                          "problems": [problem.model_dump() for problem in everything]}, indent=1))
    else:
        for problem in everything:
            print(problem)
        print(f"{len(good)} target(s) ok, {len({p.file for p in problems})} file(s) with problems in {folder}")
    return 1 if everything else 0
