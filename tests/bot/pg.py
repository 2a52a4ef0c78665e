"""A throwaway PostgreSQL server for the store tests, from Debian's `postgresql` package.

`initdb` a cluster in a fresh directory, start it with `pg_ctl` on a free loopback port (trust
authentication, no Unix socket outside its directory) and hand out one new database per test.
PostgreSQL refuses to run as root, and CI runs as root: then the cluster runs as the `postgres`
user the Debian package creates (or `nobody`) through `runuser`, in a directory under the system
temporary directory that user can enter (pytest's tmp_path is private to root). Skips, saying why,
only when the server binaries are not installed.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from .world import free_port, wait_for


def server_bindir() -> Path | None:
    """Debian keeps the server binaries in /usr/lib/postgresql/<major>/bin (not on PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                   key=lambda p: int(Path(p).parts[4]) if Path(p).parts[4].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    which = shutil.which("pg_ctl")
    return Path(which).resolve().parent if which else None


def _run_as() -> list[str]:
    if os.geteuid() != 0:
        return []
    for user in ("postgres", "nobody"):
        try:
            pwd.getpwnam(user)
        except KeyError:
            continue
        return ["runuser", "-u", user, "--"]
    pytest.skip("PostgreSQL refuses to run as root and there is no postgres or nobody user")


class PostgresServer:
    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.prefix = _run_as()
        self.dir = Path(tempfile.mkdtemp(prefix="atrex-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        if self.prefix:
            user = self.prefix[2]
            info = pwd.getpwnam(user)
            os.chown(self.dir, info.pw_uid, info.pw_gid)
        self.dir.chmod(0o700)

    def _run(self, *args: str, timeout: float = 120) -> None:
        proc = subprocess.run([*self.prefix, *args], capture_output=True, text=True,
                              timeout=timeout, cwd=self.dir)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed ({proc.returncode}):\n"
                               f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")

    def start(self) -> PostgresServer:
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "atrex",
                  "--auth=trust", "--encoding=UTF8", "--no-sync")
        options = (f"-c listen_addresses=127.0.0.1 -c port={self.port} "
                   f"-c unix_socket_directories={self.dir} -c fsync=off "
                   "-c max_connections=200")
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l",
                  str(self.dir / "server.log"), "-o", options, "-w", "start")
        return self

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                      "-w", "stop", timeout=60)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://atrex@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database; returns its SQLAlchemy URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:16]
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=atrex dbname=postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@pytest.fixture(scope="session")
def postgres_server():
    bindir = server_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not found (Debian: apt-get install postgresql)")
    server = PostgresServer(bindir).start()
    wait_for(lambda: _accepts(server), timeout=30, what="postgres to accept connections")
    yield server
    server.stop()


def _accepts(server: PostgresServer) -> bool:
    import psycopg

    try:
        with psycopg.connect(f"host=127.0.0.1 port={server.port} user=atrex dbname=postgres",
                             connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False
