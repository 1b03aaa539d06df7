"""Real processes on one database: API servers, roles and workers, each
started, paused, SIGKILLed and restarted by name. The benchmark, the soak,
the stress run and the multi-process tests (``tests/procs/stack.py``) all
run the server through it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import environ
import httpx
import psycopg
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


def inherited_env() -> dict[str, str]:
    """This process's environment for a process it starts on another
    database, less the metrics directory this process's settings chose for
    its own (and exported): the started process chooses its database's
    (nodeflow/settings.py) unless its caller names one."""
    return {key: value for key, value in os.environ.items() if key != "PROMETHEUS_MULTIPROC_DIR"}


def live_database_url() -> str:
    """The URL of the database this process's connection uses (in a test,
    the test database), for the processes it starts."""
    settings = connection.settings_dict
    if connection.vendor == "postgresql":
        host, port = settings["HOST"] or "127.0.0.1", settings["PORT"] or 5432
        user = quote(settings["USER"] or "postgres", safe="")
        password = f":{quote(settings['PASSWORD'], safe='')}" if settings.get("PASSWORD") else ""
        return f"postgres://{user}{password}@{host}:{port}/{settings['NAME']}"
    return f"sqlite:///{settings['NAME']}"


def with_database(url: str, name: str) -> str:
    """``url`` with its database replaced by ``name`` (same server and user)."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def fresh_database(admin_url: str, name: str) -> None:
    """A throw-away database, empty: dropped first (with its metrics
    directory, ``drop_database``) if an earlier run left it."""
    drop_database(admin_url, name)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(admin_url: str, name: str) -> None:
    """Drop a throw-away database and the metrics directory its processes
    filled (nodeflow/settings.py: one per database under var/prometheus/,
    which nothing else would empty)."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    shutil.rmtree(metrics_dir(with_database(admin_url, name)), ignore_errors=True)


def metrics_dir(database_url: str) -> str:
    """The metrics directory a process started on ``database_url`` uses when
    ``PROMETHEUS_MULTIPROC_DIR`` is unset (``inherited_env``)."""
    from nodeflow.settings import metrics_dir_for

    return metrics_dir_for(environ.Env.db_url_config(database_url))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Longer than the longest long-poll (30 s), so a stop lets every poll answer;
# it bounds the stop of a worker that got SIGTERM while still loading the
# application, which granian otherwise waits for forever (docs/deployment.md).
GRANIAN_KILL_TIMEOUT_S = 35


def granian_command(
    port: int, *, workers: int, threads: int, keep_alive: bool = True, kill_timeout_s: int = GRANIAN_KILL_TIMEOUT_S
) -> list[str]:
    """granian serving ``nodeflow.wsgi`` on loopback (docs/deployment.md's
    command, with the benchmark's sizes)."""
    return [
        str(Path(PYTHON).parent / "granian"),
        "--interface",
        "wsgi",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--blocking-threads",
        str(threads),
        "--respawn-failed-workers",
        "--workers-kill-timeout",
        str(kill_timeout_s),
        "--no-ws",
        "--log-level",
        "warning",
        *([] if keep_alive else ["--no-http1-keep-alive"]),
        "nodeflow.wsgi:application",
    ]


class Stack:
    """Processes by name. Each runs with ``PGAPPNAME`` set to its name, so
    its database sessions carry it (``pg_stat_activity``, connection logs)."""

    def __init__(self, database_url: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **inherited_env(),
            "DATABASE_URL": database_url,
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.commands: dict[str, list[str]] = {}
        self.processes: dict[str, subprocess.Popen] = {}
        self.started_at: dict[str, float] = {}  # wall-clock time of each process's last start
        self.api_urls: dict[str, str] = {}
        self.logdir = Path(tempfile.mkdtemp(prefix="nodeflow-procs-"))
        self.kills = 0

    def manage(self, *args: str) -> str:
        """Run a ``manage.py`` command on the stack's database to its end; its output."""
        done = subprocess.run(
            [PYTHON, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, check=True
        )
        return done.stdout

    def add(self, name: str, args: list[str]) -> None:
        """Start ``args`` as ``name``; adding a name again replaces its command."""
        self.commands[name] = args
        self.start(name)

    def add_api(self, name: str = "api", port: int | None = None) -> str:
        """An API process on ``port`` (default: the stack's own); its URL."""
        port = port or self.port
        self.api_urls[name] = f"http://127.0.0.1:{port}"
        self.add(name, [PYTHON, "manage.py", "nodeflow_run", "--addr", f"127.0.0.1:{port}", "--no-roles"])
        return self.api_urls[name]

    def add_gunicorn(
        self, name: str, port: int, *, workers: int = 2, threads: int = 8, keep_alive_s: int | None = None
    ) -> str:
        """An API served by gunicorn (gthread), the other server docs/deployment.md runs; its URL.
        ``kill`` takes the master and its workers (one process group).
        ``keep_alive_s`` is gunicorn's ``--keep-alive`` (None: its default)."""
        self.api_urls[name] = f"http://127.0.0.1:{port}"
        keep_alive = [] if keep_alive_s is None else ["--keep-alive", str(keep_alive_s)]
        self.add(
            name,
            [
                str(Path(PYTHON).parent / "gunicorn"),
                "nodeflow.wsgi",
                "-b",
                f"127.0.0.1:{port}",
                "-k",
                "gthread",
                "-w",
                str(workers),
                "--threads",
                str(threads),
                "--log-level",
                "warning",
                *keep_alive,
            ],
        )
        return self.api_urls[name]

    def add_granian(self, name: str, port: int, *, workers: int = 2, threads: int = 8, keep_alive: bool = True) -> str:
        """An API served by granian (WSGI, ``workers`` processes of
        ``threads`` blocking threads each), as docs/deployment.md runs it;
        its URL. ``kill`` takes the master and its workers (one process
        group). ``keep_alive=False``: a connection per request."""
        self.api_urls[name] = f"http://127.0.0.1:{port}"
        self.add(name, granian_command(port, workers=workers, threads=threads, keep_alive=keep_alive))
        return self.api_urls[name]

    def add_role(self, name: str, command: str) -> None:
        self.add(name, [PYTHON, "manage.py", command])

    def start(self, name: str) -> None:
        log = open(self.logdir / f"{name}.log", "a")  # noqa: SIM115 - closed with the process
        env = {**self.env, "PGAPPNAME": name}
        # A session (process group) of its own: a kill takes its children too (a server's workers).
        self.processes[name] = subprocess.Popen(
            self.commands[name], cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True
        )
        self.started_at[name] = time.time()

    def pid(self, name: str) -> int:
        return self.processes[name].pid

    def pause(self, name: str) -> None:
        """SIGSTOP: the process holds what it holds and does nothing."""
        self.processes[name].send_signal(signal.SIGSTOP)

    def resume(self, name: str) -> None:
        self.processes[name].send_signal(signal.SIGCONT)

    def kill(self, name: str) -> None:
        """SIGKILL the process and every process of its group."""
        process = self.processes[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        self.kills += 1

    def sessions_ended(self, *names: str, timeout_s: float = 30) -> None:
        """Wait until no PostgreSQL session of the processes ``names`` is
        left. A killed process's session ends once PostgreSQL has finished
        what it had sent (a ``COMMIT`` already on its way still commits),
        so what is read after this is all the process will ever write. On
        SQLite a killed process has no session: what it committed is there."""
        url = self.env["DATABASE_URL"]
        if not url.startswith(("postgres://", "postgresql://")):
            return
        import psycopg

        deadline = time.monotonic() + timeout_s
        with psycopg.connect(url, autocommit=True) as watcher:
            left = "SELECT 1 FROM pg_stat_activity WHERE application_name = ANY(%s)"
            while watcher.execute(left, [list(names)]).fetchone():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"sessions of {', '.join(names)} still open after {timeout_s} s")
                time.sleep(0.02)

    def restart(self, name: str) -> None:
        self.kill(name)
        self.start(name)

    def wait_for_api(self, timeout_s: float = 30, url: str | None = None) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url or self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the API did not come up; logs in {self.logdir}")

    def stop(self) -> None:
        """SIGTERM every process still running, SIGKILL whatever has not
        exited 10 s later. Processes added again afterwards start anew."""
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)  # a paused process could not act on SIGTERM
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def logs(self) -> str:
        return "\n".join(f"== {path.name}\n{path.read_text()[-3000:]}" for path in sorted(self.logdir.glob("*.log")))
