"""A service transaction that its first reads begin
(``nodeflow.transactions``: ``with_begin``, ``closing``): on PostgreSQL
a start that locks nothing sends its ``BEGIN`` with its read, then its
rows and its ready notice as one statement with its ``COMMIT`` (psycopg's
pipeline mode): two round trips, one commit. Any other statement first
leaves the pipeline, and the transaction goes on as before. What is sent
is read off libpq's own trace of the connection, not off Django's query
log (which logs a ``BEGIN`` for every atomic block, sent or not)."""

from __future__ import annotations

import copy
import uuid

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from executions import attempts, notify
from executions.models import Execution, Task
from nodeflow import transactions
from tests.engine_helpers import complete, poll_one, register, simple, start
from tests.libpq_trace import traced
from tools import stack as tools_stack

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite has no round trips to save"),
]


@pytest.fixture
def warm(api):
    """Starts made before, so per-process caches (snapshots, controls, the
    queue's last poll) are filled and the start reads only what it must."""
    register(api, "one", simple("work"))
    register(api, "capped", simple("work"), maxConcurrentExecutions=5)
    start(api, "one")
    complete(api, poll_one(api, "work"))
    start(api, "one")
    start(api, "capped")
    return api


def seen_by_another_session(execution_id: str) -> tuple | None:
    with psycopg.connect(tools_stack.live_database_url(), autocommit=True) as other:
        return other.execute("SELECT status FROM executions_execution WHERE id = %s", [execution_id]).fetchone()


