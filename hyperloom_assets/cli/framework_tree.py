"""`hyperloom framework-tree init --engine E DIR [--python PY]`: a patchable tree of the installed engine."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hyperloom_assets.core.engines import engine_for, engine_names


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hyperloom framework-tree", description="A patchable git tree of an installed engine.")
    commands = p.add_subparsers(dest="command", required=True, help="what to do")
    init = commands.add_parser("init", help="make DIR a git repository of the engine installed in the venv")
    init.add_argument("--engine", required=True, choices=engine_names(), help="the engine whose installed code to copy")
    init.add_argument("--python", type=Path, default=None, help="the serving interpreter (default: this one)")
    init.add_argument("dir", type=Path, help="the folder to make the tree in")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    from hyperloom_assets.resources.trees.init import TreeInitError, init_tree

    try:
        made = init_tree(engine_for(args.engine), args.dir, args.python)
    except TreeInitError as exc:
        print(f"hyperloom framework-tree init: {exc}", file=sys.stderr)
        return 1
    print(f"{made.tree}: {made.identity or args.engine} from {made.package_dir}, {made.files} files "
          f"({made.linked} compiled extensions linked), committed as {made.commit[:12]}")
    return 0
