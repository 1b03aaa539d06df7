"""Real processes for multi-process tests: the API, deciders, sweepers and
workers, each started, SIGKILLed and restarted by name."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def live_database_url() -> str:
    """The URL of the database this test runs on (the test database)."""
    settings = connection.settings_dict
    if connection.vendor == "postgresql":
        host, port = settings["HOST"] or "127.0.0.1", settings["PORT"] or 5432
        return f"postgres://{settings['USER'] or 'postgres'}@{host}:{port}/{settings['NAME']}"
    return f"sqlite:///{settings['NAME']}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Stack:
    def __init__(self, database_url: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "DATABASE_URL": database_url, "LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1"}
        self.commands: dict[str, list[str]] = {}
        self.processes: dict[str, subprocess.Popen] = {}
        self.logdir = Path(tempfile.mkdtemp(prefix="nodeflow-procs-"))
        self.kills = 0

    def add(self, name: str, args: list[str]) -> None:
        self.commands[name] = args
        self.start(name)

    def add_api(self, name: str = "api") -> None:
        self.add(name, [PYTHON, "manage.py", "nodeflow_run", "--addr", f"127.0.0.1:{self.port}", "--no-roles"])

    def add_role(self, name: str, command: str) -> None:
        self.add(name, [PYTHON, "manage.py", command])

    def add_worker(self, name: str, key: str, *queues: str) -> None:
        self.add(name, [PYTHON, str(ROOT / "tests" / "procs" / "worker.py"), self.url, key, *queues])

    def start(self, name: str) -> None:
        log = open(self.logdir / f"{name}.log", "a")  # noqa: SIM115 - closed with the process
        self.processes[name] = subprocess.Popen(self.commands[name], cwd=ROOT, env=self.env, stdout=log, stderr=log)

    def kill(self, name: str) -> None:
        process = self.processes[name]
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.kills += 1

    def restart(self, name: str) -> None:
        self.kill(name)
        self.start(name)

    def wait_for_api(self, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the API did not come up; logs in {self.logdir}")

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def logs(self) -> str:
        return "\n".join(f"== {path.name}\n{path.read_text()[-3000:]}" for path in sorted(self.logdir.glob("*.log")))
