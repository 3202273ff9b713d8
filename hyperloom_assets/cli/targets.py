"""`hyperloom targets check [DIR]`: one line per problem, non-zero when any file is bad."""

from __future__ import annotations

import argparse
from pathlib import Path

from hyperloom_assets.core.config.hosts import hosts_file, load_host_names
from hyperloom_assets.core.config.targets import load_targets, targets_dir


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="hyperloom targets")
    sub = parser.add_subparsers(dest="action", required=True)
    check = sub.add_parser("check", help="validate every target file of a folder")
    check.add_argument("dir", nargs="?", type=Path, default=None)
    args = parser.parse_args(argv)
    folder = args.dir.resolve() if args.dir else targets_dir()
    hosts, host_problems = load_host_names(hosts_file(folder))
    good, problems = load_targets(folder, hosts=hosts)
    for problem in host_problems + problems:
        print(problem)
    print(f"{len(good)} target(s) ok, {len({p.file for p in problems})} file(s) with problems in {folder}")
    return 1 if problems or host_problems else 0
