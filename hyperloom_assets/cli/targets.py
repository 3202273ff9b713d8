"""`hyperloom targets check [DIR] [--json]`: one line per problem, non-zero when any file is bad.

With `--json`, stdout is one JSON document instead: the folder, `ok`, the good targets'
names and every problem as {file, field, expected}.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hyperloom_assets.core.config.hosts import hosts_file, load_host_names
from hyperloom_assets.core.config.targets import load_targets, targets_dir


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hyperloom targets", description="Check the target files.")
    sub = p.add_subparsers(dest="action", required=True, help="what to do")
    check = sub.add_parser("check", help="validate every target file of a folder",
                           description="Validate every target file of a folder, and its hosts file.")
    check.add_argument("dir", nargs="?", type=Path, default=None,
                       help="the targets folder (default: $HYPERLOOM_TARGETS_DIR, else ./targets)")
    check.add_argument("--json", action="store_true", help="print one JSON document of the results on stdout")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    folder = args.dir.resolve() if args.dir else targets_dir()
    hosts, host_problems = load_host_names(hosts_file(folder))
    good, problems = load_targets(folder, hosts=hosts)
    everything = host_problems + problems
    if args.json:
        print(json.dumps({"folder": str(folder), "ok": not everything, "targets": sorted(good),
                          "problems": [problem.model_dump() for problem in everything]}, indent=1))
    else:
        for problem in everything:
            print(problem)
        print(f"{len(good)} target(s) ok, {len({p.file for p in problems})} file(s) with problems in {folder}")
    return 1 if everything else 0
