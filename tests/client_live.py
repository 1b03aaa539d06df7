"""A live server for the application client's tests (tests/test_app_client.py,
tests/test_client_cli.py): ``manage.py nodeflow_run`` in its own process on
a loopback port of 18200–18299, on a database of its own (a SQLite file in
a temporary directory, or, when the suite runs on PostgreSQL, a database
``nodeflow_client_live_<tag>`` created for it and dropped afterwards),
with keys made by ``manage.py nodeflow_apikey`` as a user makes them.

The tests talk to it only over HTTP, as an application does: no
``django_db`` mark, nothing read from the test database."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
PORTS = range(18200, 18300)
START_TIMEOUT_S = 60.0


def free_port() -> int:
    """A port of PORTS nothing listens on (tried from a random start: other
    suites on this machine use the range too)."""
    offset = random.randrange(len(PORTS))
    for index in range(len(PORTS)):
        port = PORTS[(offset + index) % len(PORTS)]
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


def _postgres_url() -> str | None:
    url = os.environ.get("DATABASE_URL", "")
    return url if url.startswith(("postgres://", "postgresql://")) else None


def _postgres(url: str, statement: str) -> None:
    import psycopg

    parts = urlsplit(url)
    admin = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(statement)


class LiveServer:
    def __init__(self, tag: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tmp = Path(tempfile.mkdtemp(prefix=f"nodeflow-client-{tag}-"))
        base = _postgres_url()
        if base is not None:
            # One per xdist worker too: a module's tests may run on both
            # workers, each with a server of its own.
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            self.database = f"nodeflow_client_live_{tag}_{worker}"
            self.database_url = urlunsplit(urlsplit(base)._replace(path=f"/{self.database}"))
        else:
            self.database = ""
            self.database_url = f"sqlite:///{self.tmp / 'live.sqlite3'}"
        self.env = {**os.environ, "DATABASE_URL": self.database_url, "LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1"}
        self.env.update(env or {})
        self.process: subprocess.Popen | None = None
        self.log = self.tmp / "server.log"
        self.keys: dict[str, str] = {}

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [PYTHON, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout

    def key(self, role: str) -> str:
        """A key of ``role`` in the default namespace (made once)."""
        if role not in self.keys:
            out = self.manage("nodeflow_apikey", "create", "--namespace", "default", "--role", role)
            self.keys[role] = out.strip().splitlines()[-1]
        return self.keys[role]

    def start(self) -> None:
        if self.database:
            _postgres(self.database_url, f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
            _postgres(self.database_url, f'CREATE DATABASE "{self.database}"')
        self.manage("migrate", "--noinput")
        self.key("admin")
        log = open(self.log, "w")  # noqa: SIM115 - the server's output for as long as it runs; closed in stop()
        self.process = subprocess.Popen(
            [PYTHON, "manage.py", "nodeflow_run", "--addr", f"127.0.0.1:{self.port}", "--threads", "8"],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._log_file = log
        self._wait_until_up()

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited ({self.process.returncode}):\n{self.logs()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"the server did not come up within {START_TIMEOUT_S} s:\n{self.logs()}")

    def logs(self) -> str:
        return self.log.read_text()[-5000:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.process is not None:
            self._log_file.close()
        if self.database:
            _postgres(self.database_url, f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
        shutil.rmtree(self.tmp, ignore_errors=True)
