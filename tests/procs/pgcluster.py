"""A private PostgreSQL cluster for tests that restart the database.

The shared server is used by other test runs, so a test that restarts
PostgreSQL gets a cluster of its own: ``initdb`` into a temporary directory,
started with ``pg_ctl`` on a free loopback port (fsync off: nothing here
must survive a machine crash, only the server's), restarted and removed by the test. As root,
the binaries run as the ``postgres`` user (``initdb`` refuses root).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg

from tests.procs.stack import free_port
from tools.stack import metrics_dir

PG_ROOT = Path("/usr/lib/postgresql")
OWNER = "postgres"


def find_bindir() -> Path | None:
    """The newest installed server's bin directory, or None."""
    candidates = [path / "bin" for path in PG_ROOT.glob("*") if (path / "bin" / "initdb").exists()]
    candidates.sort(key=lambda path: int(re.sub(r"\D", "", path.parent.name) or 0))
    return candidates[-1] if candidates else None


def missing_reason() -> str | None:
    """Why a private cluster cannot be made here, or None when it can."""
    if find_bindir() is None:
        return f"no PostgreSQL server binaries (initdb, pg_ctl) under {PG_ROOT}"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: initdb refuses to run as root"
    return None


class PrivateCluster:
    def __init__(self, *, settings: dict[str, str] | None = None) -> None:
        self.bindir = find_bindir()
        if self.bindir is None:
            raise RuntimeError(missing_reason())
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="nodeflow-pg-"))
        self.databases: list[str] = []  # made by create_database: their metrics directories go with the cluster
        self.data = self.root / "data"
        self.logfile = self.root / "server.log"
        self.settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.root),
            # Off: what only a machine crash could lose. synchronous_commit stays
            # on: an acknowledged commit must survive the server's own crash.
            "fsync": "off",
            "full_page_writes": "off",
            "max_connections": "200",
            "log_connections": "on",
            **(settings or {}),
        }
        if os.geteuid() == 0:
            shutil.chown(self.root, OWNER, OWNER)

    def _run(self, *args: str) -> str:
        prefix = ["runuser", "-u", OWNER, "--"] if os.geteuid() == 0 else []
        done = subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=120, cwd=self.root)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {done.stdout}{done.stderr}")
        return done.stdout

    def _options(self) -> str:
        return " ".join(f"-c {name}={value}" for name, value in self.settings.items())

    def start(self) -> None:
        """initdb (first time) and start; returns once it accepts connections."""
        if not self.data.exists():
            self._run(
                str(self.bindir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                OWNER,
                "-A",
                "trust",
                "-N",
                "-E",
                "UTF8",
                "--no-instructions",
            )
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.logfile),
            "-o",
            self._options(),
            "-w",
            "start",
        )

    def restart(self, mode: str = "immediate") -> None:
        """Stop (``immediate``: as a crash, every backend killed; ``fast``:
        clients disconnected) and start again; returns once it accepts connections."""
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-m",
            mode,
            "-o",
            self._options(),
            "-l",
            str(self.logfile),
            "-w",
            "restart",
        )

    def stop(self) -> None:
        if self.data.exists():
            with contextlib.suppress(RuntimeError):  # not running
                self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
        for name in self.databases:  # on a port of this run's, so no later run would reuse them
            shutil.rmtree(metrics_dir(self.url(name)), ignore_errors=True)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgres://{OWNER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.databases.append(name)
        return self.url(name)

    def log(self) -> str:
        return self.logfile.read_text(errors="replace") if self.logfile.exists() else ""
