"""Real services for the fleet tiers: a PostgreSQL 15 server and a Redis broker.

Each runs from Debian's packages (`make setup` installs them where missing) in a fresh
temporary folder on a free loopback port, and is stopped on every path. PostgreSQL
refuses to run as root, so as root its files belong to, and its processes run as, the
`postgres` user the package creates.
"""

from __future__ import annotations

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


@dataclass
class Redis:
    process: subprocess.Popen
    folder: Path
    port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        shutil.rmtree(self.folder, ignore_errors=True)


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
