"""Statement budgets for the worker path (docs/engine.md, "The hot path and
what it costs"): a regression that adds a round trip per result, or one per
item of a batch, fails here rather than only in the benchmark."""

from __future__ import annotations

import datetime as dt
import uuid

import psycopg
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quotas import controls
from tests.engine_helpers import complete, execution, poll, poll_one, register, simple, start
from tools import stack as tools_stack

TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK")


def statements(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if not q["sql"].lstrip().upper().startswith(TRANSACTION_CONTROL)]


def results(api, leased: list[dict]) -> None:
    body = {"results": [{"taskId": t["taskId"], "leaseToken": t["leaseToken"], "status": "COMPLETED"} for t in leased]}
    response = api.post("tasks/results", body)
    assert response.status_code == 200, response.json()
    assert {answer["status"] for answer in response.json()["results"]} == {200}


@pytest.fixture
def warm(api):
    """One workflow run through first, so per-process caches (snapshots,
    task definitions, controls) are filled and not counted."""
    register(api, "one", simple("work"))
    register(api, "two", simple("first"), simple("second"))
    start(api, "one")
    complete(api, poll_one(api, "work"))
    return api


def test_a_result_that_ends_its_workflow_reads_and_writes_in_four_statements(warm):
    start(warm, "one")
    leased = poll_one(warm, "work")
    with CaptureQueriesContext(connection) as queries:
        complete(warm, leased)
    # Lock the execution through the task, read its run, write the result,
    # write the execution's end.
    assert len(statements(queries)) <= 4, [s[:90] for s in statements(queries)]


def test_a_step_schedules_the_next_task_without_reading_twice(warm):
    execution = start(warm, "two")
    leased = poll_one(warm, "first")
    with CaptureQueriesContext(connection) as queries:
        complete(warm, leased)
    done = statements(queries)
    # Lock, read the run, write the result, insert the next task (and on
    # PostgreSQL the NOTIFY that wakes its pollers).
    assert len(done) <= (5 if connection.vendor == "postgresql" else 4), [s[:90] for s in done]
    assert [t["path"] for t in poll(warm, "second")] == ["second"]
    assert warm.get(f"executions/{execution['id']}").json()["status"] == "RUNNING"


def test_a_step_that_leases_its_next_task_sends_no_ready_notice(warm):
    """Eager dispatch: the result inserts the next step and leases it in one
    transaction; no parked poller is woken for a task already taken (the
    ready notice counts the step, less what the transaction leased)."""
    assert warm.post("tasks/poll/second", {"workerId": "w"}).json() == []  # its per-process caches
    start(warm, "two")
    leased = poll_one(warm, "first")
    body = {"leaseToken": leased["leaseToken"], "status": "COMPLETED", "next": {"workerId": "w", "taskType": "second"}}
    with CaptureQueriesContext(connection) as queries:
        response = warm.post(f"tasks/{leased['taskId']}/result", body)
    assert [t["path"] for t in response.json()["next"]] == ["second"]
    done = statements(queries)
    # Lock, read the run, write the result, insert the next task already
    # leased with a look at its queue (attempts.lease_own; on SQLite insert
    # it, then lease through the gate: read the controls, pick, lease).
    assert len(done) <= (4 if connection.vendor == "postgresql" else 7), "\n".join(s[:150] for s in done)
    assert not [s for s in done if s.lstrip().startswith("SELECT pg_notify")], done


def test_a_batch_of_results_costs_the_same_statements_however_long(warm):
    counts = []
    for size in (2, 20):
        for _ in range(size):
            start(warm, "one")
        leased = poll(warm, "work", count=size)
        assert len(leased) == size
        with CaptureQueriesContext(connection) as queries:
            results(warm, leased)
        counts.append([s[:90] for s in statements(queries)])
    assert len(counts[0]) == len(counts[1]), counts
    # Lock the executions, read their runs, write the results, write the ends.
    assert len(counts[1]) <= 4, counts


