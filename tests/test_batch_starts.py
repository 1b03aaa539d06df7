"""POST …/executions/batch: up to 100 starts in one request, each through
the one start path (every control on starts holds), each with its own
idempotencyKey and its own answer; one refused start spoils no other."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections, transaction

from executions.models import Execution
from nodeflow import clock
from tests.engine_helpers import execution, register, simple
from tests.wakeup_helpers import wait_for

pytestmark = pytest.mark.django_db


def batch(api, *starts: dict):
    return api.post("executions/batch", {"executions": list(starts)})


def test_it_starts_each_and_answers_each_in_order(api):
    register(api, "orders", simple("charge"))
    answer = batch(api, {"name": "orders", "input": {"n": 1}}, {"name": "orders", "input": {"n": 2}, "priority": 3})
    assert answer.status_code == 200, answer.json()
    results = answer.json()["results"]
    assert [(r["status"], r["executionStatus"]) for r in results] == [(201, "RUNNING"), (201, "RUNNING")]
    views = [execution(api, r["id"]) for r in results]
    assert [v["input"] for v in views] == [{"n": 1}, {"n": 2}]
    assert views[1]["priority"] == 3
    assert all(v["tasks"][0]["status"] == "SCHEDULED" for v in views)


def test_an_idempotency_key_gives_the_same_execution(api):
    register(api, "orders", simple("charge"))
    first = batch(api, {"name": "orders", "idempotencyKey": "k1"}).json()["results"][0]
    again = batch(api, {"name": "orders", "idempotencyKey": "k1"}, {"name": "orders", "idempotencyKey": "k2"})
    results = again.json()["results"]
    assert [r["status"] for r in results] == [200, 201]
    assert results[0]["id"] == first["id"]
    assert Execution.objects.count() == 2


def test_a_refused_start_spoils_no_other(api):
    register(api, "orders", simple("charge"), maxConcurrentExecutions=1)
    results = batch(api, {"name": "orders"}, {"name": "missing"}, {"name": "orders"}).json()["results"]
    assert [r["status"] for r in results] == [201, 404, 429]
    assert results[1]["error"] == "NOT_FOUND"
    assert results[2]["error"] and results[2]["message"]
    assert Execution.objects.count() == 1  # the cap held for the third


def test_a_refusal_after_a_write_fails_the_whole_batch_and_stores_nothing(api, monkeypatch):
    """The start path refuses before it writes; were a start ever refused
    after writing, the batch would not answer for it as if it had written
    nothing: the whole batch is refused, and nothing of it stored."""
    from executions import executor
    from nodeflow.errors import Conflict

    register(api, "orders", simple("charge"))
    calls = iter(range(3))

    def record(execution):
        if next(calls) == 1:
            raise Conflict("refused after its rows were written")

    monkeypatch.setattr(executor.metrics, "record_workflow_start", record)
    answer = batch(api, {"name": "orders"}, {"name": "orders"}, {"name": "orders"})
    assert answer.status_code == 409, answer.json()
    assert not Execution.objects.exists()


def test_a_namespace_quota_holds(api):
    register(api, "orders", simple("charge"))
    assert api.put("quotas", {"maxConcurrentExecutions": 2}).status_code == 200
    results = batch(api, *[{"name": "orders"} for _ in range(4)]).json()["results"]
    assert [r["status"] for r in results] == [201, 201, 429, 429]


def test_the_per_minute_quota_counts_the_starts_before_it_in_the_batch(api, frozen_clock):
    register(api, "orders", simple("charge"))
    assert api.put("quotas", {"maxExecutionsPerMinute": 2}).status_code == 200
    results = batch(api, *[{"name": "orders"} for _ in range(3)]).json()["results"]
    assert [r["status"] for r in results] == [201, 201, 429]
    assert (results[2]["quota"], results[2]["limit"], results[2]["current"]) == ("maxExecutionsPerMinute", 2, 2)
    clock.advance(60)
    assert [r["status"] for r in batch(api, {"name": "orders"}).json()["results"]] == [201]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"executions": []}, "executions"),
        ({"executions": [{"name": "orders"}] * 101}, "executions"),
        ({"executions": [{"name": "orders"}, {"name": "orders", "bogus": 1}]}, "executions[1].bogus"),
        ({"executions": [{"input": {}}]}, "executions[0].name"),
        ({"starts": []}, "starts"),
    ],
)
def test_a_malformed_batch_is_refused_whole_naming_the_field(api, body, field):
    register(api, "orders", simple("charge"))
    answer = api.post("executions/batch", body)
    assert answer.status_code == 400, answer.json()
    assert answer.json()["field"] == field
    assert not Execution.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_batch_is_one_commit_and_each_start_sees_those_before_it(api, monkeypatch):
    register(api, "one", simple("work"))
    commits: list[int] = []
    commit = connection.commit

    def counting() -> None:
        commits.append(1)
        commit()

    monkeypatch.setattr(connection, "commit", counting)
    body = {
        "executions": [
            {"name": "one", "idempotencyKey": "same"},
            {"name": "one"},
            {"name": "one", "idempotencyKey": "same"},
        ]
    }
    response = api.post("executions/batch", body)
    assert response.status_code == 200, response.json()
    answers = response.json()["results"]
    assert [a["status"] for a in answers] == [201, 201, 200]
    assert answers[0]["id"] == answers[2]["id"]
    assert len(commits) == 1


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="two connections racing for one key: PostgreSQL's row locks"
)
@pytest.mark.django_db(transaction=True)
def test_a_key_another_start_takes_meanwhile_gives_its_execution_and_spoils_no_other(api):
    """A keyed start whose key another start holds, not yet committed: the
    batch's insert waits for it, then conflicts. The batch's rows are held
    and sent together (sql.insert), yet the conflict is raised in the keyed
    insert's savepoint (at its release, the next statement): the answer is the other start's execution (200),
    and the start after it in the batch is written."""
    from executions import lifecycle
    from nodeflow.models import Namespace

    register(api, "orders", simple("charge"))
    namespace = Namespace.objects.get(name="default")
    holding, release = threading.Event(), threading.Event()
    held: dict = {}

    def hold_the_key() -> None:
        try:
            with transaction.atomic():
                held["execution"], _ = lifecycle.start_execution(
                    namespace=namespace, name="orders", idempotency_key="k"
                )
                holding.set()
                release.wait(30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_the_key)
    holder.start()
    answers: dict = {}

    def start_the_batch() -> None:
        try:
            starts = [{"name": "orders", "idempotencyKey": "k"}, {"name": "orders"}]
            answers["results"] = lifecycle.start_executions(
                namespace=namespace, starts=[{"input": {}, "priority": 0, **start} for start in starts]
            )
        finally:
            connections.close_all()

    assert holding.wait(30)
    batch_thread = threading.Thread(target=start_the_batch)
    batch_thread.start()

    def batch_waits_for_the_key() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            return cursor.fetchone()[0] == 1

    try:
        wait_for(batch_waits_for_the_key, timeout_s=30)
    finally:
        release.set()
        holder.join(30)
        batch_thread.join(30)
    results = answers["results"]
    assert [r["status"] for r in results] == [200, 201], results
    assert results[0]["id"] == str(held["execution"].id)
    assert Execution.objects.count() == 2
