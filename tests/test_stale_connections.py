"""A persistent connection the server closed (a restart, a terminated
backend) is dropped before it is used: the request after it succeeds."""

from __future__ import annotations

import time

import psycopg
import pytest
from django.db import connection

from nodeflow.stale_connections import close_dead_connections
from tests.procs.stack import live_database_url

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no server to close a connection")


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def terminate(pid: int) -> None:
    with psycopg.connect(live_database_url(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


def wait_until_dead(pid: int) -> None:
    """pg_terminate_backend only signals: wait (bounded) for the backend to go."""
    give_up = time.monotonic() + 5
    with psycopg.connect(live_database_url(), autocommit=True) as other:
        while other.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
            assert time.monotonic() < give_up, "the backend did not end"
            time.sleep(0.02)


def test_it_leaves_a_live_connection_open():
    pid = backend_pid()
    assert close_dead_connections() == 0
    assert backend_pid() == pid


def test_it_closes_a_connection_whose_backend_was_terminated():
    pid = backend_pid()
    terminate(pid)
    wait_until_dead(pid)
    assert close_dead_connections() == 1
    assert backend_pid() != pid  # a new connection


def test_the_first_request_after_the_server_closed_its_connection_succeeds(client):
    pid = backend_pid()
    terminate(pid)
    wait_until_dead(pid)
    response = client.get("/healthz")  # checks the database with a query
    assert response.status_code == 200, response.json()
    assert backend_pid() != pid
