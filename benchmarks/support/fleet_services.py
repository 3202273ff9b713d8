"""Real services for the fleet tiers and benchmarks/fleet.py: PostgreSQL 15, a Redis
broker, and sshd test hosts.

Each runs from Debian's packages (`make setup` installs them where missing) in a fresh
temporary folder on a free loopback port, and is stopped on every path. PostgreSQL
refuses to run as root, so as root its files belong to, and its processes run as, the
`postgres` user the package creates. An sshd host has a throwaway host key, a
throwaway client key and a known_hosts file naming exactly that host key.
"""

from __future__ import annotations

import getpass
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from hyperloom_assets.resources.hosts.preflight import allocate_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _as_postgres() -> dict:
    if os.geteuid() != 0:
        return {}
    user = pwd.getpwnam("postgres")
    return {"user": user.pw_uid, "group": user.pw_gid}


def _missing(path: Path) -> None:
    if not path.exists():
        raise RuntimeError(f"{path} is missing: run `make setup` (it installs Debian's postgresql and redis-server)")


@dataclass
class Postgres:
    folder: Path
    port: int

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A fresh database of its own for one test; its URL."""
        import sqlalchemy as sa

        name = f"t_{uuid.uuid4().hex[:12]}"
        engine = sa.create_engine(self.url().replace("postgresql://", "postgresql+psycopg2://"),
                                  isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
        with engine.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        return self.url(name)

    def stop(self) -> None:
        subprocess.run([str(PG_BIN / "pg_ctl"), "-D", str(self.folder / "data"), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60, **_as_postgres())
        shutil.rmtree(self.folder, ignore_errors=True)


def start_postgres() -> Postgres:
    _missing(PG_BIN / "initdb")
    folder = Path(tempfile.mkdtemp(prefix="hyperloom-pg-"))
    as_postgres = _as_postgres()
    if as_postgres:
        os.chown(folder, as_postgres["user"], as_postgres["group"])
    data, port = folder / "data", allocate_port()
    subprocess.run([str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"],
                   check=True, capture_output=True, timeout=120, **as_postgres)
    server = Postgres(folder=folder, port=port)
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    started = subprocess.run([str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(folder / "server.log"),
                              "-w", "-t", "60", "start"], capture_output=True, text=True, timeout=90, **as_postgres)
    if started.returncode != 0:
        log = (folder / "server.log").read_text() if (folder / "server.log").exists() else ""
        server.stop()
        raise RuntimeError(f"PostgreSQL did not start: {started.stderr}\n{log}")
    return server


def stop_process(process: subprocess.Popen, folder: Path) -> None:
    """TERM, then KILL after 10 s; the service's folder goes with it."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
    shutil.rmtree(folder, ignore_errors=True)


@dataclass
class Redis:
    process: subprocess.Popen
    folder: Path
    port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        stop_process(self.process, self.folder)


def start_redis() -> Redis:
    binary = Path(shutil.which("redis-server") or "/usr/bin/redis-server")
    _missing(binary)
    folder, port = Path(tempfile.mkdtemp(prefix="hyperloom-redis-")), allocate_port()
    process = subprocess.Popen([str(binary), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--dir", str(folder), "--logfile", str(folder / "redis.log")],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    redis = Redis(process=process, folder=folder, port=port)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return redis
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.1)
    redis.stop()
    raise RuntimeError(f"redis-server did not answer PING on port {port}")


@dataclass
class Sshd:
    process: subprocess.Popen
    folder: Path
    port: int
    client_key: Path
    known_hosts: Path

    def host_entry(self, workdir: Path, python: str, **extra) -> dict:
        """This sshd as a hosts.yaml entry: this machine over loopback, with its own workdir."""
        return {"kind": "ssh", "address": "127.0.0.1", "port": self.port, "user": getpass.getuser(),
                "identity_file": str(self.client_key), "known_hosts": str(self.known_hosts),
                "python": python, "workdir": str(workdir), "connect_timeout_s": 5, **extra}

    def stop(self) -> None:
        stop_process(self.process, self.folder)


def keypair(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "hyperloom-test", "-f", str(path)],
                   check=True, capture_output=True, timeout=30)
    return path


SSHD_CONFIG = """\
Port {port}
ListenAddress 127.0.0.1
HostKey {folder}/host_key
AuthorizedKeysFile {folder}/authorized_keys
PidFile {folder}/sshd.pid
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
LogLevel ERROR
MaxStartups 200
MaxSessions 100
"""


def start_sshd() -> Sshd:
    binary = Path("/usr/sbin/sshd")
    _missing(binary)
    folder, port = Path(tempfile.mkdtemp(prefix="hyperloom-sshd-")), allocate_port()
    host_key, client_key = keypair(folder / "host_key"), keypair(folder / "client_key")
    (folder / "authorized_keys").write_text(Path(f"{client_key}.pub").read_text())
    key_type, key = Path(f"{host_key}.pub").read_text().split()[:2]
    known_hosts = folder / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {key_type} {key}\n")
    (folder / "sshd_config").write_text(SSHD_CONFIG.format(port=port, folder=folder))
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation folder
    process = subprocess.Popen([str(binary), "-D", "-e", "-f", str(folder / "sshd_config")],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=open(folder / "sshd.log", "wb"))
    sshd = Sshd(process=process, folder=folder, port=port, client_key=client_key, known_hosts=known_hosts)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                if conn.recv(8).startswith(b"SSH-"):
                    return sshd
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.1)
    log = (folder / "sshd.log").read_text(errors="replace")
    sshd.stop()
    raise RuntimeError(f"sshd did not come up on port {port}: {log}")