@pytest.mark.postgres
def test_a_poll_is_one_statement_on_postgresql(warm):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite leases through the gate's transaction (no UPDATE … RETURNING with SKIP LOCKED)")
    start(warm, "one")
    with CaptureQueriesContext(connection) as queries:
        assert len(poll(warm, "work")) == 1
    assert len(statements(queries)) == 1, statements(queries)


def test_a_start_answers_from_the_rows_it_inserted(warm):
    """One commit per start, and its answer reads nothing back: the view is
    built from the rows the start inserted (reads after the commit would
    each be a transaction of their own)."""
    with CaptureQueriesContext(connection) as queries:
        started = start(warm, "one")
    sql = [q["sql"] for q in queries.captured_queries]
    assert any('INSERT INTO "executions_task"' in s for s in sql), sql
    assert not [s for s in sql if s.startswith("SELECT") and 'FROM "executions_task"' in s], sql
    assert [t["status"] for t in started["tasks"]] == ["SCHEDULED"]
    assert started["tasks"][0]["blockedBy"] is None  # "work" was polled just now
    assert {**started, "tasksNext": None} == execution(warm, started["id"])  # what a read of it says


def test_a_start_reads_and_writes_in_three_statements(warm, monkeypatch):
    monkeypatch.setattr(controls, "HINT_CACHE_S", 60.0)  # however slow the machine between the two starts
    start(warm, "one")  # this view reads the queue's controls and last poll
    with CaptureQueriesContext(connection) as queries:
        started = start(warm, "one")
    done = statements(queries)
    # The published snapshot's id with the namespace's start quota (one
    # statement), then on PostgreSQL the execution and its first task in
    # one statement (sql.insert holds the rows for the next one) and the
    # NOTIFY, with the COMMIT; on SQLite two inserts. The view reads
    # nothing: its rows are the ones inserted, the queue's controls come
    # from the hint cache, its recent poll from memory.
    assert len(done) <= 3, [s[:90] for s in done]
    assert "snapshot_id" in done[0] and "quotas_namespacequota" in done[0], done[0]
    assert started["tasks"][0]["blockedBy"] is None


def test_a_keyed_start_adds_one_fixed_read_of_its_key(warm, monkeypatch):
    """An idempotency key costs a start the read of the key's execution, on
    the key's unique index (the ORM's ``first()`` had compiled the query
    anew, ordered by id, each time); on PostgreSQL also its execution row's
    own statement, sent in the savepoint that catches a concurrent start's
    key, where an unkeyed start sends it with its first task's row."""
    monkeypatch.setattr(controls, "HINT_CACHE_S", 60.0)
    start(warm, "one")
    with CaptureQueriesContext(connection) as queries:
        start(warm, "one")
    plain = statements(queries)
    with CaptureQueriesContext(connection) as queries:
        start(warm, "one", idempotencyKey="k-1")
    keyed = statements(queries)
    assert len(keyed) == len(plain) + (2 if connection.vendor == "postgresql" else 1), [s[:90] for s in keyed]
    [read] = [s for s in keyed if s.lstrip().upper().startswith("SELECT") and "idempotency_key" in s]
    assert "ORDER BY" not in read.upper(), read


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_start_sends_its_ready_notice_in_the_round_trip_of_its_commit(warm):
    """The ready notice is the service transaction's last statement, sent
    with its COMMIT in one request (``transactions.with_commit``): what the
    start answers is committed, as another session sees at once."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite sends no notices: its wake-ups are in process")
    with CaptureQueriesContext(connection) as queries:
        started = start(warm, "one")
    notices = [q["sql"] for q in queries.captured_queries if "pg_notify" in q["sql"]]
    assert len(notices) == 1 and notices[0].rstrip().endswith("; COMMIT"), notices
    assert statements(queries)[-1] == notices[0]  # nothing after it in the transaction
    with psycopg.connect(tools_stack.live_database_url(), autocommit=True) as other:
        row = other.execute("SELECT status FROM executions_execution WHERE id = %s", [started["id"]]).fetchone()
    assert row == ("RUNNING",)
    assert start(warm, "one")["status"] == "RUNNING"  # the connection goes on as usual


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_commit_that_fails_with_its_notice_raises_and_writes_nothing(warm):
    """A COMMIT sent with the notice can still fail (a deferred foreign key,
    checked at commit): the error is raised from the block, nothing it
    wrote stays, and ``after`` hears that it did not commit."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite sends no notices, and checks its foreign keys at once")
    from django.db import IntegrityError

    from executions import notify, runs
    from executions.models import DecideRequest
    from nodeflow import transactions

    ended: list[bool] = []
    missing = uuid.uuid4()  # no such execution: its decide request breaks the foreign key at COMMIT
    with pytest.raises(IntegrityError), transactions.outermost():
        transactions.after(ended.append)
        runs.request_decision(missing, now=dt.datetime.now(dt.UTC), here=False)
        notify.task_ready(1, "nowhere", "worker")
    assert ended == [False]
    assert not DecideRequest.objects.filter(execution_id=missing).exists()
    assert start(warm, "one")["status"] == "RUNNING"  # the connection is usable after it