def test_a_start_that_locks_nothing_is_two_round_trips(warm):
    with traced() as sent, CaptureQueriesContext(connection) as queries:
        started = start(warm, "one")
    # BEGIN with its read; its execution, its first task and its ready
    # notice in one statement, with the COMMIT.
    assert sent.transaction_control() == ["BEGIN", "COMMIT"] and sent.round_trips() == 2, sent
    read, written = [q["sql"] for q in queries.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")]
    assert read.startswith("SELECT") and "snapshot_id" in read, read
    assert written.startswith('WITH held0 AS (INSERT INTO "executions_execution"'), written
    assert 'INSERT INTO "executions_task"' in written and "SELECT pg_notify" in written, written
    assert seen_by_another_session(started["id"]) == ("RUNNING",)
    assert connection.get_autocommit() and connection.connection.autocommit  # left as Django left it
    assert start(warm, "one")["status"] == "RUNNING"  # and the connection goes on as usual


def test_a_bulk_start_is_two_round_trips_however_many_starts(warm):
    with traced() as sent:
        answer = warm.post("executions/batch", {"executions": [{"name": "one"}] * 20})
    assert [r["status"] for r in answer.json()["results"]] == [201] * 20
    assert sent.transaction_control() == ["BEGIN", "COMMIT"] and sent.round_trips() == 2, sent
    assert Execution.objects.count() == 23 and Task.objects.count() == 23


def test_a_start_under_a_workflow_limit_leaves_the_pipeline_to_lock_it(warm):
    """The workflow's lock leaves the pipeline (its sync takes the round
    trip ``BEGIN`` took before), and the limit still holds."""
    with traced() as sent:
        start(warm, "capped")
    begin, commit = sent.transaction_control()
    assert begin == "BEGIN" and "pg_notify" in commit and commit.endswith("; COMMIT"), sent
    # The read; BEGIN with the sync; the workflow's lock, its count of
    # running executions; the rows; the notice with the COMMIT: as many
    # round trips as when BEGIN went first.
    assert sent.round_trips() == 6, sent
    for _ in range(3):
        start(warm, "capped")
    refused = warm.post("executions", {"name": "capped"})
    assert refused.status_code == 429, refused.json()
    assert Execution.objects.filter(name="capped").count() == 5


def test_a_keyed_start_leaves_the_pipeline_for_its_savepoint(warm):
    with traced() as sent:
        first = start(warm, "one", idempotencyKey="k-1")
    assert sent.transaction_control()[0] == "BEGIN", sent
    assert start(warm, "one", idempotencyKey="k-1", expect=200)["id"] == first["id"]


def test_a_closing_statement_that_fails_writes_nothing(warm):
    """Its deferred foreign key is checked at the ``COMMIT`` sent with it:
    the error is raised from the block and nothing is written."""
    ended: list[bool] = []
    orphan = copy.copy(Task.objects.first())
    orphan.id, orphan.execution_id, orphan._state.adding = uuid.uuid4(), uuid.uuid4(), True  # no such execution
    with traced() as sent, pytest.raises(IntegrityError), transactions.outermost():
        transactions.after(ended.append)
        with transactions.with_begin():
            Execution.objects.count()
        attempts.insert([orphan])
        notify.task_ready(1, "nowhere", "worker")
    assert sent.transaction_control() == ["BEGIN", "COMMIT"] and sent.round_trips() == 2, sent
    assert "pg_notify" in sent.texts()[-2]
    assert ended == [False]
    assert not Task.objects.filter(pk=orphan.id).exists()
    assert start(warm, "one")["status"] == "RUNNING"  # the connection goes on as usual


def test_a_notice_alone_closes_the_transaction(warm):
    with traced() as sent, transactions.outermost():
        with transactions.with_begin():
            Execution.objects.count()
        notify.task_ready(1, "nowhere", "worker")
    assert sent.transaction_control() == ["BEGIN", "COMMIT"] and sent.round_trips() == 2, sent
    assert sent.texts()[-2].startswith("SELECT pg_notify"), sent


def test_a_service_that_only_reads_commits_with_the_sync(warm):
    with traced() as sent, transactions.outermost(), transactions.with_begin():
        assert Execution.objects.count() == 3
    # The read's flush; the COMMIT with the sync.
    assert sent.transaction_control() == ["BEGIN", "COMMIT"] and sent.round_trips() == 2, sent
    assert connection.get_autocommit() and connection.connection.autocommit


def test_an_error_after_the_reads_leaves_the_connection_usable(warm):
    class Failed(Exception):
        pass

    with pytest.raises(Failed), transactions.outermost():
        with transactions.with_begin():
            Execution.objects.count()
        raise Failed
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert start(warm, "one")["status"] == "RUNNING"


def test_a_read_with_begin_after_rows_are_held_runs_in_the_transaction(warm):
    """Once rows wait to be sent, a read goes in the transaction as any
    statement does: the rows held are sent before it, and are not
    committed when the service then fails."""

    class Failed(Exception):
        pass

    held = copy.copy(Task.objects.first())
    held.id, held.path, held._state.adding = uuid.uuid4(), "held", True
    with traced() as sent, pytest.raises(Failed), transactions.outermost():
        attempts.insert([held])
        with transactions.with_begin():
            Execution.objects.count()
        assert not transactions.pipelined()
        raise Failed  # the service fails: nothing it held may stay
    assert sent.transaction_control() == ["BEGIN", "ROLLBACK"], sent
    inserted, read = sent.texts()[1:3]  # after psycopg's BEGIN
    assert inserted.startswith('INSERT INTO "executions_task"') and read.startswith("SELECT COUNT(*)"), sent
    assert not Task.objects.filter(pk=held.id).exists()


def test_a_write_after_the_reads_leaves_the_pipeline(warm):
    """The write leaves the pipeline; it and a savepoint then run as in any
    transaction, the read's included, which Django commits."""
    with traced() as sent, transactions.outermost():
        with transactions.with_begin():
            first = Execution.objects.order_by("created_at").first()
        assert transactions.pipelined()
        with transaction.atomic():  # a savepoint: only an explicit transaction has them
            Execution.objects.filter(pk=first.pk).update(priority=7)
        assert not transactions.pipelined()
    assert sent.transaction_control() == ["BEGIN", "COMMIT"], sent
    assert sent.texts()[1].startswith("SELECT"), sent  # the read, in the transaction
    with psycopg.connect(tools_stack.live_database_url(), autocommit=True) as other:
        seen = other.execute("SELECT priority FROM executions_execution WHERE id = %s", [first.pk]).fetchone()
    assert seen == (7,)
