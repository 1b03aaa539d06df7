"""Statement budgets for the worker path (docs/engine.md, "The hot path and
what it costs"): a regression that adds a round trip per result, or one per
item of a batch, fails here rather than only in the benchmark."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quotas import controls
from tests.engine_helpers import complete, poll, poll_one, register, simple, start

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


def test_a_start_and_its_view_are_one_transaction(warm):
    # One commit per start: reads after the commit would each be a
    # transaction (and a commit) of their own.
    with CaptureQueriesContext(connection) as queries:
        started = start(warm, "one")
    # The test runs in a transaction of its own, so the start's outermost
    # block shows as a savepoint: the view reads inside it.
    sql = [q["sql"] for q in queries.captured_queries]
    depth, depth_at = 0, {}
    for i, text in enumerate(sql):
        word = text.lstrip().upper()
        if word.startswith("SAVEPOINT"):
            depth += 1
        elif word.startswith(("RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")):
            depth -= 1
        depth_at[i] = depth
    task_insert = next(i for i, s in enumerate(sql) if s.startswith('INSERT INTO "executions_task"'))
    run_read = next(i for i, s in enumerate(sql) if s.startswith("SELECT") and 'FROM "executions_task"' in s)
    assert task_insert < run_read and depth_at[task_insert] > 0, [s[:90] for s in sql]
    assert depth_at[run_read] > 0, [s[:90] for s in sql]
    assert [t["status"] for t in started["tasks"]] == ["SCHEDULED"]
    assert started["tasks"][0]["blockedBy"] is None  # "work" was polled just now


def test_a_start_reads_and_writes_in_six_statements(warm, monkeypatch):
    monkeypatch.setattr(controls, "HINT_CACHE_S", 60.0)  # however slow the machine between the two starts
    start(warm, "one")  # this view reads the queue's controls and last poll
    with CaptureQueriesContext(connection) as queries:
        started = start(warm, "one")
    done = statements(queries)
    # The published snapshot's id, the namespace's start quota, insert the
    # execution, insert its first task, (on PostgreSQL the NOTIFY,) read the
    # run for the view. The view's blockedBy reads nothing more: the queue's
    # controls come from the hint cache, its recent poll from memory.
    assert len(done) <= (6 if connection.vendor == "postgresql" else 5), [s[:90] for s in done]
    assert started["tasks"][0]["blockedBy"] is None


def test_a_start_view_reads_each_queue_once_however_many_tasks(warm):
    register(warm, "fan", {
        "name": "fan", "taskReferenceName": "fan", "type": "FORK_JOIN",
        "forkTasks": [[simple(f"w{i}", "work")] for i in range(5)],
    }, {"name": "join", "taskReferenceName": "join", "type": "JOIN", "joinOn": [f"w{i}" for i in range(5)]})
    start(warm, "fan")
    with CaptureQueriesContext(connection) as queries:
        started = start(warm, "fan")
    done = statements(queries)
    ready = [t for t in started["tasks"] if t["taskDefName"] == "work"]
    assert len(ready) == 5 and all(t["blockedBy"] is None for t in ready), started["tasks"]
    assert not [s for s in done if "quotas_workerpoll" in s or "metadata_taskdefinition" in s], done
