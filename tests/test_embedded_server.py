"""The embedded server (``nodeflow_run``, what ``make run`` starts) serves
like the production shape: a kept-alive connection answers without a stall,
and request threads keep their database connections.

Django's development server, which it used before, stalled about 40 ms on
every request over a kept-alive connection (headers and body in separate
writes meet Nagle and delayed ACKs): 44 ms on a kept-alive connection
against 3.3 ms on a new one. Every worker SDK keeps connections alive.
"""

from __future__ import annotations

import http.client
import os
import subprocess
import time
from collections.abc import Iterator

import pytest
from django.db import connection

from nodeflow.keys import create_api_key
from tests.keepalive_timing import assert_no_stall
from tests.procs.stack import PYTHON, ROOT, free_port, live_database_url
from tests.test_wsgi_bodies import check_a_chunked_start

REQUESTS = 40
APP_NAME = "nodeflow-embedded-test"


@pytest.fixture
def server(transactional_db) -> Iterator[tuple[int, str]]:
    key = create_api_key(role="admin", namespace="default")[1]
    port = free_port()
    env = {**os.environ, "DATABASE_URL": live_database_url(), "PGAPPNAME": APP_NAME}
    env.pop("CONN_MAX_AGE", None)
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
