"""The production API server, granian, behaves as docs/deployment.md says:
a kept-alive connection answers without a stall, a stop lets a waiting
long-poll answer first, and a killed worker process is replaced while the
others go on serving; a body sent chunked is read. The command is the one the benchmark's production
shape and the chaos test run (``tools.stack.granian_command``)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodeflow.keys import create_api_key
from quotas.models import WorkerPoll
from tests.keepalive_timing import assert_no_stall
from tests.procs.stack import ROOT, free_port, live_database_url
from tests.test_wsgi_bodies import check_a_chunked_start
from tests.wakeup_helpers import wait_for
from tools.stack import granian_command

REQUESTS = 40
POLL_WAIT_S = 1
QUEUE = "nothing_here"


@dataclass
class Server:
    port: int
    key: str
    process: subprocess.Popen

    def request(self, method: str, path: str, body: dict | None = None, *, timeout: float = 10) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            status, data, _ = _send(conn, method, path, self.key, body)
            return status, data
        finally:
            conn.close()

    def workers(self) -> list[int]:
        pid = self.process.pid
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]

    def serving(self, count: int) -> bool:
        """``count`` workers run granian's server threads, which start after
        the worker has loaded the application and set its signal handlers
        (a worker forked from the main process has its one thread until then)."""
        workers = self.workers()
        try:
            return len(workers) == count and all(len(os.listdir(f"/proc/{pid}/task")) > 1 for pid in workers)
        except FileNotFoundError:  # a worker exited meanwhile
            return False


def _start_granian(port: int, **sizes) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": live_database_url(), "CONN_MAX_AGE": "60"}
    return subprocess.Popen(
        granian_command(port, **sizes),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


@pytest.fixture
def server(transactional_db) -> Iterator[Server]:
    key = create_api_key(role="admin", namespace="default")[1]
    port = free_port()
    process = _start_granian(port, workers=2, threads=4)
    served = Server(port, key, process)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if served.request("GET", "/healthz", timeout=5)[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        # One worker answering is not both loaded: a stop must find both serving.
        wait_for(lambda: served.serving(2), timeout_s=30)
        yield served
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


def _send(
    conn: http.client.HTTPConnection, method: str, path: str, key: str, body: dict | None = None
) -> tuple[int, bytes, float]:
    began = time.perf_counter()
    headers = {"x-api-key": key, "Content-Type": "application/json"}
    conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    response = conn.getresponse()
    data = response.read()
    return response.status, data, time.perf_counter() - began


def test_a_kept_alive_request_is_answered_without_a_stall(server):
    assert_no_stall(server.port, "/healthz", server.key, REQUESTS)


def test_a_stop_lets_a_waiting_long_poll_answer(server):
    answered: dict = {}

    def poll() -> None:
        body = {"workerId": "w", "count": 1, "waitSeconds": POLL_WAIT_S}
        answered["answer"] = server.request("POST", f"/v1/ns/default/tasks/poll/{QUEUE}", body)

    poller = threading.Thread(target=poll)
    poller.start()
    # The poll is in the server once it has recorded it (before it parks): stop the server then.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not WorkerPoll.objects.filter(queue=QUEUE).exists():
        time.sleep(0.01)
    server.process.send_signal(signal.SIGTERM)
    poller.join(timeout=30)
    assert answered.get("answer") == (200, b"[]"), answered
    assert server.process.wait(timeout=30) == 0


def test_a_stop_while_the_workers_load_ends_within_the_kill_timeout():
    """granian forks a worker with the main process's signal handler, and the
    worker sets its own only after loading the application: a SIGTERM in
    between is lost, and without ``--workers-kill-timeout`` the stop waits
    for that worker forever (CI saw it once)."""
    process = _start_granian(free_port(), workers=2, threads=2, kill_timeout_s=2)
    booting = Server(0, "", process)
    try:
        # Stop as soon as the workers are forked: loading Django takes them about 1 s.
        wait_for(lambda: len(booting.workers()) == 2, timeout_s=20)
        assert not booting.serving(2), "the workers loaded before the stop; nothing was checked"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=15)


def test_a_killed_worker_is_replaced_while_the_other_serves(server):
    first = server.workers()
    assert len(first) == 2, first
    os.kill(first[0], signal.SIGKILL)

    def answered() -> bool:
        try:
            return server.request("GET", "/healthz", timeout=5)[0] == 200
        except OSError:
            return False

    # The other worker answers meanwhile (a connection may still reach the
    # dead one: under load, several in a row did, so the tries have a deadline).
    wait_for(answered, timeout_s=10)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = server.workers()
        if len(now) == 2 and first[0] not in now:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"the killed worker {first[0]} was not replaced: {server.workers()}")
    assert server.process.poll() is None
    assert server.request("GET", "/healthz")[0] == 200


def test_a_chunked_body_is_read(server):
    check_a_chunked_start(server.port, server.key)


def test_a_body_too_large_gets_its_413_not_a_reset(server):
    """12 MB against the 1 MiB limit: more than the sockets' buffers hold,
    so the client is still sending when the server answers."""
    status, body = server.request(
        "POST", "/v1/ns/default/executions", {"name": "big", "input": {"x": "a" * 12_000_000}}
    )
    assert status == 413 and b"PAYLOAD_TOO_LARGE" in body, body
