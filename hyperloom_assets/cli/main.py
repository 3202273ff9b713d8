"""The `hyperloom` console script: everything that is not a Dagster run.

Each subcommand lives in its own module, imported only when called, so
`hyperloom sim-serve` starts without importing Dagster or the benchmark client.
"""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module, function taking the remaining argv and returning an exit code)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "tiny-model": ("hyperloom_assets.core.tiny_model", "main", "write the tiny Llama (config, weights, tokenizer) to DIR"),
    "targets": ("hyperloom_assets.cli.targets", "main", "targets check [DIR]: validate every target file"),
    "bench": ("hyperloom_assets.cli.bench", "bench_main", "benchmark any OpenAI-compatible server"),
    "agentic-trace": ("hyperloom_assets.cli.bench", "trace_main", "write a synthetic agentic trace"),
    "framework-tree": ("hyperloom_assets.cli.framework_tree", "main",
                       "init --engine E DIR: a git tree of the installed engine to patch"),
    "accuracy": ("hyperloom_assets.cli.accuracy", "main", "compare two servers' greedy outputs (the accuracy gate)"),
    "sim-serve": ("hyperloom_assets.sim.cli", "serve_main", "serve the sim engine over HTTP"),
    "sim-predict": ("hyperloom_assets.sim.cli", "predict_main", "predict a configuration's Measurement"),
    "instance-config": ("hyperloom_assets.cli.instance_config", "main", "[DAGSTER_HOME]: write dagster.yaml for this environment"),
    "host-agent": ("hyperloom_assets.resources.hosts.agent", "main", "OP: a lifecycle step on this host (run over ssh)"),
    "hosts": ("hyperloom_assets.cli.hosts", "main", "check [NAME] | bootstrap NAME: the hosts of hosts.yaml"),
    "recover": ("hyperloom_assets.cli.recover", "main", "HOST [--confirm-scope-gone]: free a host whose lease holder vanished"),
}


def _usage() -> str:
    lines = ["usage: hyperloom COMMAND [ARGS]", "", "commands:"]
    lines += [f"  {name:<14} {about}" for name, (_, _, about) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    if args[0] not in COMMANDS:
        print(f"hyperloom: unknown command {args[0]!r}\n{_usage()}", file=sys.stderr)
        return 2
    module, function, _ = COMMANDS[args[0]]
    return int(getattr(importlib.import_module(module), function)(args[1:]) or 0)

