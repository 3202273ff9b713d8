"""`hyperloom hosts check [NAME] [--json]` and `hyperloom hosts bootstrap NAME`.

`check` connects to each host of the hosts file (or the one named) and prints what it
finds there: the engines its interpreter has, the GPUs it sees and their memory in
use, a free port, and its clock's skew from this machine's; with `--json`, one JSON
document on stdout instead (`ok`, the hosts file's problems, and per host `ok` with its
facts or its error). `bootstrap` installs this project's client (the host agent and the
benchmark client) into an SSH host's `python`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from hyperloom_assets.core.config.hosts import hosts_file, load_hosts, member_configs, serving_hosts
from hyperloom_assets.core.measurement.serving import ServerError
from hyperloom_assets.resources.catalog import TargetCatalog
from hyperloom_assets.resources.hosts.fleet import HostFleet
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.hosts.ssh import SshHost
from hyperloom_assets.resources.store.results import ResultStore

REPO = Path(__file__).resolve().parents[2]
# What the host agent and the benchmark client import, at this machine's versions.
CLIENT_DISTRIBUTIONS = ("pydantic", "psutil", "aiohttp", "PyYAML", "numpy", "scipy", "packaging")
# Prints the checkout a python has this project installed editable from, else nothing.
EDITABLE_FROM = ("import importlib.metadata as m, json\n"
                 "try:\n    text = m.distribution('hyperloom-assets').read_text('direct_url.json') or '{}'\n"
                 "except m.PackageNotFoundError:\n    text = '{}'\n"
                 "url = json.loads(text)\n"
                 "print(url.get('url', '') if url.get('dir_info', {}).get('editable') else '')")
WRITE_STDIN_TO = ("import pathlib, sys; p = pathlib.Path(sys.argv[1]); p.parent.mkdir(parents=True, exist_ok=True); "
                  "p.write_bytes(sys.stdin.buffer.read())")


def describe(name: str, host) -> str:
    if isinstance(host, SshHost):
        c = host.ssh()
        return f"{name} (ssh {c.user + '@' if c.user else ''}{c.address}:{c.port}, python {c.python})"
    return f"{name} (this machine, python {host.python or sys.executable})"


def facts_lines(facts: dict) -> list[str]:
    engines = "; ".join(f"{engine}: {found or 'not installed'}" for engine, found in facts["engines"].items())
    if facts["gpus"]:
        gpus = "; ".join(f"{g['index']}: {g['name']} {g['used_mib']:.0f} of {g['total_mib']:.0f} MiB in use"
                         for g in facts["gpus"])
    else:
        gpus = f"none ({facts['gpu_error'] or 'no GPU tool'})"
    return [f"  engines: {engines}", f"  GPUs ({facts['gpu_tool'] or '-'}): {gpus}",
            f"  free port: {facts['free_port']}", f"  clock skew: {facts['clock_skew_s']:+.3f} s"]


def host_result(fleet: HostFleet, name: str) -> dict:
    """{"name", "ok", and "about" with "facts", or "error"}: one host's check."""
    try:
        host = fleet.host(name)
        return {"name": name, "ok": True, "about": describe(name, host), "facts": host.facts()}
    except (ServerError, ValueError, RuntimeError) as error:
        return {"name": name, "ok": False, "error": str(error)}


def print_result(result: dict) -> None:
    if not result["ok"]:
        print(f"{result['name']}: unavailable: {result['error']}")
        return
    print(f"{result['about']}: ok")
    print("\n".join(facts_lines(result["facts"])))


def check(fleet: HostFleet, names: list[str], problems: list, as_json: bool) -> int:
    results = []
    for name in names:
        results.append(host_result(fleet, name))
        if not as_json:
            print_result(results[-1])
    ok = not problems and all(result["ok"] for result in results)
    if as_json:
        print(json.dumps({"ok": ok, "problems": [problem.model_dump() for problem in problems], "hosts": results},
                         indent=1))
    return 0 if ok else 1


def _wheel() -> tuple[str, bytes]:
    """This project as a wheel: its file name and bytes (built in a folder removed after)."""
    with tempfile.TemporaryDirectory(prefix="hyperloom-wheel-") as out:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                        "-w", out, str(REPO)], check=True, timeout=600)
        wheel = next(Path(out).glob("hyperloom_assets-*.whl"))
        return wheel.name, wheel.read_bytes()


def bootstrap(host: SshHost) -> int:
    """Copy this project's wheel to the host and install it with the client's dependencies."""
    config, transport = host.ssh(), host.transport()
    probe = transport.run([config.python, "-c", EDITABLE_FROM], b"", timeout_s=120)
    checkout = probe.stdout.decode(errors="replace").strip() if probe.returncode == 0 else ""
    if checkout:
        # A host on this machine sharing a development venv: a wheel would replace the
        # checkout's editable install, and later edits would silently stop being served.
        print(f"{host.name}: {config.python} has this project installed editable from {checkout}; "
              "bootstrap leaves it, and that checkout's code is what the host runs")
        print("\n".join(facts_lines(host.facts())))
        return 0
    wheel_name, wheel = _wheel()
    remote = f"{config.workdir}/bootstrap/{wheel_name}"
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in CLIENT_DISTRIBUTIONS]
    steps = [([config.python, "-c", WRITE_STDIN_TO, remote], wheel),
             ([config.python, "-m", "pip", "install", "--quiet", *pins], b""),
             ([config.python, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", remote], b"")]
    for argv, stdin in steps:
        done = transport.run(argv, stdin, timeout_s=1800)
        if done.returncode != 0:
            print(f"{host.name}: {argv[1:4]} failed:\n{done.stderr.decode(errors='replace')[-2000:]}", file=sys.stderr)
            return 1
    print(f"{host.name}: installed {wheel_name} and {', '.join(pins)} into {config.python}")
    print("\n".join(facts_lines(host.facts())))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hyperloom hosts", description="Check or bootstrap the hosts of the hosts file.")
    sub = p.add_subparsers(dest="action", required=True, help="what to do")
    check_cmd = sub.add_parser("check", help="connect to each host and say what it has")
    check_cmd.add_argument("name", nargs="?", help="only this host (default: every host of the hosts file)")
    check_cmd.add_argument("--json", action="store_true", help="print one JSON document of the results on stdout")
    bootstrap_cmd = sub.add_parser("bootstrap", help="install this project's client on an SSH host")
    bootstrap_cmd.add_argument("name", help="the SSH host of the hosts file to install on")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    catalog = TargetCatalog()
    file = hosts_file(catalog.path())
    hosts, problems = load_hosts(file)
    as_json = args.action == "check" and args.json
    if not as_json:
        for problem in problems:
            print(problem)
    fleet = HostFleet(local=LocalHost(check_foreign_processes=False), catalog=catalog, store=ResultStore())
    if args.action == "check":
        # A pool is checked through its members: each is a host of its own.
        named = [member for member, _ in member_configs(args.name, hosts)] if args.name in hosts else [args.name]
        return check(fleet, named if args.name else sorted(serving_hosts(hosts)), problems, as_json)
    host = fleet.host(args.name)
    if not isinstance(host, SshHost):
        print(f"{args.name} is this machine: `make setup` installs the project here", file=sys.stderr)
        return 2
    try:
        return bootstrap(host)
    except (ServerError, RuntimeError) as error:
        print(f"{args.name}: unavailable: {error}", file=sys.stderr)
        return 1