def test_a_bulk_start_reads_its_workflow_and_the_quotas_once_however_many_starts(warm):
    def bulk(count: int) -> list[str]:
        with CaptureQueriesContext(connection) as queries:
            response = warm.post("executions/batch", {"executions": [{"name": "one"}] * count})
        assert {answer["status"] for answer in response.json()["results"]} == {201}
        return statements(queries)

    one, ten = bulk(1), bulk(10)
    # Per start, only its own rows (the execution, its first task): on
    # PostgreSQL every start's rows go in one statement (sql.insert holds
    # them); the published snapshot and the namespace's quotas are read once.
    per_start = 0 if connection.vendor == "postgresql" else 2
    assert len(ten) - len(one) == 9 * per_start, "\n".join(s[:90] for s in ten)
    snapshot_reads = [s for s in ten if "snapshot_id" in s and s.lstrip().upper().startswith("SELECT")]
    assert len(snapshot_reads) == 1, snapshot_reads


def test_a_bulk_start_takes_no_savepoint_for_a_start_without_a_key(warm):
    """A start's refusal is raised before it writes anything, and after its
    own block has ended (executor.start): the batch goes on in its
    transaction with no savepoint per start. A keyed start's insert has
    one (a concurrent start with the key may win), and only that."""
    register(warm, "capped", simple("work"), maxConcurrentExecutions=1)

    def savepoints(starts: list[dict], answers: list[int]) -> int:
        with CaptureQueriesContext(connection) as queries:
            response = warm.post("executions/batch", {"executions": starts})
        assert [answer["status"] for answer in response.json()["results"]] == answers
        return len([q for q in queries.captured_queries if q["sql"].upper().startswith("SAVEPOINT")])

    one = savepoints([{"name": "one"}], [201])
    assert (
        savepoints([{"name": "one"}, {"name": "capped"}, {"name": "capped"}, {"name": "nobody"}], [201, 201, 429, 404])
        == one
    )
    keyed = [{"name": "one", "idempotencyKey": "k1"}, {"name": "one", "idempotencyKey": "k2"}]
    assert savepoints(keyed, [201, 201]) == one + 2


def test_a_start_view_reads_each_queue_once_however_many_tasks(warm):
    register(
        warm,
        "fan",
        {
            "name": "fan",
            "taskReferenceName": "fan",
            "type": "FORK_JOIN",
            "forkTasks": [[simple(f"w{i}", "work")] for i in range(5)],
        },
        {"name": "join", "taskReferenceName": "join", "type": "JOIN", "joinOn": [f"w{i}" for i in range(5)]},
    )
    start(warm, "fan")
    with CaptureQueriesContext(connection) as queries:
        started = start(warm, "fan")
    done = statements(queries)
    ready = [t for t in started["tasks"] if t["taskDefName"] == "work"]
    assert len(ready) == 5 and all(t["blockedBy"] is None for t in ready), started["tasks"]
    assert not [s for s in done if "quotas_workerpoll" in s or "metadata_taskdefinition" in s], done


