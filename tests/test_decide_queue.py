"""The decide queue (``DecideRequest``) between the decider role and a
process deciding an execution itself (``executor.decide_now``, right after
the commit that asked for it).

Whoever decides an execution locks the execution's row, then deletes its
request. A decider role that claimed the request first and then waited for
the execution took the two locks the other way round: the two transactions
deadlocked, PostgreSQL aborted one of them after its ``deadlock_timeout``
(1 s), and the decision was late (seen in the chaos test's server logs). The
role claims a request through its execution's lock instead, skipping the
executions another transaction holds.
"""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from executions import executor, runs
from executions.models import DecideRequest
from nodeflow import clock
from tests.engine_helpers import register, simple, start

pytestmark = pytest.mark.django_db(transaction=True)


def _other_session() -> psycopg.Connection:
    settings = connection.settings_dict
    return psycopg.connect(
        dbname=settings["NAME"],
        user=settings["USER"],
        host=settings["HOST"],
        port=settings["PORT"] or 5432,
        password=settings["PASSWORD"] or None,
    )


def _waiting_for_a_lock(watcher: psycopg.Connection, pid: int) -> bool:
    row = watcher.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
    return bool(row) and row[0] == "Lock"


@pytest.mark.postgres
def test_the_decider_role_and_an_inline_decision_of_one_execution_do_not_deadlock(api, caplog):
    if connection.vendor != "postgresql":
        pytest.skip("row locks held by another session need PostgreSQL: SQLite has one database-wide writer")
    register(api, "idle", simple("never_polled"))
    execution_id = uuid.UUID(start(api, "idle")["id"])
    runs.request_decision(execution_id, now=clock.now(), here=False)  # due now: the role would claim it

    inline, watcher = _other_session(), _other_session()
    watcher.autocommit = True
    try:
        # decide_now's first step: the execution's row lock.
        inline.execute("SELECT 1 FROM executions_execution WHERE id = %s FOR UPDATE", [execution_id])

        role: dict = {}

        def decider_role() -> None:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    role["pid"] = cursor.fetchone()[0]
                role["claimed"] = executor.decide_next_request()
            except Exception as exc:  # noqa: BLE001 - reported by the assertions below
                role["error"] = exc
            finally:
                connection.close()

        thread = threading.Thread(target=decider_role, daemon=True)
        thread.start()
        # Either the role is done (it skipped the held execution) or it waits
        # for a lock: the wrong order, holding the request.
        deadline = time.monotonic() + 30
        while thread.is_alive() and not ("pid" in role and _waiting_for_a_lock(watcher, role["pid"])):
            assert time.monotonic() < deadline, "the decider role neither finished nor waited"
            time.sleep(0.005)

        # decide_now's second step: its request goes, in the same transaction.
        inline.execute("DELETE FROM executions_deciderequest WHERE execution_id = %s", [execution_id])
        inline.commit()
        thread.join(30)
    finally:
        inline.close()
        watcher.close()

    assert "error" not in role
    assert "backing off" not in caplog.text, caplog.text
    assert role["claimed"] is False  # nothing it could take: the one execution was held
    assert not DecideRequest.objects.filter(pk=execution_id).exists()


def test_the_decider_role_decides_the_requests_of_executions_nobody_holds(api):
    register(api, "idle", simple("never_polled"))
    held, free = (uuid.UUID(start(api, "idle")["id"]) for _ in range(2))
    for execution_id in (held, free):
        runs.request_decision(execution_id, now=clock.now(), here=False)
    if connection.vendor != "postgresql":
        assert executor.decide_next_request() and executor.decide_next_request()
        assert not DecideRequest.objects.exists()
        return
    other = _other_session()
    try:
        other.execute("SELECT 1 FROM executions_execution WHERE id = %s FOR UPDATE", [held])
        assert executor.decide_next_request() is True
        assert executor.decide_next_request() is False  # the held one is skipped, not waited for
        assert list(DecideRequest.objects.values_list("pk", flat=True)) == [held]
    finally:
        other.rollback()
        other.close()
    assert executor.decide_next_request() is True
    assert not DecideRequest.objects.exists()


def test_the_decider_role_reads_the_execution_once_per_decision(api):
    """The claim locks the execution and reads its row; the decision uses
    that row rather than locking and reading it again."""
    register(api, "idle", simple("never_polled"))
    execution_id = uuid.UUID(start(api, "idle")["id"])
    runs.request_decision(execution_id, now=clock.now(), here=False)
    with CaptureQueriesContext(connection) as queries:
        assert executor.decide_next_request() is True
    reads = [q["sql"] for q in queries.captured_queries if "executions_execution" in q["sql"].split(" WHERE ")[0]]
    assert len(reads) == 1, reads
    assert not DecideRequest.objects.exists()
