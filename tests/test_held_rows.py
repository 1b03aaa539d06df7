"""Rows held for the next statement (``executions.sql.insert``): inside a
service transaction on PostgreSQL an insert's rows wait, and go with every
other row held, in one statement, just before the transaction's next
statement or its commit. On SQLite they go at once."""

from __future__ import annotations

import copy
import uuid

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from executions import attempts, lifecycle, runs, sql
from executions.models import Execution, Task
from nodeflow import transactions
from nodeflow.models import Namespace
from tests.engine_helpers import register, simple

pytestmark = pytest.mark.django_db

postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite sends rows at once")


def inserts(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if "INSERT INTO" in q["sql"]]


@pytest.fixture
def namespace(api) -> Namespace:
    register(api, "orders", simple("charge"))
    return Namespace.objects.get(name="default")


def start(namespace: Namespace, **fields) -> Execution:
    execution, _ = lifecycle.start_execution(namespace=namespace, name="orders", **fields)
    return execution


def served_start(namespace: Namespace) -> Execution:
    """A start in a service transaction of its own, as the start route makes it."""
    with transactions.outermost():
        return start(namespace)


@postgres_only
def test_a_start_sends_its_execution_and_first_task_in_one_statement(namespace):
    served_start(namespace)  # per-process caches
    with CaptureQueriesContext(connection) as queries:
        started = served_start(namespace)
    [statement] = inserts(queries)
    assert statement.startswith('WITH held0 AS (INSERT INTO "executions_execution"'), statement
    assert 'INSERT INTO "executions_task"' in statement
    assert Task.objects.filter(execution=started).count() == 1


@postgres_only
def test_a_bulk_start_sends_every_row_in_one_statement(api, namespace):
    api.post("executions/batch", {"executions": [{"name": "orders"}]})  # per-process caches
    with CaptureQueriesContext(connection) as queries:
        answer = api.post("executions/batch", {"executions": [{"name": "orders"}] * 5})
    assert [r["status"] for r in answer.json()["results"]] == [201] * 5
    [statement] = inserts(queries)
    assert statement.count("), (") == 2 * 4  # five rows of each table, one multi-row INSERT each
    assert Execution.objects.count() == 6 and Task.objects.count() == 6


@postgres_only
def test_rows_held_go_before_the_next_statement_which_sees_them(namespace):
    with transactions.outermost(), CaptureQueriesContext(connection) as queries:
        started = start(namespace, correlation_id="seen")
        found = Execution.objects.filter(correlation_id="seen").count()
    assert found == 1
    sent = [q["sql"] for q in queries.captured_queries]
    held = next(i for i, s in enumerate(sent) if "INSERT INTO" in s)
    assert "SELECT COUNT(*)" in sent[held + 1], sent[held:]
    assert Execution.objects.get(pk=started.pk).status == "RUNNING"


@postgres_only
def test_more_rows_than_one_statement_takes_go_in_several(api, namespace, monkeypatch):
    monkeypatch.setattr(sql, "MAX_STATEMENT_PARAMETERS", 63)  # a start holds 63: sent after each
    api.post("executions/batch", {"executions": [{"name": "orders"}]})
    with CaptureQueriesContext(connection) as queries:
        answer = api.post("executions/batch", {"executions": [{"name": "orders"}] * 4})
    assert [r["status"] for r in answer.json()["results"]] == [201] * 4
    assert len(inserts(queries)) == 4
    assert Task.objects.count() == 5


def test_a_rollback_to_a_savepoint_drops_the_rows_held_in_it(namespace):
    class Undone(Exception):
        pass

    with transactions.outermost():
        kept = start(namespace)
        with pytest.raises(Undone), transaction.atomic():
            dropped = start(namespace)
            raise Undone
    assert Execution.objects.filter(pk=kept.pk).exists()
    assert not Execution.objects.filter(pk=dropped.pk).exists()
    assert not Task.objects.filter(execution_id=dropped.pk).exists()


def test_an_error_in_rows_held_is_raised_before_the_commit_and_nothing_is_written(namespace):
    started = start(namespace)
    again = copy.copy(Execution.objects.get(pk=started.pk))
    again._state.adding = True
    with pytest.raises(IntegrityError), transactions.outermost():
        start(namespace, correlation_id="lost")
        runs.insert(again)  # the same primary key: refused when it is sent
    assert not Execution.objects.filter(correlation_id="lost").exists()
    assert Execution.objects.count() == 1


@postgres_only
def test_a_conflict_of_a_keyed_start_is_its_savepoints_and_the_batch_goes_on(api, namespace):
    """The keyed start's row is sent at its savepoint's release; the
    conflict is answered with the key's execution, and the next start's
    rows still go."""
    first = api.post("executions", {"name": "orders", "idempotencyKey": "k"}).json()
    answer = api.post(
        "executions/batch", {"executions": [{"name": "orders", "idempotencyKey": "k"}, {"name": "orders"}]}
    )
    assert [r["status"] for r in answer.json()["results"]] == [200, 201]
    assert answer.json()["results"][0]["id"] == first["id"]
    assert Execution.objects.count() == 2


@postgres_only
def test_a_statement_text_is_converted_to_postgresqls_form_once(namespace):
    """psycopg converts a statement of more than 50 parameters anew each
    time; the held rows' statement (63) is converted once per shape."""
    served_start(namespace)
    converted = sql._bound_cursor_class()._query_cls.converted
    before = converted.cache_info()
    served_start(namespace)
    after = converted.cache_info()
    assert after.misses == before.misses and after.hits > before.hits


@pytest.mark.skipif(connection.vendor == "postgresql", reason="PostgreSQL holds rows")
def test_on_sqlite_each_insert_is_sent_at_once(namespace):
    start(namespace)
    with CaptureQueriesContext(connection) as queries:
        start(namespace)
    assert [s.split("(")[0].strip() for s in inserts(queries)] == [
        'INSERT INTO "executions_execution"',
        'INSERT INTO "executions_task"',
    ]


def test_more_rows_than_a_statement_takes_are_inserted_in_several(namespace, monkeypatch):
    """Rows sent at once too (SQLite, or outside a service transaction) go
    in statements of at most ``MAX_STATEMENT_PARAMETERS`` parameters."""
    monkeypatch.setattr(sql, "MAX_STATEMENT_PARAMETERS", 80)  # two task rows (35 each) a statement
    execution = start(namespace)
    tasks = []
    for seq in range(5):
        task = copy.copy(Task.objects.get(execution=execution))
        task.pk, task.seq, task.ref, task.path = uuid.uuid4(), 100 + seq, f"more{seq}", f"more{seq}"
        task._state.adding = True
        tasks.append(task)
    with CaptureQueriesContext(connection) as queries:
        attempts.insert(tasks)
    assert len(inserts(queries)) == 3
    assert Task.objects.filter(execution=execution).count() == 6


@postgres_only
def test_a_wrapper_entered_and_left_meanwhile_leaves_the_rows_sender_in_place(namespace):
    """Django's ``execute_wrapper`` removes the last wrapper when its block
    ends; one entered after rows were held must not take their sender with
    it: the rows still go before the next statement, which sees them."""
    seen: list[str] = []

    def look(execute, statement, params, many, context):
        seen.append(statement)
        return execute(statement, params, many, context)

    with transactions.outermost():
        with connection.execute_wrapper(look):
            start(namespace, correlation_id="meanwhile")
        assert look not in connection.execute_wrappers
        assert Execution.objects.filter(correlation_id="meanwhile").count() == 1
    assert Task.objects.filter(execution__correlation_id="meanwhile").count() == 1
