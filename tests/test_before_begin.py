"""A service transaction that begins only when it must
(``nodeflow.transactions``: ``before_begin``, ``on_its_own``): on
PostgreSQL a start that locks nothing reads before its transaction begins
and sends its rows and its ready notice as one statement on its own, so no
``BEGIN`` and no ``COMMIT`` go to the server; anything that writes or locks
first begins the transaction as before. What is sent is read off libpq's
own trace of the connection, not off Django's query log (which logs a
``BEGIN`` for every atomic block, sent or not)."""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import re
import tempfile
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from django.db import IntegrityError, connection

from executions import attempts, notify, runs
from executions.models import DecideRequest, Execution, Task
from nodeflow import transactions
from tests.engine_helpers import complete, poll_one, register, simple, start
from tools import stack as tools_stack

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite has no round trips to save"),
]

# A message the client sends that runs a statement: a simple Query, or
# the Parse of an extended one (a prepared statement's Bind names no text).
_SENT = re.compile(r"\tF\t\d+\t(Query|Parse|Bind)\t(.*)")


class Sent(list):
    """What one block sent to the server, a (message, text) per message."""

    def texts(self) -> list[str]:
        """The statements' texts (a prepared statement's Bind names no text)."""
        return [text for message, text in self if message != "Bind"]

    def round_trips(self) -> int:
        """Statements run: each simple Query and each Bind (one per extended statement)."""
        return sum(1 for message, _ in self if message in ("Query", "Bind"))

    def transaction_control(self) -> list[str]:
        return [
            text for message, text in self if message == "Query" and re.search(r"\b(BEGIN|COMMIT|ROLLBACK)\b", text)
        ]


def _text(message: str, rest: str) -> str:
    """A Query's text; a Parse's statement text; a Bind's statement name."""
    if message == "Query":  # "text"
        return rest.strip()[1:-1]
    _, _, after = rest.strip()[1:].partition('" "')  # "name" "text" or "portal" "statement" …
    return after[: after.rindex('"')] if message == "Parse" else after[: after.index('"')]


@contextlib.contextmanager
def traced() -> Iterator[Sent]:
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    sent = Sent()
    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            yield sent
        finally:
            pgconn.untrace()
        trace.seek(0)
        for line in trace:
            found = _SENT.search("\t" + line)
            if found:
                sent.append((found.group(1), _text(found.group(1), found.group(2))))


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


def test_a_start_that_locks_nothing_sends_no_begin_and_no_commit(warm):
    with traced() as sent:
        started = start(warm, "one")
    assert sent.transaction_control() == [], sent.texts()
    # Its read, then its execution, its first task and its ready notice in one statement.
    assert sent.round_trips() == 2, sent.texts()
    [written] = [text for text in sent.texts() if "INSERT INTO" in text]
    assert 'INSERT INTO "executions_task"' in written and "pg_notify" in written, written
    assert seen_by_another_session(started["id"]) == ("RUNNING",)
    assert connection.get_autocommit() and connection.connection.autocommit  # left as Django left it
    assert start(warm, "one")["status"] == "RUNNING"  # and the connection goes on as usual


def test_a_bulk_start_is_two_statements_however_many_starts(warm):
    with traced() as sent:
        answer = warm.post("executions/batch", {"executions": [{"name": "one"}] * 20})
    assert [r["status"] for r in answer.json()["results"]] == [201] * 20
    assert sent.transaction_control() == [] and sent.round_trips() == 2, sent.texts()
    assert Execution.objects.count() == 23 and Task.objects.count() == 23


def test_a_start_under_a_start_quota_begins_its_transaction_to_lock_it(warm):
    """The quota row's lock needs a transaction: it begins there, after the
    unlocked read, and the quota still holds."""
    with traced() as sent:
        start(warm, "capped")
    begin, commit = sent.transaction_control()
    assert begin == "BEGIN" and "pg_notify" in commit and commit.endswith("; COMMIT"), sent.texts()
    for _ in range(3):
        start(warm, "capped")
    refused = warm.post("executions", {"name": "capped"})
    assert refused.status_code == 429, refused.json()
    assert Execution.objects.filter(name="capped").count() == 5


def test_a_keyed_start_begins_its_transaction_for_its_savepoint(warm):
    with traced() as sent:
        first = start(warm, "one", idempotencyKey="k-1")
    assert sent.transaction_control()[0] == "BEGIN", sent.texts()
    assert start(warm, "one", idempotencyKey="k-1", expect=200)["id"] == first["id"]


def test_a_statement_on_its_own_that_fails_writes_nothing(warm):
    """Its deferred foreign key is checked at the statement's own commit:
    the error is raised from the block and nothing is written."""
    ended: list[bool] = []
    orphan = copy.copy(Task.objects.first())
    orphan.id, orphan.execution_id, orphan._state.adding = uuid.uuid4(), uuid.uuid4(), True  # no such execution
    with traced() as sent, pytest.raises(IntegrityError), transactions.outermost():
        transactions.after(ended.append)
        attempts.insert([orphan])
        notify.task_ready(1, "nowhere", "worker")
    assert sent.transaction_control() == [] and sent.round_trips() == 1, sent.texts()
    assert "pg_notify" in sent.texts()[0]
    assert ended == [False]
    assert not Task.objects.filter(pk=orphan.id).exists()
    assert start(warm, "one")["status"] == "RUNNING"


def test_a_notice_alone_goes_on_its_own(warm):
    with traced() as sent, transactions.outermost():
        notify.task_ready(1, "nowhere", "worker")
    assert sent.transaction_control() == [] and sent.round_trips() == 1, sent.texts()
    assert "pg_notify" in sent.texts()[0]


def test_a_read_before_begin_after_rows_are_held_runs_in_the_transaction(warm):
    """Once something waits to be sent, a read goes in the transaction:
    the rows held are sent before it, and must not commit on their own."""

    class Failed(Exception):
        pass

    missing = uuid.uuid4()
    with traced() as sent, pytest.raises(Failed), transactions.outermost():
        runs.request_decision(missing, now=dt.datetime.now(dt.UTC), here=False)
        with transactions.before_begin():
            Execution.objects.count()
        assert not transactions.unbegun()
        raise Failed  # the service fails: nothing it held may stay
    assert sent.transaction_control() == ["BEGIN", "ROLLBACK"], sent.texts()
    assert not DecideRequest.objects.filter(execution_id=missing).exists()


def test_a_read_before_begin_leaves_the_transaction_to_begin_with_the_first_write(warm):
    with traced() as sent, transactions.outermost():
        with transactions.before_begin():
            assert Execution.objects.count() == 3
        assert transactions.unbegun()
        Execution.objects.filter(name="nobody").update(priority=1)  # a write begins it
        assert not transactions.unbegun()
    assert sent.transaction_control() == ["BEGIN", "COMMIT"], sent.texts()
    assert sent.texts()[0].startswith("SELECT COUNT(*)") and sent.texts()[1] == "BEGIN"
