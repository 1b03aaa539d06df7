"""The embedded server (``nodeflow_run``, what ``make run`` starts) serves
like the production shape: a kept-alive connection answers without a stall,
request threads keep their database connections, and on PostgreSQL a task
made ready wakes long-polls through the host, not by a ``NOTIFY``.

Django's development server, which it used before, stalled about 40 ms on
every request over a kept-alive connection (headers and body in separate
writes meet Nagle and delayed ACKs): 44 ms on a kept-alive connection
against 3.3 ms on a new one. Every worker SDK keeps connections alive.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import subprocess
import time
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from executions import notify
from nodeflow.keys import create_api_key
from tests.keepalive_timing import assert_no_stall
from tests.procs.stack import PYTHON, ROOT, free_port, live_database_url
from tests.test_wsgi_bodies import check_a_chunked_start

REQUESTS = 40
APP_NAME = "nodeflow-embedded-test"


@pytest.fixture
def server(transactional_db) -> Iterator[tuple[int, str]]:
    with _serve() as served:
        yield served


@contextlib.contextmanager
def _serve(**settings: str) -> Iterator[tuple[int, str]]:
    """``nodeflow_run`` with its own defaults (``settings``: environment set)."""
    key = create_api_key(role="admin", namespace="default")[1]
    port = free_port()
    env = {**os.environ, "DATABASE_URL": live_database_url(), "PGAPPNAME": APP_NAME}
    for name in ("CONN_MAX_AGE", "NODE_FLOW_HOST_WAKE"):
        env.pop(name, None)
    env.update(settings)
    process = subprocess.Popen(
        [PYTHON, "manage.py", "nodeflow_run", "--addr", f"127.0.0.1:{port}", "--no-roles", "--threads", "4"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if _get(http.client.HTTPConnection("127.0.0.1", port, timeout=5), "/healthz", key)[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        yield port, key
    finally:
        process.terminate()
        process.wait(timeout=15)


def _get(conn: http.client.HTTPConnection, path: str, key: str) -> tuple[int, float]:
    began = time.perf_counter()
    conn.request("GET", path, headers={"x-api-key": key})
    response = conn.getresponse()
    response.read()
    return response.status, time.perf_counter() - began


@pytest.mark.parametrize("path", ["/healthz", "/v1/ns/default/metadata/task-definitions"])
def test_a_kept_alive_request_is_answered_without_a_stall(server, path):
    port, key = server
    assert_no_stall(port, path, key, REQUESTS)


@pytest.mark.postgres
def test_request_threads_keep_their_database_connections(server):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL: the server's sessions are counted in pg_stat_activity")
    port, key = server
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)

    def sessions() -> set[int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", [APP_NAME])
            return {row[0] for row in cursor.fetchall()}

    for _ in range(10):
        assert _get(conn, "/v1/ns/default/metadata/task-definitions", key)[0] == 200
    before, seen = sessions(), set()
    for _ in range(REQUESTS):
        assert _get(conn, "/v1/ns/default/metadata/task-definitions", key)[0] == 200
        seen |= sessions()
    # The sessions stay (at most one per request thread: a thread that had
    # not served a request yet may open its own), where each request used to
    # open and close one.
    assert before and before <= seen and len(seen) <= 4, f"sessions {sorted(before)} then {sorted(seen)}"


def test_a_chunked_body_is_read(server):
    check_a_chunked_start(*server)


def _post(conn: http.client.HTTPConnection, path: str, key: str, body: dict) -> int:
    conn.request("POST", path, body=json.dumps(body), headers={"x-api-key": key, "Content-Type": "application/json"})
    response = conn.getresponse()
    response.read()
    return response.status


def _ready_notices_of_a_start(port: int, key: str) -> list[str]:
    """Start a one-task execution (nothing polls its queue) while listening
    on the task channel; the notices heard before a marker sent after the
    start's commit (notices arrive in commit order)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    ns = "/v1/ns/default/"
    assert _post(conn, ns + "metadata/task-definitions", key, {"name": "embedded_t"}) in (200, 201)
    flow = {"name": "embedded_f", "tasks": [{"name": "embedded_t", "taskReferenceName": "t"}]}
    assert _post(conn, ns + "metadata/workflow-definitions", key, flow) in (200, 201)
    marker = "embedded-test-marker"
    with psycopg.connect(live_database_url(), autocommit=True) as listener:
        listener.execute(f"LISTEN {notify.TASKS_CHANNEL}")
        assert _post(conn, ns + "executions", key, {"name": "embedded_f"}) == 201
        listener.execute("SELECT pg_notify(%s, %s)", [notify.TASKS_CHANNEL, marker])
        heard = []
        for note in listener.notifies(timeout=10):
            if note.payload == marker:
                break
            heard.append(note.payload)
        else:
            raise AssertionError(f"the marker was not heard; heard {heard}")
    return [payload for payload in heard if payload.startswith(notify.READY)]


@pytest.mark.postgres
@pytest.mark.parametrize("host_wake", ["", "false"])
def test_a_ready_task_is_told_through_the_host_not_by_notify(transactional_db, host_wake):
    """The one process is on one host: its ready tasks wake its polls through
    the host (``executions.host_wake``), sparing every listening session a
    transaction per start. NODE_FLOW_HOST_WAKE=false (servers of the database
    on other hosts) brings the ready notice back."""
    if connection.vendor != "postgresql":
        pytest.skip("NOTIFY and host-local wake-ups are PostgreSQL's")
    with _serve(**({"NODE_FLOW_HOST_WAKE": host_wake} if host_wake else {})) as (port, key):
        notices = _ready_notices_of_a_start(port, key)
    assert (notices == []) == (host_wake == ""), notices
