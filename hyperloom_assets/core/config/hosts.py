"""The hosts file: every serving host by name, validated with the project's own models. Pure code.

`hosts.yaml` (`HYPERLOOM_HOSTS_FILE`; by default beside the targets folder, at the repo
root) maps a host's name to its fields. `local` (this machine) always exists. Every
problem names the file, the field and what was expected, like a target file's; a bad
hosts file is an error before any launch, because a run cannot know where to serve.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import Field, TypeAdapter, ValidationError, ValidationInfo, field_validator

from hyperloom_assets.core.config.files import ConfigFileError, load_config_yaml
from hyperloom_assets.core.config.names import SAFE_NAME_RULE, is_safe_name
from hyperloom_assets.core.config.host_names import HostNames
from hyperloom_assets.core.config.problems import TargetProblem, at_most
from hyperloom_assets.core.config.targets import targets_dir
from hyperloom_assets.core.models import Frozen

LOCAL = "local"
HOSTS_FILE_ENV = "HYPERLOOM_HOSTS_FILE"
# What ssh is handed as its destination and login: a DNS name (RFC 1123 labels) or an IP address,
# and a POSIX-ish user name. Neither may start with `-`, which ssh would read as an option.
# `_` is not RFC 1123, but ssh and many private networks take it.
DNS_NAME_PATTERN = re.compile(r"(?=.{1,253}\Z)[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
                              r"(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*\.?")
SSH_USER_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
# Which CPUs the benchmark client gets on a CPU-only host (resources/hosts/cpu_pinning.py).
CLIENT_CPUS_PATTERN = r"^(auto|off|\d+(,\d+)*)$"
# The host's accelerators by index, as its GPU tool numbers them (core/fleet/slots.py). Unset:
# the host is one slot, held whole by one run. On a CPU-only host they are CPU sets only.
Gpus = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


def _unique(gpus: list[int] | None) -> list[int] | None:
    if gpus is not None and len(set(gpus)) != len(gpus):
        raise ValueError("each device once")
    return gpus


def _ssh_address(address: str) -> str:
    ip, _, zone = address.partition("%")  # an IPv6 zone (`fe80::1%eth0`) is an interface name
    try:
        ipaddress.ip_address(ip)
        if not zone or (":" in ip and re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", zone)):
            return address
    except ValueError:
        pass
    if DNS_NAME_PATTERN.fullmatch(address) is None:
        raise ValueError("a DNS name (labels of letters, digits, '-' or '_', joined by '.', none starting with '-') "
                         "or an IP address")
    return address


def _ssh_user(user: str | None) -> str | None:
    if user is not None and SSH_USER_PATTERN.fullmatch(user) is None:
        raise ValueError("a user name of letters, digits, '_', '.' or '-', not starting with '-' or '.' (at most 64)")
    return user


def _slots_own_cpus(client_cpus: str, info: ValidationInfo) -> str:
    """With gpus declared each slot gets its own CPUs, so a host-wide list of client CPUs cannot hold."""
    if info.data.get("gpus") is not None and client_cpus not in ("auto", "off"):
        raise ValueError("auto or off when gpus is set (each slot gets its own CPUs)")
    return client_cpus


class LocalHostConfig(Frozen):
    """This machine (or a stand-in for one: every local host serves here)."""

    kind: Literal["local"]
    python: Path | None = None  # the interpreter with the engine; default: this venv's
    gpus: Gpus | None = None  # none declared: a CPU-only host, or one run holds every GPU
    # "auto" (CPU-only hosts with 3+ CPUs: the client on the last CPU, the server on the rest), "off", or "2,3"
    client_cpus: str = Field(default="auto", pattern=CLIENT_CPUS_PATTERN)

    _gpus_unique = field_validator("gpus")(_unique)
    _slot_cpus = field_validator("client_cpus")(_slots_own_cpus)


class SshHostConfig(Frozen):
    """A machine reached with the system `ssh` (BatchMode, strict host keys)."""

    kind: Literal["ssh"]
    address: str = Field(min_length=1)
    port: int = Field(default=22, gt=0, lt=65536)
    user: str | None = None
    identity_file: Path
    known_hosts: Path
    python: str = Field(min_length=1)  # on the host: the interpreter that has the engine
    workdir: str = Field(min_length=1)  # on the host: pidfiles, logs, request records
    connect_timeout_s: float = Field(default=10, gt=0)
    gpus: Gpus | None = None  # as LocalHostConfig's
    client_cpus: str = Field(default="auto", pattern=CLIENT_CPUS_PATTERN)  # as LocalHostConfig's

    _gpus_unique = field_validator("gpus")(_unique)
    _slot_cpus = field_validator("client_cpus")(_slots_own_cpus)
    _address = field_validator("address")(_ssh_address)
    _user = field_validator("user")(_ssh_user)


class PoolConfig(Frozen):
    """Several hosts of the file with the same GPU model and engine install, named as one: a run
    takes its slots across them (resources/hosts/fleet.py). Checked against the file in `_pool_problems`."""

    kind: Literal["pool"]
    hosts: list[str] = Field(min_length=2)


ServingHost = Union[LocalHostConfig, SshHostConfig]
HostConfig = Annotated[Union[LocalHostConfig, SshHostConfig, PoolConfig], Field(discriminator="kind")]
_HOST = TypeAdapter(HostConfig)


class HostsError(ValueError):
    """The hosts file (or a name looked up in it) is bad; every problem is named."""

    def __init__(self, problems: list[TargetProblem]):
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


def hosts_file(targets_folder: Path | None = None) -> Path:
    """`HYPERLOOM_HOSTS_FILE`, else `hosts.yaml` beside the targets folder (the repo root)."""
    named = os.environ.get(HOSTS_FILE_ENV)
    if named:
        return Path(named).resolve()
    return (targets_folder or targets_dir()).resolve().parent / "hosts.yaml"


def _problem(file: Path, field: str, expected: str) -> TargetProblem:
    return TargetProblem(file=str(file), field=field, expected=expected)


def _validation_problems(file: Path, name: str, error: ValidationError) -> list[TargetProblem]:
    problems = []
    for item in error.errors():
        loc = [str(part) for part in item["loc"] if str(part) not in ("local", "ssh", "pool")]
        field = ".".join([name, *loc])
        if item["type"] == "missing":
            expected = "a value (required field is missing)"
        elif item["type"] == "extra_forbidden":
            expected = "no such field (unknown field)"
        elif item["type"] in ("union_tag_invalid", "union_tag_not_found"):
            field, expected = f"{name}.kind", f"local, ssh or pool, got {item.get('input', {}).get('kind')!r}"
        else:
            expected = f"{item['msg']}, got {item.get('input')!r}"
        problems.append(_problem(file, field, expected))
    return at_most(problems, str(file), name, total=error.error_count())


def _resolve(path: Path, root: Path) -> Path:
    return path if path.is_absolute() else (root / path).resolve()


def _file_problems(file: Path, name: str, host: SshHostConfig) -> list[TargetProblem]:
    """Key files are read on this machine before any ssh runs, so say what is wrong with them."""
    problems = []
    if not host.identity_file.is_file():
        problems.append(_problem(file, f"{name}.identity_file", f"an existing private key file, {host.identity_file} does not exist"))
    try:
        host.known_hosts.read_bytes()
    except OSError as error:
        problems.append(_problem(file, f"{name}.known_hosts", f"a readable known_hosts file, {host.known_hosts}: "
                                 f"{error.strerror or error}"))
    return problems


def parse_host(file: Path, name: str, raw: object, check_files: bool = True) -> tuple[HostConfig | None, list[TargetProblem]]:
    if not is_safe_name(name):
        return None, [_problem(file, name, f"a host name of {SAFE_NAME_RULE} (the address field holds a DNS name)")]
    if not isinstance(raw, dict):
        return None, [_problem(file, name, f"a mapping of the host's fields, got {type(raw).__name__}")]
    try:
        host = _HOST.validate_python(raw)
    except ValidationError as error:
        return None, _validation_problems(file, name, error)
    if name == LOCAL and host.kind != "local":
        return None, [_problem(file, f"{name}.kind", "local: the name `local` is always this machine")]
    if isinstance(host, SshHostConfig):
        root = file.parent
        host = host.model_copy(update={"identity_file": _resolve(host.identity_file, root),
                                       "known_hosts": _resolve(host.known_hosts, root)})
        problems = _file_problems(file, name, host) if check_files else []
        if problems:
            return None, problems
    elif isinstance(host, LocalHostConfig) and host.python is not None:
        host = host.model_copy(update={"python": _resolve(host.python, file.parent)})
    return host, []


def load_hosts(file: Path, check_files: bool = True) -> tuple[dict[str, HostConfig], list[TargetProblem]]:
    """Every good host by name (`local` always among them) and every problem of the bad ones.

    A missing file means `local` only, unless `HYPERLOOM_HOSTS_FILE` named it.
    """
    hosts: dict[str, HostConfig] = {LOCAL: LocalHostConfig(kind="local")}
    if not file.exists():
        if os.environ.get(HOSTS_FILE_ENV):
            return hosts, [_problem(file, "(file)", f"an existing hosts file ({HOSTS_FILE_ENV} names it)")]
        return hosts, []
    try:
        raw = load_config_yaml(file)
    except ConfigFileError as error:
        return hosts, [_problem(file, "(file)", str(error))]
    if raw is None:
        return hosts, []
    if not isinstance(raw, dict):
        return hosts, [_problem(file, "(file)", f"a mapping of host names to their fields, got {type(raw).__name__}")]
    problems: list[TargetProblem] = []
    for name, fields in raw.items():
        host, found = parse_host(file, str(name), fields, check_files)
        problems += found
        if host is not None:
            hosts[str(name)] = host
    for name, pool in [(name, host) for name, host in hosts.items() if isinstance(host, PoolConfig)]:
        found = _pool_problems(file, name, pool, hosts, problems)
        if found:
            problems += found
            del hosts[name]
    return hosts, problems


def _pool_problems(file: Path, name: str, pool: PoolConfig, hosts: dict[str, HostConfig],
                   problems: list[TargetProblem]) -> list[TargetProblem]:
    """A pool's members are distinct good hosts of the same file, each declaring its gpus (slots are
    what a pool hands out), none of them a pool."""
    found = []
    for at, member in enumerate(pool.hosts):
        field, wrong = f"{name}.hosts.{at}", [f"{p.field}: {p.expected}" for p in problems
                                               if p.field.split(".")[0] == member]
        if member in pool.hosts[:at]:
            found.append(_problem(file, field, f"each host once, got {member!r} again"))
        elif wrong:
            found.append(_problem(file, field, f"a usable host, but {member!r} is bad: {'; '.join(wrong)}"))
        elif member not in hosts:
            found.append(_problem(file, field, f"a host of this file ({', '.join(sorted(serving_hosts(hosts)))}), "
                                               f"got {member!r}"))
        elif isinstance(hosts[member], PoolConfig):
            found.append(_problem(file, field, f"a host, not a pool: {member!r} is a pool (no pool inside a pool)"))
        elif hosts[member].gpus is None:
            found.append(_problem(file, field, f"a host that declares its gpus (a pool hands out slots), "
                                               f"{member!r} declares none"))
    return found


def serving_hosts(hosts: dict[str, HostConfig]) -> dict[str, ServingHost]:
    """The hosts that serve themselves: every entry but the pools."""
    return {name: host for name, host in hosts.items() if not isinstance(host, PoolConfig)}


def member_configs(name: str, hosts: dict[str, HostConfig]) -> list[tuple[str, ServingHost]]:
    """(name, entry) of each host a target naming `name` serves on: a pool's members, else the host."""
    host = hosts[name]
    if isinstance(host, PoolConfig):
        return [(member, hosts[member]) for member in host.hosts]
    return [(name, host)]


def declared_devices(hosts: dict[str, HostConfig]) -> dict[str, list[int]]:
    """Each host that declares its gpus, or pool, by name: its devices per member (a host has one member)."""
    devices = {}
    for name in hosts:
        members = member_configs(name, hosts)
        if all(host.gpus for _, host in members):
            devices[name] = [len(host.gpus) for _, host in members]
    return devices


def host_names(file: Path, hosts: dict[str, HostConfig], problems: list[TargetProblem]) -> HostNames:
    """What a target's `host` is checked against: the good hosts, and what is wrong with the bad."""
    broken = tuple((p.field.split(".")[0], f"{p.field}: {p.expected}") for p in problems if p.field != "(file)")
    gpus = tuple((name, tuple(counts)) for name, counts in declared_devices(hosts).items())
    unreadable = "; ".join(p.expected for p in problems if p.field == "(file)") or None
    return HostNames(file=file, names=frozenset(hosts), broken=broken, gpus=gpus, unreadable=unreadable)


def load_host_names(file: Path) -> tuple[HostNames, list[TargetProblem]]:
    hosts, problems = load_hosts(file)
    return host_names(file, hosts, problems), problems