# --- executions/sql.py: the fixed statements themselves ---------------------


def _task_ids(api, count: int) -> list:
    from executions.models import Task

    for _ in range(count):
        start(api, "one")
    return list(Task.objects.filter(status="SCHEDULED").values_list("id", flat=True))


def test_a_list_condition_is_one_parameter_and_an_empty_list_matches_nothing(warm):
    from executions import sql
    from executions.models import Task

    ids = _task_ids(warm, 3)
    for wanted in (ids, ids[:1], [], [str(pk) for pk in ids]):
        condition, params = sql.any_of(Task, "id", wanted)
        found = sql.rows(Task, f"SELECT {sql.columns(Task)} FROM {sql.table(Task)} WHERE {condition}", params)
        assert {str(t.id) for t in found} == {str(pk) for pk in wanted}
        if connection.vendor == "postgresql":
            assert len(params) == 1  # the text stays the same for any number of ids
    assert sql.update(Task, values={"reason_for_incompletion": "x"}, where={"id": ids, "status": "SCHEDULED"}) == 3
    assert sql.update(Task, values={"reason_for_incompletion": "y"}, where={"id": []}) == 0


def test_a_narrow_read_defers_the_other_columns_and_loads_them_on_demand(warm):
    from executions import executor, sql
    from executions.models import Task

    ids = _task_ids(warm, 1)
    condition, params = sql.any_of(Task, "id", ids)
    fields = executor.DECIDING_TASK_FIELDS
    (task,) = sql.rows(
        Task,
        f"SELECT {sql.columns(Task, fields=fields)} FROM {sql.table(Task)} WHERE {condition}",
        params,
        fields=fields,
    )
    assert "idempotency_key" not in task.__dict__ and task.get_deferred_fields() >= {"idempotency_key"}
    full = Task.objects.get(pk=task.id)
    with CaptureQueriesContext(connection) as queries:
        assert task.idempotency_key == full.idempotency_key  # read on demand, as QuerySet.only does
    assert len(queries.captured_queries) == 1
    for name in ("scheduled_at", "available_at", "policy", "input", "output", "logs"):
        assert getattr(task, name) == getattr(full, name)
    assert task.scheduled_at.tzinfo is full.scheduled_at.tzinfo  # the same datetimes as the ORM's


def test_a_repeated_statement_is_prepared_on_postgresql(warm, settings):
    from executions import sql
    from executions.models import Task

    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's")
    settings.NODE_FLOW_PREPARED_STATEMENTS = True
    connection.ensure_connection()
    connection.connection.prepare_threshold = None  # as Django leaves it: sql.cursor() turns it on
    marker = "/* prepared-test */"
    for _ in range(sql.PREPARE_THRESHOLD + 1):
        sql.rows(Task, f"SELECT {sql.columns(Task)} FROM {sql.table(Task)} WHERE id = %s {marker}", [uuid.uuid4()])
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", [f"%{marker}%"])
        assert cursor.fetchone()[0] == 1


def test_equal_values_share_a_key_and_different_types_do_not(warm):
    from executions import sql

    assert sql.same_values_key({"output": {"a": 1}, "status": "COMPLETED"}) == sql.same_values_key(
        {"output": {"a": 1}, "status": "COMPLETED"}
    )
    keys = {sql.same_values_key({"output": {"a": value}}) for value in (1, 1.0, True, "1", None, [1])}
    assert len(keys) == 6
    # Column values themselves too: equal in Python, not as columns.
    keys = {sql.same_values_key({"attempt": value}) for value in (1, 1.0, True, "1", None, [1], {"1": 1})}
    assert len(keys) == 7
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert sql.same_values_key({"ended_at": at}) == sql.same_values_key({"ended_at": at.replace()})
    assert sql.same_values_key({"ended_at": at}) != sql.same_values_key({"ended_at": at + dt.timedelta(microseconds=1)})
    assert sql.same_values_key({"output": {}}) != sql.same_values_key({"variables": {}})
