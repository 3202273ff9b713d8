"""The `hyperloom` console script: everything that is not a Dagster run.

Each subcommand lives in its own module, imported only when called, so
`hyperloom sim-serve` starts without importing Dagster or the benchmark client.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple


class Command(NamedTuple):
    module: str
    run: str  # takes the remaining argv, returns an exit code
    parser: str  # builds the command's argparse parser (its --help, and the help-text test)
    about: str
    # Its run also takes `store_rows`, the result store's measurement rows of a target: a pure
    # module (the sim's) reads no store, so this layer reads it for the command.
    reads_store: bool = False


COMMANDS: dict[str, Command] = {
    "tiny-model": Command("hyperloom_assets.core.tiny_model", "main", "parser",
                          "write the tiny Llama (config, weights, tokenizer) to DIR"),
    "targets": Command("hyperloom_assets.cli.targets", "main", "parser", "targets check [DIR]: validate every target file"),
    "bench": Command("hyperloom_assets.cli.bench", "bench_main", "bench_parser", "benchmark any OpenAI-compatible server"),
    "agentic-trace": Command("hyperloom_assets.cli.bench", "trace_main", "trace_parser", "write a synthetic agentic trace"),
    "framework-tree": Command("hyperloom_assets.cli.framework_tree", "main", "parser",
                              "init --engine E DIR: a git tree of the installed engine to patch"),
    "accuracy": Command("hyperloom_assets.cli.accuracy", "main", "parser",
                        "compare two servers' greedy outputs (the accuracy gate)"),
    "sim-serve": Command("hyperloom_assets.sim.cli", "serve_main", "serve_parser", "serve the sim engine over HTTP"),
    "sim-predict": Command("hyperloom_assets.sim.cli", "predict_main", "predict_parser",
                           "predict a configuration's Measurement"),
    "sim-calibrate": Command("hyperloom_assets.sim.calibrate_cli", "main", "parser",
                             "--gpu NAME --out FILE: fit the sim's efficiency parameters to measurements",
                             reads_store=True),
    "instance-config": Command("hyperloom_assets.cli.instance_config", "main", "parser",
                               "[DAGSTER_HOME]: write dagster.yaml for this environment"),
    "host-agent": Command("hyperloom_assets.resources.hosts.agent", "main", "parser",
                          "OP: a lifecycle step on this host (run over ssh)"),
    "hosts": Command("hyperloom_assets.cli.hosts", "main", "parser", "check [NAME] | bootstrap NAME: the hosts of hosts.yaml"),
    "recover": Command("hyperloom_assets.cli.recover", "main", "parser",
                       "HOST [--confirm-scope-gone]: free a host whose lease holder vanished"),
}


def version() -> str:
    try:
        return importlib.metadata.version("hyperloom-assets")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def parser() -> argparse.ArgumentParser:
    epilog = "commands:\n" + "\n".join(f"  {name:<16} {command.about}" for name, command in COMMANDS.items())
    p = argparse.ArgumentParser(prog="hyperloom", description="hyperloom-assets' commands: all but the Dagster runs.",
                                epilog=epilog,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"hyperloom {version()}",
                   help="print the installed package's version and exit")
    p.add_argument("command", choices=list(COMMANDS), metavar="COMMAND", help="one of the commands below")
    rest = p.add_argument("args", nargs=argparse.REMAINDER, help="the command's own arguments (hyperloom COMMAND --help)")
    rest.required = False  # argparse requires a REMAINDER positional: a bare `hyperloom` would name it missing too
    return p


def command_parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command's parser (importing every command's module): what --help shows for each."""
    for name, command in COMMANDS.items():
        yield name, getattr(importlib.import_module(command.module), command.parser)()


def store_rows(target: str) -> list[dict[str, Any]]:
    """The measurement rows of a target in the store every command uses (the fleet's Postgres
    where HYPERLOOM_POSTGRES_URL is set, else SQLite under DAGSTER_HOME)."""
    from hyperloom_assets.resources.store.results import ResultStore

    return ResultStore().measurements(target)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)  # usage on stderr, exit 2, on any misuse
    command = COMMANDS[args.command]
    run = getattr(importlib.import_module(command.module), command.run)
    return int((run(args.args, store_rows=store_rows) if command.reads_store else run(args.args)) or 0)
